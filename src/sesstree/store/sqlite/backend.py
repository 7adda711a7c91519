"""The embedded default backend: one SQLite file in WAL mode.

Layout and why:

- ``nodes`` rows get an integer ``seq`` in insertion order and point to their parent by ``seq``.
  A session appended in order therefore lies in one contiguous run of rows, so a chain is read
  as a few range scans (``seq BETWEEN a AND b``) instead of one index lookup per node.
- ``depth`` (1 for a root) is a derived index: it gives a session's length in O(1) and the size
  of the range to read. ``fsck`` recomputes it.
- A row's ``data`` is the node's type then its payload, both msgpack, so a range of rows is
  decoded in one call (:mod:`sesstree.store.sqlite.paths`).
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

from ...errors import (
    StoreCorruptError,
    StoreLockedError,
)
from ...node import NodeId
from ..base import (
    Chain,
    Progress,
    RefUpdate,
    SessionMeta,
    StoredNode,
)
from ..meta_rows import HEAD, LEGACY, SESSION
from ..storable import check_commit, check_head, check_session_meta, storable
from .check import check_store
from .commit import BLOB_MIN, SIZE_WAL_AFTER, CommitWrites
from .dicts import DictWrites
from .lock import WriteLock
from .media import translate, translating
from .opening import (
    DURABLE_WAL_PAGES,
    FORMAT_VERSION,
    PAGE_SIZE,
    WAL_PAGES,
    has_codec,
    reflog_has_started,
)
from .paths import PathReader, verify_node
from .refs import RefReads
from .release import LooseHold
from .scans import SLICE, ScanReads
from .sql import (
    FOLD,
    FOLD_NEWEST,
    NODE_COLS,
    REFLOG_ROWS,
    without_codec,
    without_started,
)
from .sums import FILL_CLOSE, FILL_IDLE, fill_sums
from .wal import IdleCheckpointer

__all__ = [
    "BLOB_MIN", "DURABLE_WAL_PAGES", "FORMAT_VERSION", "PAGE_SIZE", "SIZE_WAL_AFTER", "WAL_PAGES",
    "SqliteBackend",
]

# A writer idle this many seconds has its commits folded into the main file (see
# sqlite_wal.IdleCheckpointer): recent history does not live on only in the WAL.
IDLE_CHECKPOINT = 1.0
# How long a closing writer waits for the write lock to train the dictionary when it is due
# (a pause does not wait: the next one tries again).
_CLOSE_WAIT = 1.0


class SqliteBackend(LooseHold, CommitWrites, RefReads, ScanReads, DictWrites):
    """A store in one SQLite file. See the module docstring for the layout."""

    def __init__(
        self, path: str | os.PathLike[str], *, create: bool = True, durable: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.path = Path(path)
        self._timeout, self._durable = timeout, durable
        self._lock = threading.RLock()
        self._batch_depth = 0
        self._data_version = -1
        self._connect(create)  # (sets read_only and full: see sqlite_release)
        self._queue = WriteLock(self.path)
        self._queue_depth = 0
        self._idle = IdleCheckpointer(self._checkpoint_idle, IDLE_CHECKPOINT)
        # The dictionary: looked for at the first write; trained at a pause or close when the
        # store passed TRAIN_AFTER more rows (see sqlite_dicts).
        self._plain_writes = 0
        self._dict_looked = False
        self._seq_checked = 0
        # Appends committed by this connection, until the WAL is given its size (a long
        # writer's appends then stop growing the file; see sqlite_wal). A durable store's WAL
        # was sized when it was opened.
        self._appends_to_size_wal = -1 if durable else SIZE_WAL_AFTER
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
        # (self._data_version: PRAGMA data_version when the cache was last known good: it
        # changes when another connection commits, and a gc there may remove rows it names.)

    def _setup(self) -> None:
        """What depends on the store's format, read when it is opened (again)."""
        # Format 4's codec columns (a format-3 store opened read-only has none).
        self._codec_columns = has_codec(self._db)
        self._paths = PathReader(self._db, self.path, self._codec_columns)
        # The statements that write and read a folded entry's `started`, or (a store made
        # before it was kept) their forms without it.
        started = reflog_has_started(self._db)
        self._fold_sql = FOLD if started else without_started(FOLD)
        self._fold_newest_sql = FOLD_NEWEST if started else without_started(FOLD_NEWEST)
        self._reflog_sql = REFLOG_ROWS if started else without_started(REFLOG_ROWS)

    def _errors(self) -> AbstractContextManager[None]:
        return translating(self.path, full=self.full)

    def _translate(self, exc: sqlite3.Error) -> NoReturn:
        translate(self.path, exc, full=self.full)

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
            self._refuse_if_full()
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
            self._refuse_if_full()
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

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        check_commit((), [RefUpdate(old, target, None, reason), RefUpdate(new, None, target,
                                                                          reason)])
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
        if not storable(name):  # a name no store can hold names nothing
            return 0
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
        text = check_session_meta(name, meta)
        with self._write():
            self._db.execute("DELETE FROM meta WHERE key = ?", (LEGACY + name,))
            if text is not None:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 (SESSION + name, text))
            else:
                self._db.execute("DELETE FROM meta WHERE key = ?", (SESSION + name,))

    def set_head(self, value: str) -> None:
        check_head(value)
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
            from .gc import collect_garbage

            return collect_garbage(self, dry_run, keep)

    def sweep(
        self, dry_run: bool, keep: NodeId | None, progress: Progress | None
    ) -> tuple[list[NodeId], int, int]:
        """:meth:`collect_garbage`, reporting its progress."""
        with self._errors():
            from .gc import collect_garbage

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
