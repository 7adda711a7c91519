"""The SQLite backend's commits: a node and its ref's move, as one statement on the hot path of
every append, or one transaction, or a part of a batch.

The ref's move itself is a compare-and-set of :class:`~sesstree.store.sqlite.txn.Transactions`;
inside a batch, which holds the write lock, where each ref is now is known there, and a fold
of a ref the batch moved already waits to be written once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from blake3 import blake3

from ...errors import MissingNodeError, SesstreeError
from ..base import RawNode, RefUpdate
from ..codec import SMALL_MIN
from ..packs import INLINE_MAX
from ..rows import row_data
from ..storable import check_commit
from .background import CHECKPOINT_EVERY, Background
from .dicts import Dictionary
from .opening import WAL_PAGES
from .packing import Packer
from .sql import APPEND_FOLD, APPEND_ONE, INSERT_LOOSE, INSERT_NODE, by_id
from .state import ConnState
from .txn import Transactions
from .wal import preallocate_wal

__all__ = ["BLOB_MIN", "SIZE_WAL_AFTER", "Writer"]

#: Payloads larger than this are stored once, by hash, compressed (tool results, files).
BLOB_MIN = 1024
#: A connection that has committed this many single appends is a long writer: its WAL is then
#: given its full size once, so that later appends overwrite blocks instead of growing the file.
SIZE_WAL_AFTER = 1_000


class Writer:
    """Commits nodes and ref moves on the backend's connection: the one-statement append, one
    transaction, or a part of an open batch.

    Owns the count of appends left before the WAL is given its size (see wal.py); changes
    the shared :class:`ConnState`'s row cache and queue depth (and reads the batch's depth),
    moves refs through ``txn`` and stores payloads with the dictionary ``dicts`` finds.
    """

    def __init__(self, state: ConnState, txn: Transactions, dicts: Dictionary,
                 refuse_if_full: Callable[[], None], packer: Packer | None = None,
                 background: Background | None = None) -> None:
        self._state = state
        #: Checkpoints the WAL every CHECKPOINT_EVERY commits (None: SQLite's own only).
        self._background = background
        self._to_checkpoint = CHECKPOINT_EVERY
        #: Packs a tail that commits made long enough (format 5; None for an older store).
        self.packer = packer
        self._txn = txn
        self._dicts = dicts
        self._refuse_if_full = refuse_if_full
        # Objects that stay the same for the life of the connection, looked up once.
        self._db = state.db
        self._lock = state.lock
        self._queue = txn.queue
        self._idle = txn.idle
        # Payloads larger than this are stored apart, once, by hash: format 5 keeps those up to
        # INLINE_MAX in the loose row (they go into a pack's frame when packed).
        self._blob_min = INLINE_MAX if packer is not None else BLOB_MIN
        # Appends committed by this connection, until the WAL is given its size (a long
        # writer's appends then stop growing the file; see wal.py). A durable store's WAL
        # was sized when it was opened.
        self._appends_to_size_wal = -1 if state.durable else SIZE_WAL_AFTER
        # The recorded time of the nodes of the commit being made (milliseconds).
        self._commit_ms = 0

    def _insert(self, node: RawNode) -> tuple[int, int]:
        known = self._state.known.get(node.id)
        if known is not None:
            return known
        parent_seq: int | None = None
        depth = 1
        if node.parent is not None:
            parent = self._state.seq_of(node.parent)
            if parent is None:
                raise MissingNodeError(f"parent {node.parent[:12]} of {node.id[:12]} is not stored")
            parent_seq, depth = parent[0], parent[1] + 1
        inline: bytes | None = node.encoded
        bid: int | None = None
        codec: int | None = None
        db = self._db
        if not self._dicts.looked:
            self._dicts.find()
        if len(node.encoded) > self._blob_min:
            digest = blake3(node.encoded).digest()
            known_blob = db.execute("SELECT bid FROM blobs WHERE hash = ?", (digest,)).fetchone()
            if known_blob is not None:
                bid = known_blob[0]
            else:
                bcodec, blob = self._state.paths.codec.pack_blob(node.encoded)
                cur = db.execute(
                    "INSERT INTO blobs(hash, data, codec) VALUES (?, ?, ?)", (digest, blob, bcodec)
                )
                bid = cur.lastrowid
                self._dicts.count_plain(bcodec == 0)
            inline = None
        row = row_data(node.type, inline)
        if bid is None and self.packer is None:
            codec, row = self._state.paths.codec.pack(row)
            self._dicts.count_plain(len(row) >= SMALL_MIN)
        elif bid is None:
            self._dicts.count_plain(True)  # (plain until packed: see _append_one)
        key = bytes.fromhex(node.id)
        # Its recorded time (format 6): one for the whole commit or batch (it lands at once);
        # an insert that finds the node stored keeps the older.
        ms = self._state.batch_ms or self._commit_ms
        cur = db.execute(INSERT_NODE, (key, parent_seq, depth, bid, ms))
        if cur.rowcount == 1:
            assert cur.lastrowid is not None
            db.execute(INSERT_LOOSE, (cur.lastrowid, row, codec))
            value = (cur.lastrowid, depth)
            self._state.txn_new.append(node.id)
        else:
            row = db.execute(f"SELECT seq, depth FROM nodes WHERE {by_id('id', '?1')}",
                             (key,)).fetchone()
            value = (row[0], row[1])
        self._state.remember(node.id, value)
        return value

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """Store ``nodes`` and move refs by ``updates``, all or nothing (see Backend.commit)."""
        check_commit(nodes, updates)
        state = self._state
        self._commit_ms = int(time.time() * 1000)
        with self._lock:
            if state.batch_depth:
                with state.errors():
                    self._commit_batched(nodes, updates)
                return
            # The writers' queue, inline rather than through Transactions.queued: this is every
            # append's path, and a generator-based context manager costs about a microsecond.
            if state.queue_depth:
                self._commit_alone(nodes, updates)
                return
            self._refuse_if_full()
            queue = self._queue
            if not queue.acquire(state.timeout):
                raise self._txn.starved()
            state.queue_depth = 1
            try:
                self._commit_alone(nodes, updates)
            finally:
                state.queue_depth = 0
                queue.release()
                self._idle.wrote()
            # (Training the dictionary waits for the writer's next pause, see dicts.py.)
            self._to_checkpoint -= 1
            if self._to_checkpoint <= 0 and self._background is not None:
                self._to_checkpoint = CHECKPOINT_EVERY
                self._background.checkpoint()
            packer = self.packer
            if packer is not None:
                due = [u.name for u in updates if u.new is not None and packer.note(u.name)]
                if due:
                    # Committed: packing is a transaction of its own, after it (packing.py),
                    # made by the background thread (background.py), or here once that is
                    # closed. Its failure (a disk too full for the pack, the lock held too
                    # long) is not the append's: the tail stays loose, and the next append or
                    # pause packs it.
                    try:
                        with state.errors():
                            packer.after_commit(due)
                    except SesstreeError:
                        pass

    def _commit_alone(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """A commit outside any batch: the one-statement append, or one transaction."""
        db = self._db
        if (
            len(nodes) == 1 and len(updates) == 1 and self._append_one(nodes[0], updates[0])
        ):
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            self._state.sync_cache()
            self._check_then_insert(nodes, updates)
            now = time.time()
            for u in updates:
                if not self._txn.log(u.name, self._old_seq(u), self._new_seq(u), u.reason, now,
                                 u.fold):
                    raise self._txn.conflict(u)
            db.execute("COMMIT")
            self._state.txn_new.clear()
        except sqlite3.Error as exc:
            self._txn.rollback()
            self._state.translate(exc)
        except BaseException:
            self._txn.rollback()
            raise

    def _append_one(self, node: RawNode, u: RefUpdate) -> bool:
        """The hot path of every append, in one statement (a large payload's blob too). False
        if it does not apply."""
        if u.new != node.id or u.old != node.parent:
            return False
        dicts = self._dicts
        if not dicts.looked:
            dicts.find()
        encoded = node.encoded
        codec = self._state.paths.codec
        if len(encoded) > self._blob_min:
            # Compressed before knowing whether the blob is stored already: a lookup first
            # would be a second statement, and compressing 2 KB costs less than one.
            bcodec, blob = codec.pack_blob(encoded)
            packed, row, digest = None, row_data(node.type, None), blake3(encoded).digest()
            dicts.count_plain(bcodec == 0)
        elif self.packer is not None:
            # Format 5: a loose row is plain. It is packed soon (compressed then, with the
            # store's dictionary, in one frame for a run of rows), so compressing it alone
            # now would only cost the append and the packing an inflate.
            packed, row, blob, bcodec, digest = None, row_data(node.type, encoded), None, None, None
            dicts.count_plain(True)
        else:
            packed, row = codec.pack(row_data(node.type, encoded))
            blob, bcodec, digest = None, None, None
            dicts.count_plain(len(encoded) >= SMALL_MIN)
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
            raise self._txn.conflict(u) from None
        except sqlite3.Error as exc:
            self._state.translate(exc)
        self._appends_to_size_wal -= 1
        if self._appends_to_size_wal == 0:
            try:
                preallocate_wal(self._db, self._state.path, WAL_PAGES, sync=False)
            except (OSError, sqlite3.Error):
                pass  # only a speed-up: the append itself is committed, and the WAL just grows
        return True

    def _old_seq(self, u: RefUpdate) -> int | None:
        """The row the update expects its ref at; a node that is not stored cannot be it."""
        if u.old is None:
            return None
        found = self._state.seq_of(u.old)
        if found is None:
            raise self._txn.conflict(u)
        return found[0]

    def _new_seq(self, u: RefUpdate) -> int | None:
        if u.new is None:
            return None
        found = self._state.seq_of(u.new)
        if found is None:
            raise MissingNodeError(f"{u.name}: target {u.new[:12]} is not stored")
        return found[0]

    def _check_then_insert(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """Every compare-and-set first, then the nodes: a lost one is a conflict (retrying
        helps) even when a node is missing too, and inside a batch it writes nothing that
        would spoil the batch."""
        for u in updates:
            if self._txn.ref_seq(u.name) != self._old_seq(u):
                raise self._txn.conflict(u)
        for n in nodes:
            self._insert(n)

    def _commit_batched(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        self._check_then_insert(nodes, updates)
        if self.packer is not None:
            for u in updates:  # (packed when the batch has committed: see Backend.batch)
                if u.new is not None:
                    self.packer.note(u.name)
        now = time.time()
        for u in updates:
            old, new = self._old_seq(u), self._new_seq(u)  # cached lookups
            if u.fold and u.name in self._txn.heads:
                # The batch moved this ref, holding the write lock since: its newest entry is
                # the batch's, and where the ref is, is known. The rewrite can wait.
                self._txn.unwritten[u.name] = (new, now, u.reason)
                self._txn.heads[u.name] = new
                continue
            self._txn.write_folds()  # the log this move is compared with must be up to date
            if not self._txn.log(u.name, old, new, u.reason, now, u.fold):  # pragma: no cover
                raise self._txn.conflict(u)  # checked above, under the write lock
            self._txn.heads[u.name] = new
