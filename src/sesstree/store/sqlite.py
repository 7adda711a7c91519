"""The embedded default backend: one SQLite file in WAL mode.

Layout and why:

- ``nodes`` rows get an integer ``seq`` in insertion order and point to their parent by ``seq``.
  A session appended in order therefore lies in one contiguous run of rows, so a chain is read
  as a few range scans (``seq BETWEEN a AND b``) instead of one index lookup per node.
- ``depth`` (1 for a root) is a derived index: it gives a session's length in O(1) and the size
  of the range to read. ``fsck`` recomputes it.
- Data larger than ``BLOB_MIN`` bytes lives once in ``blobs``, keyed by its blake3 hash, so the
  same 200 KB tool result in a thousand sessions is stored once.
- ``refs`` change only by compare-and-set; triggers write the reflog row in the same statement,
  so a ref can never move without its log entry.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from blake3 import blake3

from ..errors import (
    ConflictError,
    StoreCorruptError,
    StoreFormatError,
    StoreLockedError,
    StoreNotFoundError,
)
from ..node import ID_VERSION, NodeId
from .base import Chain, RawNode, Ref, RefUpdate, ReflogEntry, StoredNode, describe

__all__ = ["FORMAT_VERSION", "SqliteBackend"]

FORMAT_VERSION = 1
BLOB_MIN = 1024
_CACHE_MAX = 200_000

_SCHEMA = [
    s.strip() + ("; END" if "TRIGGER" in s else "")
    for s in """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE blobs(bid INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, data BLOB NOT NULL);
