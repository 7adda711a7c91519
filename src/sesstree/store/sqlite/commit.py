"""The SQLite backend's commits: a node and its ref's move, as one statement on the hot path of
every append, or one transaction, or a part of a batch (a part of :class:`SqliteBackend`).

A ref's move is its reflog entry (the reflog is the truth of every ref, see
:mod:`sesstree.store.sqlite.backend`): the compare-and-set is one ``INSERT ... WHERE newest IS old``,
and a fold rewrites the newest entry. Inside a batch, which holds the write lock, where each ref
is now is known (``_heads``), and folds are written once, before anything reads the log.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NoReturn

from blake3 import blake3

from ...errors import ConflictError, MissingNodeError, StoreLockedError
from ...node import NodeId
from ..base import RawNode, RefUpdate, describe
from ..codec import SMALL_MIN
from ..rows import row_data
from ..storable import check_commit
from .dicts import DictWrites
from .lock import WriteLock
from .opening import WAL_PAGES
from .paths import PathReader
from .sql import APPEND_FOLD, APPEND_ONE, CAS, INSERT_NODE, NEWEST
from .wal import IdleCheckpointer, preallocate_wal

__all__ = ["BLOB_MIN", "SIZE_WAL_AFTER", "CommitWrites"]

#: Payloads larger than this are stored once, by hash, compressed (tool results, files).
BLOB_MIN = 1024
#: A connection that has committed this many single appends is a long writer: its WAL is then
#: given its full size once, so that later appends overwrite blocks instead of growing the file.
SIZE_WAL_AFTER = 1_000
_CACHE_MAX = 200_000


class CommitWrites(DictWrites):
    """How the SQLite backend commits (mixed into it; it provides what is declared here)."""

    path: Path
    _db: sqlite3.Connection
    _lock: threading.RLock
    _timeout: float
    _queue: WriteLock
    _queue_depth: int
    _idle: IdleCheckpointer
    _paths: PathReader
    _dict_looked: bool
    _fold_sql: str
    _fold_newest_sql: str
    _appends_to_size_wal: int
    _batch_depth: int
    _heads: dict[str, int | None]
    _unwritten: dict[str, tuple[int | None, float, str]]
    _txn_new: list[NodeId]
    _known: dict[NodeId, tuple[int, int]]
    _data_version: int

    def _errors(self) -> AbstractContextManager[None]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _translate(self, exc: sqlite3.Error) -> NoReturn:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _starved(self) -> StoreLockedError:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _refuse_if_full(self) -> None:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _rollback(self) -> None:  # pragma: no cover - the backend's
        raise NotImplementedError

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
        check_commit(nodes, updates)
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
            self._refuse_if_full()
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
