"""The state of one SQLite connection, in one place: what every collaborator of
:class:`~sesstree.store.sqlite.backend.SqliteBackend` reads and changes.

The backend makes one :class:`ConnState` and hands it to each collaborator it owns (the opener
in :mod:`~sesstree.store.sqlite.release`, the transactions, the writer, the readers, the
dictionary); none of them keeps a copy of what may change (the depths of the open batch and
of the writers' queue, the cache of row numbers, what depends on the store's format).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NoReturn

from ...errors import StoreCorruptError
from ...node import NodeId
from .media import translate, translating
from .paths import PathReader
from .schema import has_codec, has_index, has_packs, has_times, reflog_has_started
from .sql import (
    FOLD,
    FOLD_NEWEST,
    REFLOG_ROWS,
    by_id,
    without_codec,
    without_packs,
    without_started,
)

__all__ = ["ConnState"]

_CACHE_MAX = 200_000
_SEQ_OF = f"SELECT seq, depth FROM nodes WHERE {by_id('id', '?1')}"


class ConnState:
    """The connection to one store file and what goes with it.

    Owned here: the connection (``db``, set by the opener; a stand-in that reconnects when
    the store was opened without its index, see :mod:`~sesstree.store.sqlite.release`), the
    lock every use of it holds, how it was opened (``read_only``, ``full``), the depth of the
    open batch and of this store's place in the writers' queue, the cache of row numbers of
    stored nodes (valid while ``data_version`` is), and, read again at each (re)open, what
    depends on the store's format (:meth:`setup`).
    """

    db: sqlite3.Connection

    def __init__(self, path: Path, *, timeout: float, durable: bool) -> None:
        self.path = path
        self.timeout = timeout
        self.durable = durable
        self.lock = threading.RLock()
        #: True when the store could only be opened for reading (read-only media, a full disk).
        self.read_only = False
        #: True on a disk too full for ``store.db-shm``: reads work, every write raises
        #: StoreFullError.
        self.full = False
        #: Nesting of the open batch (0: none), and of this store's place in the writers'
        #: queue (0: not held).
        self.batch_depth = 0
        self.queue_depth = 0
        #: The recorded time (milliseconds) of every node the open batch writes: a batch
        #: lands at once, so its nodes are dated alike (None: no batch open).
        self.batch_ms: int | None = None
        #: id -> (seq, depth) of nodes known to be stored: saves a lookup per append.
        self.known: dict[NodeId, tuple[int, int]] = {}
        #: Nodes the open transaction inserted (forgotten from ``known`` if it rolls back).
        self.txn_new: list[NodeId] = []
        #: PRAGMA data_version when ``known`` was last known good: it changes when another
        #: connection commits, and a gc there may remove rows it names.
        self.data_version = -1
        # Set by setup():
        self.codec_columns = False
        self.packs = False
        self.times = False
        self.text_index = False
        self.paths: PathReader
        self.fold_sql = self.fold_newest_sql = self.reflog_sql = ""

    def setup(self) -> None:
        """What depends on the store's format, read when it is opened (again)."""
        # Format 4's codec columns (a format-3 store opened read-only has none).
        self.codec_columns = has_codec(self.db)
        # Format 5's packs (an older store opened read-only has none, and is read as it is).
        self.packs = has_packs(self.db)
        # Format 6's recorded times (an older store opened read-only has none).
        self.times = has_times(self.db)
        # Format 7's text index (an older store opened read-only has none, and is scanned).
        self.text_index = has_index(self.db)
        self.paths = PathReader(self.db, self.path, self.codec_columns, self.packs)
        # The statements that write and read a folded entry's `started`, or (a store made
        # before it was kept) their forms without it.
        started = reflog_has_started(self.db)
        self.fold_sql = FOLD if started else without_started(FOLD)
        self.fold_newest_sql = FOLD_NEWEST if started else without_started(FOLD_NEWEST)
        self.reflog_sql = REFLOG_ROWS if started else without_started(REFLOG_ROWS)

    def errors(self) -> AbstractContextManager[None]:
        """SQLite errors inside the block as sesstree errors."""
        return translating(self.path, full=self.full)

    def translate(self, exc: sqlite3.Error) -> NoReturn:
        """Raise the sesstree error ``exc`` means."""
        translate(self.path, exc, full=self.full)

    def q(self, sql: str) -> str:
        """``sql`` as this store can run it (see without_codec and without_packs)."""
        if not self.packs:
            sql = without_packs(sql)
        return sql if self.codec_columns else without_codec(sql)

    def hex(self, value: object) -> NodeId:
        """A node id read from the file, which must be 32 bytes."""
        if not isinstance(value, bytes) or len(value) != 32:
            raise StoreCorruptError(f"store {self.path} is damaged: a node id is unreadable")
        return NodeId(value.hex())

    def id_of_seq(self, seq: int | None) -> NodeId | None:
        """The id of the node at row ``seq``, if there is one."""
        if seq is None:
            return None
        row = self.db.execute("SELECT id FROM nodes WHERE seq = ?", (seq,)).fetchone()
        return self.hex(row[0]) if row else None

    # -- the cache of row numbers ------------------------------------------------------------

    def seq_of(self, id: NodeId) -> tuple[int, int] | None:
        """(row, depth) of a stored node, or None."""
        known = self.known.get(id)
        if known is None:
            row = self.db.execute(_SEQ_OF, (bytes.fromhex(id),)).fetchone()
            if row is None:
                return None
            known = (row[0], row[1])
            self.remember(id, known)
        return known

    def remember(self, id: NodeId, value: tuple[int, int]) -> None:
        """Cache the row and depth of a stored node (a bounded cache)."""
        if len(self.known) >= _CACHE_MAX:
            self.known.clear()
        self.known[id] = value

    def sync_cache(self) -> None:
        """Forget cached row numbers if another connection has committed since we looked."""
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if version != self.data_version:
            self.known.clear()
            self.data_version = version