CREATE TABLE nodes(
    seq INTEGER PRIMARY KEY,
    id BLOB NOT NULL UNIQUE,
    parent INTEGER,
    depth INTEGER NOT NULL,
    type TEXT NOT NULL,
    data BLOB,
    bid INTEGER
);
CREATE TABLE refs(
    name TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    moved REAL NOT NULL,
    reason TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE reflog(
    n INTEGER PRIMARY KEY,
    ref TEXT NOT NULL,
    old INTEGER,
    new INTEGER,
    time REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX reflog_ref ON reflog(ref);
CREATE TRIGGER refs_created AFTER INSERT ON refs BEGIN
    INSERT INTO reflog(ref, old, new, time, reason)
    VALUES (new.name, NULL, new.seq, new.moved, new.reason);
END;
CREATE TRIGGER refs_moved AFTER UPDATE ON refs BEGIN
    INSERT INTO reflog(ref, old, new, time, reason)
    VALUES (new.name, old.seq, new.seq, new.moved, new.reason);
END;
""".replace("END;", "").split(";")
    if s.strip()
]

_NODE_COLS = "n.seq, n.id, n.parent, n.type, coalesce(n.data, (SELECT data FROM blobs WHERE bid = n.bid))"
_msgpack = msgspec.msgpack.Decoder()


def _decode_many(raws: list[bytes]) -> list[Any]:
    """Decode many msgpack values in one call by framing them as one array."""
    n = len(raws)
    if n < 16:
        head = bytes([0x90 | n])
    elif n < 0x10000:
        head = b"\xdc" + struct.pack(">H", n)
    else:
        head = b"\xdd" + struct.pack(">I", n)
    result: list[Any] = _msgpack.decode(head + b"".join(raws))
    return result


class _Pending(msgspec.Struct):
    old: int | None
    new: int | None
    count: int
    reason: str


class SqliteBackend:
    """A store in one SQLite file. See the module docstring for the layout."""

    def __init__(
        self, path: str | os.PathLike[str], *, create: bool = True, durable: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.path = Path(path)
        exists = self.path.exists()
        if not exists and not create:
            raise StoreNotFoundError(f"no store at {self.path}")
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, timeout=timeout, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreCorruptError(f"cannot open store {self.path}: {exc}") from None
        self._lock = threading.RLock()
        self._batch_depth = 0
        self._pending: dict[str, _Pending] = {}
        self._txn_new: list[bytes] = []
        # id -> (seq, depth) of nodes known to be stored: saves a lookup per append.
        self._known: dict[bytes, tuple[int, int]] = {}
        try:
            self._open(exists and self.path.stat().st_size > 0, durable)
        except BaseException:
            self._db.close()
            raise

    # -- opening -----------------------------------------------------------------------------

    def _open(self, exists: bool, durable: bool) -> None:
        db = self._db
        with self._errors():
            if exists:
                # Read before any write: a damaged or newer store must stay exactly as it is.
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
                if "meta" not in tables or "nodes" not in tables:
                    raise StoreCorruptError(f"{self.path} is an SQLite file but not a sesstree store")
                row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                version = int(row[0]) if row else 0
                if version > FORMAT_VERSION:
                    raise StoreFormatError(
                        f"{self.path} has store format {version}; this sesstree reads up to "
                        f"{FORMAT_VERSION}. Upgrade sesstree to open it."
                    )
                if version < 1:
                    raise StoreCorruptError(f"{self.path} has no valid format version")
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreLockedError(f"cannot switch {self.path} to WAL mode (is it in use?)")
            db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            db.execute("PRAGMA cache_size=-65536")
            db.execute("PRAGMA mmap_size=268435456")
            db.execute("PRAGMA temp_store=MEMORY")
            if not exists:
                db.execute("BEGIN IMMEDIATE")
                try:
                    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
                    if "meta" not in tables:
                        for statement in _SCHEMA:
                            db.execute(statement)
                        db.executemany(
                            "INSERT INTO meta VALUES (?, ?)",
                            [("format", str(FORMAT_VERSION)), ("ids", f"blake3-msgpack-v{ID_VERSION}")],
                        )
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise StoreLockedError(f"store {self.path} is locked by another process: {text}") from None
            if "malformed" in text or "not a database" in text or "no such" in text:
                raise StoreCorruptError(f"store {self.path} is damaged: {text}") from None
            raise
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"store {self.path} is damaged: {exc}") from None

    # -- writing -----------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One transaction, or the open batch's."""
        with self._lock, self._errors():
            if self._batch_depth or self._db.in_transaction:
                yield  # nested in our own transaction (the lock is held by this thread)
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
                self._txn_new.clear()
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        for key in self._txn_new:
            self._known.pop(key, None)
        self._txn_new.clear()
        self._pending.clear()

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock, self._errors():
            outer = self._batch_depth == 0
            if outer:
                self._db.execute("BEGIN IMMEDIATE")
            self._batch_depth += 1
            try:
                yield
                if outer:
                    self._flush_pending()
                    self._db.execute("COMMIT")
                    self._txn_new.clear()
            except BaseException:
                if outer:
                    self._rollback()
                raise
            finally:
                self._batch_depth -= 1

    def _flush_pending(self) -> None:
        now = time.time()
        for name, p in self._pending.items():
            reason = p.reason if p.count == 1 else f"{p.reason} (batch of {p.count} moves)"
            self._apply(name, p.old, p.new, reason, now, check=False)
        self._pending.clear()

    def _seq_of(self, id: NodeId) -> tuple[int, int] | None:
        key = bytes.fromhex(id)
        known = self._known.get(key)
        if known is None:
            row = self._db.execute("SELECT seq, depth FROM nodes WHERE id = ?", (key,)).fetchone()
            if row is None:
                return None
            known = (row[0], row[1])
            self._remember(key, known)
        return known

    def _remember(self, key: bytes, value: tuple[int, int]) -> None:
        if len(self._known) >= _CACHE_MAX:
            self._known.clear()
        self._known[key] = value

    def _ref_seq(self, name: str) -> int | None:
        pending = self._pending.get(name)
        if pending is not None:
            return pending.new
        row = self._db.execute("SELECT seq FROM refs WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def _insert(self, node: RawNode) -> tuple[int, int]:
        key = bytes.fromhex(node.id)
        known = self._known.get(key)
        if known is not None:
            return known
        parent_seq: int | None = None
        depth = 1
        if node.parent is not None:
            parent = self._seq_of(node.parent)
            if parent is None:
                raise ConflictError(f"parent {node.parent[:12]} of {node.id[:12]} is not stored")
            parent_seq, depth = parent[0], parent[1] + 1
        data: bytes | None = node.encoded
        bid: int | None = None
        db = self._db
        if len(node.encoded) > BLOB_MIN:
            digest = blake3(node.encoded).digest()
            cur = db.execute("INSERT OR IGNORE INTO blobs(hash, data) VALUES (?, ?)", (digest, data))
            if cur.rowcount == 1:
                bid = cur.lastrowid
            else:
                bid = db.execute("SELECT bid FROM blobs WHERE hash = ?", (digest,)).fetchone()[0]
            data = None
        cur = db.execute(
            "INSERT OR IGNORE INTO nodes(id, parent, depth, type, data, bid) VALUES (?,?,?,?,?,?)",
            (key, parent_seq, depth, node.type, data, bid),
        )
        if cur.rowcount == 1:
            assert cur.lastrowid is not None
            value = (cur.lastrowid, depth)
            self._txn_new.append(key)
        else:
            row = db.execute("SELECT seq, depth FROM nodes WHERE id = ?", (key,)).fetchone()
            value = (row[0], row[1])
        self._remember(key, value)
        return value

    def _apply(
        self, name: str, old: int | None, new: int | None, reason: str, now: float, *, check: bool
    ) -> bool:
        db = self._db
        if new is None:
            cur = db.execute("DELETE FROM refs WHERE name = ? AND seq IS ?", (name, old))
            if cur.rowcount == 1 or not check:
                db.execute(
                    "INSERT INTO reflog(ref, old, new, time, reason) VALUES (?, ?, NULL, ?, ?)",
                    (name, old, now, reason),
                )
            return cur.rowcount == 1
        if old is None:
            cur = db.execute(
                "INSERT OR IGNORE INTO refs(name, seq, moved, reason) VALUES (?, ?, ?, ?)",
                (name, new, now, reason),
            )
        else:
            cur = db.execute(
                "UPDATE refs SET seq = ?, moved = ?, reason = ? WHERE name = ? AND seq = ?",
                (new, now, reason, name, old),
            )
        return cur.rowcount == 1

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        with self._write():
            batched = self._batch_depth > 0
            olds: list[int | None] = []
            for u in updates:
                old = self._seq_of(u.old) if u.old is not None else None
                if u.old is not None and old is None:
                    raise ConflictError(f"{u.name}: expected node {u.old[:12]} is not stored")
                olds.append(old[0] if old else None)
            if batched:
                # Check every CAS before writing anything: a lost CAS must not spoil the batch.
                for u, old_seq in zip(updates, olds):
                    if self._ref_seq(u.name) != old_seq:
                        raise self._conflict(u)
            for n in nodes:
                self._insert(n)
            now = time.time()
            for u, old_seq in zip(updates, olds):
                new_seq = None
                if u.new is not None:
                    found = self._seq_of(u.new)
                    if found is None:
                        raise ConflictError(f"{u.name}: target {u.new[:12]} is not stored")
                    new_seq = found[0]
                if batched:
                    p = self._pending.get(u.name)
                    if p is None:
                        self._pending[u.name] = _Pending(old_seq, new_seq, 1, u.reason)
                    else:
                        p.new, p.count, p.reason = new_seq, p.count + 1, u.reason
                elif not self._apply(u.name, old_seq, new_seq, u.reason, now, check=True):
                    raise self._conflict(u)

    def _conflict(self, u: RefUpdate) -> ConflictError:
        current = self._ref_seq(u.name)
        found = None
        if current is not None:
            row = self._db.execute("SELECT id FROM nodes WHERE seq = ?", (current,)).fetchone()
            found = row[0].hex() if row else None
        return ConflictError(
            f"{u.name} moved: expected {describe(u.old)}, found {describe(found)}"
        )

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        """Atomically move ``old`` to ``new`` (which must not exist), carrying its reflog."""
        with self._write():
            self.commit([], [RefUpdate(old, target, None, reason), RefUpdate(new, None, target, reason)])
            if self._batch_depth:
                self._flush_pending()
            self._db.execute("UPDATE reflog SET ref = ? WHERE ref = ?", (new, old))

    # -- reading -----------------------------------------------------------------------------

    def _id_of_seq(self, seq: int | None) -> NodeId | None:
        if seq is None:
            return None
        row = self._db.execute("SELECT id FROM nodes WHERE seq = ?", (seq,)).fetchone()
        return NodeId(row[0].hex()) if row else None

    def _stored(self, row: Any) -> StoredNode:
        parent = self._id_of_seq(row[2])
        return StoredNode(NodeId(row[1].hex()), parent, row[5], row[3], row[4])

    def get(self, id: NodeId) -> StoredNode | None:
        with self._lock, self._errors():
            row = self._db.execute(
                f"SELECT {_NODE_COLS}, n.depth FROM nodes n WHERE n.id = ?", (bytes.fromhex(id),)
            ).fetchone()
            return None if row is None else self._stored(row)

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        with self._lock, self._errors():
            return {i for i in ids if self._seq_of(i) is not None}

    def chain(self, head: NodeId, limit: int | None = None) -> Chain:
        with self._lock, self._errors():
            found = self._seq_of(head)
            if found is None:
                raise KeyError(head)
            cur: int | None = found[0]
            depth = found[1]
            need = depth if limit is None else min(limit, depth)
            rows: list[Any] = []
            query = f"SELECT {_NODE_COLS} FROM nodes n WHERE n.seq BETWEEN ? AND ? ORDER BY n.seq DESC"
            while cur is not None and len(rows) < need:
                # Parents always have smaller seqs, so one descending pass over a range picks
                # the path out of whatever else was written in between.
                lo = cur - (need - len(rows)) + 1
                before = len(rows)
                for row in self._db.execute(query, (lo, cur)):
                    if row[0] == cur:
                        rows.append(row)
                        cur = row[2]
                        if len(rows) >= need:
                            break
                if len(rows) == before:
                    raise StoreCorruptError(f"store {self.path} is damaged: node row {cur} is missing")
            rows.reverse()
            return Chain(
                [NodeId(r[1].hex()) for r in rows],
                [r[3] for r in rows],
                _decode_many([r[4] for r in rows]),
                depth - need + 1,
                self._id_of_seq(rows[0][2]) if rows else None,
            )

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        lo = bytes.fromhex((prefix + "0" * 64)[:64])
        hi = bytes.fromhex((prefix + "f" * 64)[:64])
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT id FROM nodes WHERE id BETWEEN ? AND ? LIMIT ?", (lo, hi, limit)
            ).fetchall()
        return [NodeId(r[0].hex()) for r in rows]

    def get_ref(self, name: str) -> Ref | None:
        with self._lock, self._errors():
            pending = self._pending.get(name)
            if pending is not None:
                target = self._id_of_seq(pending.new)
                return None if target is None else Ref(name, target, time.time())
            row = self._db.execute(
                "SELECT n.id, r.moved FROM refs r JOIN nodes n ON n.seq = r.seq WHERE r.name = ?",
                (name,),
            ).fetchone()
            return None if row is None else Ref(name, NodeId(row[0].hex()), row[1])

    def list_refs(self, prefix: str) -> list[Ref]:
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT r.name, n.id, r.moved FROM refs r JOIN nodes n ON n.seq = r.seq "
                "WHERE substr(r.name, 1, ?) = ? ORDER BY r.name",
                (len(prefix), prefix),
            ).fetchall()
            refs = {r[0]: Ref(r[0], NodeId(r[1].hex()), r[2]) for r in rows}
            for name in [n for n in self._pending if n.startswith(prefix)]:
                ref = self.get_ref(name)
                if ref is None:
                    refs.pop(name, None)
                else:
                    refs[name] = ref
            return [refs[k] for k in sorted(refs)]

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        sql = (
            "SELECT l.ref, o.id, w.id, l.time, l.reason FROM reflog l "
            "LEFT JOIN nodes o ON o.seq = l.old LEFT JOIN nodes w ON w.seq = l.new"
        )
        with self._lock, self._errors():
            if name is None:
                rows = self._db.execute(sql + " ORDER BY l.n").fetchall()
            else:
                rows = self._db.execute(sql + " WHERE l.ref = ? ORDER BY l.n", (name,)).fetchall()
        return [
            ReflogEntry(
                r[0], NodeId(r[1].hex()) if r[1] else None, NodeId(r[2].hex()) if r[2] else None,
                r[3], r[4],
            )
            for r in rows
        ]

    def get_meta(self, key: str) -> str | None:
        with self._lock, self._errors():
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        with self._write():
            if value is None:
                self._db.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def iter_nodes(self) -> Iterator[StoredNode]:
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT n.id, p.id, n.depth, n.type, coalesce(n.data, b.data) FROM nodes n "
                "LEFT JOIN nodes p ON p.seq = n.parent LEFT JOIN blobs b ON b.bid = n.bid "
                "ORDER BY n.seq"
            ).fetchall()
        for r in rows:
            yield StoredNode(
                NodeId(r[0].hex()), NodeId(r[1].hex()) if r[1] else None, r[2], r[3], r[4]
            )

    def count_nodes(self) -> int:
        with self._lock, self._errors():
            return int(self._db.execute("SELECT count(*) FROM nodes").fetchone()[0])

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        with self._write():
            cur = self._db.executemany(
                "DELETE FROM nodes WHERE id = ?", [(bytes.fromhex(i),) for i in ids]
            )
            self._db.execute(
                "DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.bid = blobs.bid)"
            )
            self._known.clear()
            return cur.rowcount

    def check(self) -> list[str]:
        faults: list[str] = []
        db = self._db
        with self._lock, self._errors():
            for (msg,) in db.execute("PRAGMA quick_check"):
                if msg != "ok":
                    faults.append(f"sqlite: {msg}")
            checks = {
                "node whose parent is missing": "SELECT c.id FROM nodes c WHERE c.parent IS NOT NULL "
                "AND NOT EXISTS (SELECT 1 FROM nodes p WHERE p.seq = c.parent)",
                "node stored before its parent": "SELECT c.id FROM nodes c WHERE c.parent >= c.seq",
                "node with a wrong depth index": "SELECT c.id FROM nodes c LEFT JOIN nodes p "
                "ON p.seq = c.parent WHERE c.depth != coalesce(p.depth, 0) + 1",
                "node whose payload is missing": "SELECT c.id FROM nodes c WHERE (c.data IS NULL) = "
                "(c.bid IS NULL) OR (c.bid IS NOT NULL AND NOT EXISTS "
                "(SELECT 1 FROM blobs b WHERE b.bid = c.bid))",
            }
            for what, sql in checks.items():
                for (key,) in db.execute(sql + " LIMIT 20"):
                    faults.append(f"{what}: {key.hex()[:12]}")
            for name, seq in db.execute(
                "SELECT name, seq FROM refs WHERE seq NOT IN (SELECT seq FROM nodes)"
            ):
                faults.append(f"ref {name} points at a missing node (row {seq})")
            for ref, n in db.execute(
                "SELECT ref, n FROM reflog WHERE (old IS NOT NULL AND old NOT IN (SELECT seq FROM nodes))"
                " OR (new IS NOT NULL AND new NOT IN (SELECT seq FROM nodes))"
            ):
                faults.append(f"reflog entry {n} of {ref} points at a missing node")
            for digest, data in db.execute("SELECT hash, data FROM blobs"):
                if blake3(data).digest() != digest:
                    faults.append(f"payload {digest.hex()[:12]} does not match its hash")
        return faults

    def physical_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def checkpoint(self) -> None:
        """Fold the WAL back into the main file (used before measuring size)."""
        with self._lock, self._errors():
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._db.close()
