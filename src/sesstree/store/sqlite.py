"""The embedded default backend: one SQLite file in WAL mode.

Layout and why:

- ``nodes`` rows get an integer ``seq`` in insertion order and point to their parent by ``seq``.
  A session appended in order therefore lies in one contiguous run of rows, so a chain is read
  as a few range scans (``seq BETWEEN a AND b``) instead of one index lookup per node.
- ``depth`` (1 for a root) is a derived index: it gives a session's length in O(1) and the size
  of the range to read. ``fsck`` recomputes it.
- A row's ``data`` is the node's type then its payload, both msgpack, so a range of rows is
  decoded in one call (:mod:`sesstree.store.sqlite_paths`).
- Payloads larger than ``BLOB_MIN`` bytes live once in ``blobs``, compressed, keyed by the
  blake3 hash of their content, so the same 200 KB tool result in a thousand sessions is
  stored once. Smaller payloads are kept in their row, as a zstd frame once the store has
  trained a dictionary on its own payloads (see :mod:`sesstree.store.codec`).
- There is no separate table of refs: the ``reflog`` is the truth, clustered by ``(ref, n)``,
  and a ref's value is its newest entry. Moving a ref *is* writing its log entry, so a ref can
  never move without one, and the compare-and-set is one ``INSERT ... WHERE newest IS old``.
  An append therefore touches three pages (node row, id index, the ref's log), which is what
  makes a committed append cheap.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import NoReturn

from blake3 import blake3

from ..errors import (
    ConflictError,
    MissingNodeError,
    StoreCorruptError,
    StoreLockedError,
)
from ..node import NodeId
from .base import (
    Chain,
    Progress,
    RawNode,
    RefUpdate,
    SessionMeta,
    StoredNode,
    describe,
    encode_session_meta,
)
from .codec import SMALL_MIN
from .meta_rows import HEAD, LEGACY, SESSION
from .sqlite_check import check_store
from .sqlite_dicts import DictWrites
from .sqlite_lock import WriteLock
from .sqlite_media import translate, translating
from .sqlite_open import (
    DURABLE_WAL_PAGES,
    FORMAT_VERSION,
    PAGE_SIZE,
    WAL_PAGES,
    has_codec,
    open_connection,
    reflog_has_started,
)
from .sqlite_paths import PathReader, row_data, verify_node
from .sqlite_refs import RefReads
from .sqlite_scan import SLICE, ScanReads
from .sqlite_sql import (
    APPEND_FOLD,
    APPEND_ONE,
    CAS,
    FOLD,
    FOLD_NEWEST,
    INSERT_NODE,
    NEWEST,
    NODE_COLS,
    REFLOG_ROWS,
    without_codec,
    without_started,
)
from .sqlite_sums import FILL_CLOSE, FILL_IDLE, fill_sums
from .sqlite_wal import IdleCheckpointer, preallocate_wal

__all__ = [
    "BLOB_MIN", "DURABLE_WAL_PAGES", "FORMAT_VERSION", "PAGE_SIZE", "SIZE_WAL_AFTER", "WAL_PAGES",
    "SqliteBackend",
]

#: Payloads larger than this are stored once, by hash, compressed (tool results, files).
BLOB_MIN = 1024
# A connection that has committed this many single appends is a long writer: its WAL is then
# given its full size once, so that later appends overwrite blocks instead of growing the file.
SIZE_WAL_AFTER = 1_000
_CACHE_MAX = 200_000
# A writer idle this many seconds has its commits folded into the main file (see
# sqlite_wal.IdleCheckpointer): recent history does not live on only in the WAL.
IDLE_CHECKPOINT = 1.0
# How long a closing writer waits for the write lock to train the dictionary when it is due
# (a pause does not wait: the next one tries again).
_CLOSE_WAIT = 1.0


class SqliteBackend(RefReads, ScanReads, DictWrites):
    """A store in one SQLite file. See the module docstring for the layout."""

    def __init__(
        self, path: str | os.PathLike[str], *, create: bool = True, durable: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.path = Path(path)
        self._db, read_only = open_connection(
            self.path, create=create, durable=durable, timeout=timeout
        )
        #: True when the store could only be opened for reading (read-only media).
        self.read_only = read_only
        self._timeout = timeout
        self._queue = WriteLock(self.path)
        self._queue_depth = 0
        self._lock = threading.RLock()
        self._idle = IdleCheckpointer(self._checkpoint_idle, IDLE_CHECKPOINT)
        # Format 4's codec columns (a format-3 store opened read-only has none).
        self._codec_columns = has_codec(self._db)
        self._paths = PathReader(self._db, self.path, self._codec_columns)
        # The dictionary: looked for at the first write; trained at a pause or close when the
        # store passed TRAIN_AFTER more rows (see sqlite_dicts).
        self._plain_writes = 0
        self._dict_looked = False
        self._seq_checked = 0
        # The statements that write and read a folded entry's `started`, or (a store made
        # before it was kept) their forms without it.
        started = reflog_has_started(self._db)
        self._fold_sql = FOLD if started else without_started(FOLD)
        self._fold_newest_sql = FOLD_NEWEST if started else without_started(FOLD_NEWEST)
        self._reflog_sql = REFLOG_ROWS if started else without_started(REFLOG_ROWS)
        # Appends committed by this connection, until the WAL is given its size (a long
        # writer's appends then stop growing the file; see sqlite_wal). A durable store's WAL
        # was sized when it was opened.
        self._appends_to_size_wal = -1 if durable else SIZE_WAL_AFTER
        self._batch_depth = 0
        # Inside a batch, where each ref it moved is now (row number, or None): the batch holds
        # the write lock, so no one else moves them meanwhile, and a CAS needs no read.
        self._heads: dict[str, int | None] = {}
        # Inside a batch, folds not written yet: ref -> (new row, time, reason). A ref's later
        # moves in a batch each rewrite its newest entry; only the last rewrite matters, so it
        # is written once, before anything reads the log and when the batch commits.
        self._unwritten: dict[str, tuple[int | None, float, str]] = {}
        self._txn_new: list[NodeId] = []
        # id -> (seq, depth) of nodes known to be stored: saves a lookup per append.
        self._known: dict[NodeId, tuple[int, int]] = {}
        # PRAGMA data_version when the cache was last known good: it changes when another
        # connection commits (a gc there may have removed rows the cache still names).
        self._data_version = -1

    def _errors(self) -> AbstractContextManager[None]:
        return translating(self.path)

    def _translate(self, exc: sqlite3.Error) -> NoReturn:
        translate(self.path, exc)

    # -- writing -----------------------------------------------------------------------------

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        for key in self._txn_new:
            self._known.pop(key, None)
        self._txn_new.clear()
        self._heads.clear()
        self._unwritten.clear()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One transaction, or the one already open (a batch, or an outer write)."""
        with self._lock, self._errors():
            if self._batch_depth or self._db.in_transaction:
                self._write_folds()
                yield
                return
            with self._queued():
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._sync_cache()
                    yield
                    self._db.execute("COMMIT")
                    self._txn_new.clear()
                except BaseException:
                    self._rollback()
                    raise

    @contextmanager
    def _queued(self) -> Iterator[None]:
        """Hold this store's place in the writers' queue (see sqlite_lock) for the block."""
        if self._queue_depth:
            self._queue_depth += 1
            try:
                yield
            finally:
                self._queue_depth -= 1
            return
        if not self._queue.acquire(self._timeout):
            raise self._starved()
        self._queue_depth = 1
        try:
            yield
        finally:
            self._queue_depth = 0
            self._queue.release()
            self._idle.wrote()

    def _starved(self) -> StoreLockedError:
        return StoreLockedError(
            f"store {self.path} is locked by another process: waited {self._timeout:g} s "
            "for its write to finish"
        )

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock, self._errors():
            if self._batch_depth:
                self._batch_depth += 1
                try:
                    yield
                finally:
                    self._batch_depth -= 1
                return
            with self._queued():
                self._db.execute("BEGIN IMMEDIATE")
                self._sync_cache()
                self._batch_depth = 1
                try:
                    yield
                    self._write_folds()
                    self._db.execute("COMMIT")
                    self._txn_new.clear()
                except BaseException:
                    self._rollback()
                    raise
                finally:
                    self._batch_depth = 0
                    self._heads.clear()
                    self._unwritten.clear()
                # Committed, outside any transaction, still holding the write lock: a batch
                # that took the store past TRAIN_AFTER rows trains the dictionary now, so the
                # next batch of a long import compresses (a failure there undoes no batch).
                try:
                    self._train_if_due()
                except sqlite3.Error:
                    pass  # the batch is committed; the next pause tries again

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        with self._lock, self._errors():
            if self._db.in_transaction:  # a batch or write already sees one state
                yield
                return
            self._db.execute("BEGIN")
            try:
                # A deferred transaction takes its snapshot at the first read: take it now.
                self._db.execute("SELECT count(*) FROM meta").fetchone()
                yield
            finally:
                if self._db.in_transaction:
                    self._db.execute("COMMIT")

    def _log(self, name: str, old: int | None, new: int | None, reason: str, now: float,
             fold: bool = False) -> bool:
        """The compare-and-set: move ``name`` from ``old`` to ``new`` and log it (or, with
        ``fold``, rewrite its newest entry), or do nothing."""
        if fold and self._db.execute(self._fold_sql, (name, old, new, now, reason)).rowcount == 1:
            return True
        # Not folded: the ref has no entry to fold into, or it is not at `old` (then the CAS
        # below writes nothing either).
        return self._db.execute(CAS, (name, old, new, now, reason)).rowcount == 1

    def _seq_of(self, id: NodeId) -> tuple[int, int] | None:
        known = self._known.get(id)
        if known is None:
            row = self._db.execute(
                "SELECT seq, depth FROM nodes WHERE id = ?", (bytes.fromhex(id),)
            ).fetchone()
            if row is None:
                return None
            known = (row[0], row[1])
            self._remember(id, known)
        return known

    def _sync_cache(self) -> None:
        """Forget cached row numbers if another connection has committed since we looked."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._known.clear()
            self._data_version = version

    def _remember(self, id: NodeId, value: tuple[int, int]) -> None:
        if len(self._known) >= _CACHE_MAX:
            self._known.clear()
        self._known[id] = value

    def _ref_seq(self, name: str) -> int | None:
        if name in self._heads:
            return self._heads[name]
        row = self._db.execute(NEWEST, (name,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _insert(self, node: RawNode) -> tuple[int, int]:
        known = self._known.get(node.id)
        if known is not None:
            return known
        parent_seq: int | None = None
        depth = 1
        if node.parent is not None:
            parent = self._seq_of(node.parent)
            if parent is None:
                raise MissingNodeError(f"parent {node.parent[:12]} of {node.id[:12]} is not stored")
            parent_seq, depth = parent[0], parent[1] + 1
        inline: bytes | None = node.encoded
        bid: int | None = None
        codec: int | None = None
        db = self._db
        if not self._dict_looked:
            self._find_dict()
        if len(node.encoded) > BLOB_MIN:
            digest = blake3(node.encoded).digest()
            known_blob = db.execute("SELECT bid FROM blobs WHERE hash = ?", (digest,)).fetchone()
            if known_blob is not None:
                bid = known_blob[0]
            else:
                bcodec, blob = self._paths.codec.pack_blob(node.encoded)
                cur = db.execute(
                    "INSERT INTO blobs(hash, data, codec) VALUES (?, ?, ?)", (digest, blob, bcodec)
                )
                bid = cur.lastrowid
                self._count_plain(bcodec == 0)
            inline = None
        row = row_data(node.type, inline)
        if bid is None:
            codec, row = self._paths.codec.pack(row)
            self._count_plain(len(row) >= SMALL_MIN)
        key = bytes.fromhex(node.id)
        cur = db.execute(INSERT_NODE, (key, parent_seq, depth, row, bid, codec))
        if cur.rowcount == 1:
            assert cur.lastrowid is not None
            value = (cur.lastrowid, depth)
            self._txn_new.append(node.id)
        else:
            row = db.execute("SELECT seq, depth FROM nodes WHERE id = ?", (key,)).fetchone()
            value = (row[0], row[1])
        self._remember(node.id, value)
        return value

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        with self._lock:
            if self._batch_depth:
                with self._errors():
                    self._commit_batched(nodes, updates)
                return
            # The writers' queue, inline rather than through _queued: this is every append's
            # path, and a generator-based context manager costs about a microsecond.
            if self._queue_depth:
                self._commit_alone(nodes, updates)
                return
            queue = self._queue
            if not queue.acquire(self._timeout):
                raise self._starved()
            self._queue_depth = 1
            try:
                self._commit_alone(nodes, updates)
            finally:
                self._queue_depth = 0
                queue.release()
                self._idle.wrote()
            # (Training the dictionary waits for the writer's next pause, see sqlite_dicts.)

    def _commit_alone(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """A commit outside any batch: the one-statement append, or one transaction."""
        db = self._db
        if (
            len(nodes) == 1 and len(updates) == 1 and self._append_one(nodes[0], updates[0])
        ):
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            self._sync_cache()
            self._check_then_insert(nodes, updates)
            now = time.time()
            for u in updates:
                if not self._log(u.name, self._old_seq(u), self._new_seq(u), u.reason, now,
                                 u.fold):
                    raise self._conflict(u)
            db.execute("COMMIT")
            self._txn_new.clear()
        except sqlite3.Error as exc:
            self._rollback()
            self._translate(exc)
        except BaseException:
            self._rollback()
            raise

    def _append_one(self, node: RawNode, u: RefUpdate) -> bool:
        """The hot path of every append, in one statement (a large payload's blob too). False
        if it does not apply."""
        if u.new != node.id or u.old != node.parent:
            return False
        if not self._dict_looked:
            self._find_dict()
        encoded = node.encoded
        codec = self._paths.codec
        if len(encoded) > BLOB_MIN:
            # Compressed before knowing whether the blob is stored already: a lookup first
            # would be a second statement, and compressing 2 KB costs less than one.
            bcodec, blob = codec.pack_blob(encoded)
            packed, row, digest = None, row_data(node.type, None), blake3(encoded).digest()
            self._count_plain(bcodec == 0)
        else:
            packed, row = codec.pack(row_data(node.type, encoded))
            blob, bcodec, digest = None, None, None
            self._count_plain(len(encoded) >= SMALL_MIN)
        try:
            self._db.execute(APPEND_FOLD if u.fold and u.old is not None else APPEND_ONE, (
                u.name, bytes.fromhex(node.parent) if node.parent is not None else None,
                bytes.fromhex(node.id), row, time.time(), u.reason, packed, digest, blob, bcodec,
            ))
        except sqlite3.IntegrityError as exc:
            if "sesstree-conflict" not in str(exc):
                raise
            # Here the parent is the ref's expected old value: if it is not stored, the ref
            # cannot be there either, so this is a lost compare-and-set (a retry on the new
            # head works), whatever else is missing.
            raise self._conflict(u) from None
        except sqlite3.Error as exc:
            self._translate(exc)
        self._appends_to_size_wal -= 1
        if self._appends_to_size_wal == 0:
            try:
                preallocate_wal(self._db, self.path, WAL_PAGES, sync=False)
            except (OSError, sqlite3.Error):
                pass  # only a speed-up: the append itself is committed, and the WAL just grows
        return True

    def _old_seq(self, u: RefUpdate) -> int | None:
        """The row the update expects its ref at; a node that is not stored cannot be it."""
        if u.old is None:
            return None
        found = self._seq_of(u.old)
        if found is None:
            raise self._conflict(u)
        return found[0]

    def _new_seq(self, u: RefUpdate) -> int | None:
        if u.new is None:
            return None
        found = self._seq_of(u.new)
        if found is None:
            raise MissingNodeError(f"{u.name}: target {u.new[:12]} is not stored")
        return found[0]

    def _check_then_insert(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """Every compare-and-set first, then the nodes: a lost one is a conflict (retrying
        helps) even when a node is missing too, and inside a batch it writes nothing that
        would spoil the batch."""
        for u in updates:
            if self._ref_seq(u.name) != self._old_seq(u):
                raise self._conflict(u)
        for n in nodes:
            self._insert(n)

    def _commit_batched(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        self._check_then_insert(nodes, updates)
        now = time.time()
        for u in updates:
            old, new = self._old_seq(u), self._new_seq(u)  # cached lookups
            if u.fold and u.name in self._heads:
                # The batch moved this ref, holding the write lock since: its newest entry is
                # the batch's, and where the ref is, is known. The rewrite can wait.
                self._unwritten[u.name] = (new, now, u.reason)
                self._heads[u.name] = new
                continue
            self._write_folds()  # the log this move is compared with must be up to date
            if not self._log(u.name, old, new, u.reason, now, u.fold):  # pragma: no cover
                raise self._conflict(u)  # checked above, under the write lock
            self._heads[u.name] = new

    def _write_folds(self) -> None:
        """Write the folds a batch has kept back (see ``_unwritten``)."""
        if self._unwritten:
            unwritten, self._unwritten = self._unwritten, {}
            self._db.executemany(self._fold_newest_sql, [
                (name, new, when, reason) for name, (new, when, reason) in unwritten.items()
            ])

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
        with self._write():
            self._heads.pop(old, None)
            self._heads.pop(new, None)
            seq = self._seq_of(target)
            if seq is None or self._ref_seq(old) != seq[0]:
                raise self._conflict(RefUpdate(old, target, None, reason))
            if self._ref_seq(new) is not None:
                raise self._conflict(RefUpdate(new, None, target, reason))
            # The log of `old` moves over, after whatever `new` had before (a deleted session).
            row = self._db.execute(
                "SELECT coalesce(max(n), 0) FROM reflog WHERE ref = ?", (new,)
            ).fetchone()
            self._db.execute(
                "UPDATE reflog SET ref = ?, n = n + ? WHERE ref = ?", (new, row[0], old)
            )
            self._log(new, seq[0], seq[0], reason, time.time())

    # -- reading -----------------------------------------------------------------------------

    def get(self, id: NodeId) -> StoredNode | None:
        with self._lock, self._errors():
            row = self._db.execute(self._q(
                f"SELECT {NODE_COLS}, n.depth, p.id FROM nodes n LEFT JOIN nodes p "
                "ON p.seq = n.parent LEFT JOIN blobs b ON b.bid = n.bid WHERE n.id = ?"),
                (bytes.fromhex(id),),
            ).fetchone()
            if row is None:
                return None
            type, encoded, body = self._expand(row[1], row[3], row[4], row[5], row[6])
            # Checked against its id like every read: damage shows as an error, never as data.
            # (A parent row that is missing gives no parent id, and so fails the check.)
            if (row[2] is not None and row[8] is None) or not verify_node(row[1], row[8], body):
                raise StoreCorruptError(
                    f"store {self.path} is damaged: node {row[1].hex()[:12]} does not hash to its id"
                )
            parent = self._hex(row[8]) if row[8] is not None else None
            return StoredNode(self._hex(row[1]), parent, row[7], type, encoded)

    def _q(self, sql: str) -> str:
        """``sql`` as this store can run it (see without_codec)."""
        return sql if self._codec_columns else without_codec(sql)

    def _expand(self, id: bytes | None, data: bytes, blob: bytes | None, codec: int | None,
                bcodec: int | None) -> tuple[str, bytes, bytes]:
        """Type, payload bytes and hashed body of a row (see PathReader.expand)."""
        return self._paths.expand(id, data, blob, codec, bcodec)

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        with self._lock, self._errors():
            if not self._db.in_transaction:
                self._sync_cache()
            return {i for i in ids if self._seq_of(i) is not None}

    def chain(self, head: NodeId, limit: int | None = None) -> Chain:
        with self._lock, self._errors():
            if not self._db.in_transaction:
                self._sync_cache()
            found = self._seq_of(head)
            if found is None:
                raise KeyError(head)
            seq, depth = found
            need = depth if limit is None else min(limit, depth)
            types, datas, ids, base = self._paths.read(seq, need, need == depth)
            return Chain(types, datas, depth - need + 1, self._id_of_seq(base), packed_ids=ids)

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        lo = bytes.fromhex((prefix + "0" * 64)[:64])
        hi = bytes.fromhex((prefix + "f" * 64)[:64])
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT id FROM nodes WHERE id BETWEEN ? AND ? LIMIT ?", (lo, hi, limit)
            ).fetchall()
            if not rows and self._db.execute(
                "SELECT 1 FROM nodes NOT INDEXED WHERE id BETWEEN ? AND ? LIMIT 1", (lo, hi)
            ).fetchone():
                # Only on a miss (a mistyped id, usually): the table has what the index
                # does not, so the index is damaged. Saying "no such node" would be wrong.
                raise StoreCorruptError(
                    f"store {self.path} is damaged: its id index misses node {prefix}"
                )
        found = [self._hex(r[0]) for r in rows]
        if any(not i.startswith(prefix.lower()) for i in found):
            # The index gave a row outside the range it was asked for: it is damaged.
            raise StoreCorruptError(
                f"store {self.path} is damaged: its id index misses node {prefix}"
            )
        return found

    def expire_reflog(self, name: str) -> int:
        with self._write():
            # A live ref's newest entry is its value: it stays. A deleted ref's go entirely.
            live = self._ref_seq(name) is not None
            cur = self._db.execute(
                "DELETE FROM reflog WHERE ref = ?1 AND (NOT ?2 OR n < "
                "(SELECT max(n) FROM reflog WHERE ref = ?1))",
                (name, live),
            )
            # The entry kept no longer remembers where the ref was before it.
            self._db.execute("UPDATE reflog SET old = NULL WHERE ref = ?", (name,))
            return int(cur.rowcount)

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        with self._write():
            self._db.execute("DELETE FROM meta WHERE key = ?", (LEGACY + name,))
            if meta:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 (SESSION + name, encode_session_meta(meta)))
            else:
                self._db.execute("DELETE FROM meta WHERE key = ?", (SESSION + name,))

    def set_head(self, value: str) -> None:
        with self._write():
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (HEAD, value))

    def iter_nodes(self) -> Iterator[StoredNode]:
        # A slice of rows per query: memory stays bounded whatever the store holds.
        after = 0
        while True:
            with self._lock, self._errors():
                rows = self._db.execute(self._q(
                    "SELECT n.seq, n.id, p.id, n.depth, n.data, b.data, n.codec, b.codec "
                    "FROM nodes n LEFT JOIN nodes p ON p.seq = n.parent "
                    "LEFT JOIN blobs b ON b.bid = n.bid WHERE n.seq > ? ORDER BY n.seq LIMIT ?"),
                    (after, SLICE),
                ).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            for r in rows:
                try:
                    with self._lock:
                        type, encoded, _ = self._expand(r[1], r[4], r[5], r[6], r[7])
                except StoreCorruptError:
                    # Yield it as it is: it will not hash to its id, and fsck reports it as such.
                    type, encoded = "", r[4] if isinstance(r[4], bytes) else b""
                yield StoredNode(
                    self._hex(r[1]), self._hex(r[2]) if r[2] is not None else None, r[3], type,
                    encoded,
                )

    def count_nodes(self) -> int:
        with self._lock, self._errors():
            return int(self._db.execute("SELECT count(*) FROM nodes").fetchone()[0])

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        with self._write():
            cur = self._db.executemany(
                "DELETE FROM nodes WHERE id = ?", [(bytes.fromhex(i),) for i in ids]
            )
            # One seek in nodes_bid per payload (format 2), not a scan of nodes per payload.
            self._db.execute(
                "DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.bid = blobs.bid)"
            )
            self._db.execute("DELETE FROM path_bytes WHERE seq NOT IN (SELECT seq FROM nodes)")
            if self._codec_columns:
                self._db.execute("DELETE FROM sums")  # (rare: the digests are made again)
            self._known.clear()
            return cur.rowcount

    def collect_garbage(
        self, dry_run: bool, keep: NodeId | None = None
    ) -> tuple[list[NodeId], int, int]:
        # Each step takes the connection's lock itself, so other threads get turns too.
        with self._lock, self._errors():
            self._write_folds()
        with self._errors():
            from .sqlite_gc import collect_garbage

            return collect_garbage(self, dry_run, keep)

    def sweep(
        self, dry_run: bool, keep: NodeId | None, progress: Progress | None
    ) -> tuple[list[NodeId], int, int]:
        """:meth:`collect_garbage`, reporting its progress."""
        with self._errors():
            from .sqlite_gc import collect_garbage

            return collect_garbage(self, dry_run, keep, progress)

    def check(self) -> list[str]:
        with self._lock, self._errors():
            self._write_folds()
            return check_store(self._db, self.path, self._paths.inflate, self._codec_columns)

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

    def _checkpoint_idle(self, blocks: int = FILL_IDLE) -> None:
        """Give the blocks written since a digest (sqlite_sums), then fold this writer's
        commits into the main file (see IdleCheckpointer), unless a transaction is open: then
        the next pause will."""
        with self._lock:
            if not self._db.in_transaction:
                self._train_if_due(0.0 if blocks == FILL_IDLE else _CLOSE_WAIT)
                self._fill_sums(blocks)
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _fill_sums(self, most: int) -> None:
        """Block digests for up to ``most`` blocks, in a short transaction of their own; only
        if the write lock is free at once (a derived index: the next pause tries again)."""
        if self.read_only or not self._codec_columns or not self._queue.acquire(0.0):
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                fill_sums(self._db, lambda *row: self._paths.expand(*row)[2], most)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error:
            pass  # busy, full, read-only: reads check node by node meanwhile
        finally:
            self._queue.release()

    def close(self) -> None:
        self._idle.stop()
        with self._lock:
            if self._idle.wrote_since_checkpoint:
                # What this connection wrote should not live on only in the WAL.
                try:
                    self._checkpoint_idle(FILL_CLOSE)
                except sqlite3.Error:
                    pass  # the commits are safe in the WAL all the same
            self._db.close()
            self._queue.close()
