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

The backend is made of collaborators it owns, each a plain class in its module that takes
what it needs. The connection and its state are in one :class:`~.state.ConnState`, which they
all share: :class:`~.release.Hold` opens it (and lets go of a store opened without its index),
:class:`~.txn.Transactions` runs write transactions, batches, snapshots and a ref's
compare-and-set, :class:`~.commit.Writer` commits, :class:`~.dicts.Dictionary` finds and trains
the compression dictionary, :class:`~.nodes.SqliteNodes` reads nodes and paths,
:class:`~.refs.RefReads` and :class:`~.refs.RefWrites` the refs and settings,
:class:`~.scans.SqliteScans` the bounded reads, and :func:`~.gc.collect_garbage` collects.
The hot paths (``commit``, ``chain``, ``get``, ``has``) are the collaborators' own methods,
bound onto the backend when it is made, so such a call costs no extra layer; the other methods
delegate to theirs.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from ...errors import SesstreeError, StoreReadOnlyError
from ...node import NodeId
from ..base import (
    Counts,
    IndexCounts,
    IndexHit,
    PackCounts,
    Progress,
    Ref,
    ReflogEntry,
    ReflogStamp,
    RefsReaching,
    SearchQuery,
    SessionMeta,
    StoredNode,
    StoreFormat,
    WatchMark,
)
from .background import Background
from .check import check_store
from .commit import BLOB_MIN, SIZE_WAL_AFTER, Writer
from .dicts import Dictionary
from .freepages import give_back_free_pages
from .nodes import SqliteNodes
from .opening import DURABLE_WAL_PAGES, PAGE_SIZE, WAL_PAGES
from .packcheck import check_packs
from .packing import Packer
from .plainpacks import compress_plain_packs
from .reaching import SqliteReaching
from .refs import RefReads, RefWrites
from .release import Hold
from .scans import SqliteScans
from .schema import FORMAT_VERSION
from .state import ConnState
from .textindex import SqliteTextIndex
from .textquery import SqliteSearch
from .txn import Transactions

__all__ = [
    "BLOB_MIN", "DURABLE_WAL_PAGES", "FORMAT_VERSION", "PAGE_SIZE", "SIZE_WAL_AFTER", "WAL_PAGES",
    "SqliteBackend",
]

# A writer idle this many seconds has its commits folded into the main file (see
# wal.IdleCheckpointer): recent history does not live on only in the WAL.
IDLE_CHECKPOINT = 1.0
# How long a closing writer waits for the write lock to train the dictionary when it is due
# (a pause does not wait: the next one tries again).
_CLOSE_WAIT = 1.0
# Time given to compressing again the packs made without a dictionary (plainpacks.py), at a
# pause and at a close (seconds): about 1.5 ms a pack of 256 messages.
_PLAIN_AT_PAUSE = 0.2
_PLAIN_AT_CLOSE = 0.5


class SqliteBackend:
    """A store in one SQLite file. See the module docstring for the layout and for the
    collaborators whose methods make up this one's."""

    def __init__(
        self, path: str | os.PathLike[str], *, create: bool = True, durable: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.path = Path(path)
        self._state = state = ConnState(self.path, timeout=timeout, durable=durable)
        self._hold = hold = Hold(state)
        hold.connect(create)
        #: The connection (one object for the store's whole life: see release.py).
        self._db = state.db
        self._txn = txn = Transactions(state, hold.refuse_if_full, self._checkpoint_idle,
                                       IDLE_CHECKPOINT)
        self._queue, self._idle = txn.queue, txn.idle
        self._dicts = dicts = Dictionary(state, txn)
        # Format 5 packs settled history (packing.py); an older store opened read-only has no
        # packs, and one opened read-only is never written.
        self._packer = packer = (
            Packer(state, txn, lambda: None if dicts.looked else dicts.find())
            if state.packs and not state.read_only else None
        )
        # What a writer's appends make due (a tail to pack, a checkpoint) runs in a thread of
        # its own, with a connection of its own (background.py). Not a durable writer's: the
        # thread's reads hold a place in the WAL, which keeps SQLite from starting the log over
        # after a checkpoint, so the log grew past the size it was given (wal.py) and durable
        # commits paid for the file's growth again. A durable writer packs inline.
        self._background = background = (
            Background(state, packer) if packer is not None and not durable else None)
        if packer is not None:
            packer.background = background
        # A batch that took the store past TRAIN_AFTER rows trains the dictionary at its end,
        # and the tails it made PACK_AT long are packed.
        txn.after_batch = self._after_batch
        self._writer = writer = Writer(state, txn, dicts, hold.refuse_if_full, packer,
                                       background)
        self._nodes = nodes = SqliteNodes(state, txn)
        self._refs = refs = RefReads(state, txn)
        self._ref_writes = RefWrites(state, txn)
        self._scans = SqliteScans(state, txn, refs)
        self._text = text = SqliteTextIndex(state, txn)
        self._search = SqliteSearch(state, txn, text)
        self._reaching = SqliteReaching(state, txn)
        # The hot paths (an append, a load, a node), bound from the collaborators that
        # implement them: a call costs no extra layer. The rest delegate below.
        self.commit = writer.commit
        self.chain = nodes.chain
        self.get = nodes.get
        self.has = nodes.has

    @property
    def read_only(self) -> bool:
        """True when the store could only be opened for reading (read-only media, or a full
        disk)."""
        return self._state.read_only

    @property
    def full(self) -> bool:
        """True on a disk too full for ``store.db-shm``: reads work, every write raises
        StoreFullError."""
        return self._state.full

    # -- transactions (txn.py) -----------------------------------------------------------------

    def batch(self) -> AbstractContextManager[None]:
        """One transaction for every write inside the block."""
        return self._txn.batch()

    def snapshot(self) -> AbstractContextManager[None]:
        """Every read inside the block sees one state of the store."""
        return self._txn.snapshot()

    # -- nodes (nodes.py) ----------------------------------------------------------------------

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        return self._nodes.resolve_prefix(prefix, limit)

    def recorded(self, ids: Sequence[NodeId]) -> dict[NodeId, float]:
        return self._nodes.recorded(ids)

    def iter_nodes(self) -> Iterator[StoredNode]:
        return self._nodes.iter_nodes()

    def count_nodes(self) -> int:
        return self._nodes.count_nodes()

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        return self._nodes.delete_nodes(ids)

    # -- the text index (textindex.py, textquery.py) -------------------------------------------

    def search_nodes(self, query: SearchQuery, limit: int, before: int | None = None) -> list[IndexHit]:
        return self._search.search_nodes(query, limit, before)

    def index_faults(self, progress: Progress | None = None) -> list[str]:
        return self._text.faults(progress)

    def rebuild_index(self, progress: Progress | None = None) -> IndexCounts:
        return self._text.rebuild(progress)

    def index_counts(self) -> IndexCounts:
        return self._text.counts()

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        return self._reaching.refs_reaching(ids, prefix, bound)

    def search_reaching(self, query: SearchQuery, limit: int, before: int | None, prefix: str,
                        bound: int) -> list[tuple[IndexHit, RefsReaching]]:
        return self._reaching.search_reaching(self._search, query, limit, before, prefix, bound)

    # -- refs and settings (refs.py) -----------------------------------------------------------

    def get_ref(self, name: str) -> Ref | None:
        return self._refs.get_ref(name)

    def list_refs(self, prefix: str) -> list[Ref]:
        return self._refs.list_refs(prefix)

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        return self._refs.reflog(name)

    def get_session_meta(self, name: str) -> SessionMeta | None:
        return self._refs.get_session_meta(name)

    def list_session_meta(self) -> dict[str, SessionMeta]:
        return self._refs.list_session_meta()

    def list_watch_marks(self) -> dict[str, WatchMark]:
        return self._refs.list_watch_marks()

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        self._ref_writes.set_watch_mark(path, old, new)

    def get_head(self) -> str | None:
        return self._refs.get_head()

    def store_format(self) -> StoreFormat:
        return self._refs.store_format()

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        self._ref_writes.rename_ref(old, new, target, reason)

    def expire_reflog(self, name: str) -> int:
        return self._ref_writes.expire_reflog(name)

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        self._ref_writes.set_session_meta(name, meta)

    def set_head(self, value: str) -> None:
        self._ref_writes.set_head(value)

    # -- bounded reads (scans.py) --------------------------------------------------------------

    def list_refs_with_depth(self, prefix: str) -> list[tuple[Ref, int]]:
        return self._scans.list_refs_with_depth(prefix)

    def refs_at(self, targets: Sequence[NodeId]) -> list[Ref]:
        return self._scans.refs_at(targets)

    def node_keys(self, ids: Sequence[NodeId]) -> dict[NodeId, int]:
        return self._scans.node_keys(ids)

    def ids_of_keys(self, keys: Sequence[int]) -> dict[int, NodeId]:
        return self._scans.ids_of_keys(keys)

    def iter_links(self) -> Iterator[tuple[int, int | None]]:
        return self._scans.iter_links()

    def verify_nodes(self, progress: Progress | None = None) -> Iterator[str]:
        return self._scans.verify_nodes(progress)

    def newest_refs(self, prefix: str, limit: int, offset: int = 0) -> list[Ref]:
        return self._scans.newest_refs(prefix, limit, offset)

    def reflog_stamp(self) -> ReflogStamp:
        return self._scans.reflog_stamp()

    def reflog_page(self, name: str, limit: int, offset: int = 0) -> tuple[list[ReflogEntry], int]:
        return self._scans.reflog_page(name, limit, offset)

    def reflog_times(self, name: str, targets: Sequence[NodeId]) -> dict[NodeId, float]:
        return self._scans.reflog_times(name, targets)

    def counts(self, progress: Progress | None = None) -> Counts:
        return self._scans.counts(progress)

    # -- maintenance ----------------------------------------------------------------------------

    def collect_garbage(
        self, dry_run: bool, keep: NodeId | None = None
    ) -> tuple[list[NodeId], int, int]:
        # Each step takes the connection's lock itself, so other threads get turns too.
        state = self._state
        with state.lock, state.errors():
            self._txn.write_folds()
        with state.errors():
            # Imported here: only gc needs it, and `sess log` should not load it at start-up.
            from .gc import collect_garbage

            return collect_garbage(state, self._txn, dry_run, keep)

    def sweep(
        self, dry_run: bool, keep: NodeId | None, progress: Progress | None
    ) -> tuple[list[NodeId], int, int]:
        """:meth:`collect_garbage`, reporting its progress."""
        with self._state.errors():
            from .gc import collect_garbage

            return collect_garbage(self._state, self._txn, dry_run, keep, progress)

    def check(self) -> list[str]:
        state = self._state
        with state.lock, state.errors():
            self._txn.write_folds()
            faults = check_store(state.db, self.path, state.paths.inflate, state.codec_columns)
            if state.paths.packed is not None:
                faults += check_packs(state.db, state.paths.packed)
            return faults

    # -- packs (packing.py) ---------------------------------------------------------------------

    def pack_counts(self) -> PackCounts:
        """Packs, packed and loose nodes, and the packs' bytes (once the packs this writer's
        appends made due are made)."""
        if self._background is not None:
            self._background.wait()
        if self._packer is None:
            with self._state.lock, self._state.errors():
                nodes = int(self._db.execute("SELECT count(*) FROM nodes").fetchone()[0])
            return PackCounts(0, 0, nodes, 0, 0)
        return self._packer.counts()

    def repack(self, progress: Progress | None = None) -> PackCounts:
        """Pack every loose tail, whatever its length (see Packing.repack)."""
        if self._packer is None:
            self._hold.refuse_if_full()
            raise StoreReadOnlyError(f"store {self.path} is read-only: it cannot be repacked")
        if self._background is not None:
            self._background.wait()  # (what it is packing now would only be packed twice)
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
        return self._packer.repack(progress)

    def physical_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def checkpoint(self) -> None:
        """Fold the WAL back into the main file (used before measuring size), once the
        background thread's work is done (a checkpoint of its own would keep this one from
        starting the WAL over)."""
        if self._background is not None:
            self._background.wait()
        with self._state.lock, self._state.errors():
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _after_batch(self) -> None:
        self._dicts.train_if_due()
        if self._packer is not None:
            try:
                self._packer.after_commit(list(self._packer.moved))
            except SesstreeError:
                pass  # the batch is committed; its tail stays loose until the next pause

    def _checkpoint_idle(self, closing: bool = False) -> bool:
        """Pack the tails moved since the last pause (packing.py), then fold this writer's
        commits into the main file (see IdleCheckpointer), unless a transaction is open: then
        the next pause will. True if an upgrade's packing has more to do (the checkpointer
        calls again after a period)."""
        more = False
        with self._state.lock:
            if not self._db.in_transaction:
                self._dicts.train_if_due(_CLOSE_WAIT if closing else 0.0)
                if self._packer is not None:
                    try:
                        more = self._packer.at_pause(closing=closing)
                    except (SesstreeError, sqlite3.Error):
                        pass  # packing only makes reads faster: the next pause tries again
                    # The packs made before the store had a dictionary, compressed with it;
                    # then the pages packing freed past a reserve go back to the file system.
                    try:
                        with self._state.errors():
                            compress_plain_packs(self._state, self._txn,
                                                 _PLAIN_AT_CLOSE if closing else _PLAIN_AT_PAUSE)
                            give_back_free_pages(self._state, self._txn, closing)
                    except (SesstreeError, sqlite3.Error):
                        pass  # only space: the next pause tries again
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return more

    def close(self) -> None:
        self._idle.stop()
        if self._background is not None:
            # The pack under way is finished; what was queued, the closing pause packs.
            self._background.close()
        with self._state.lock:
            if self._idle.wrote_since_checkpoint:
                # What this connection wrote should not live on only in the WAL.
                try:
                    self._checkpoint_idle(closing=True)
                except sqlite3.Error:
                    pass  # the commits are safe in the WAL all the same
            self._db.close()
            self._queue.close()
