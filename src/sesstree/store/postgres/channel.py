"""The connection state one PostgreSQL backend shares with its collaborators.

The backend (:class:`~sesstree.store.postgres.backend.PostgresBackend`) makes one
:class:`Channel` and hands it to each part it owns: the writes, the reads, the scans. The
channel holds what they must agree on:

- the :class:`~sesstree.store.postgres.conn.Connector` (reconnecting, retrying, translating
  errors) and the lock that lets one thread at a time use it;
- the open batch, if any: how deep it is nested, where each ref it moved now is (it holds
  those refs' row locks), and the appends it has decided but not sent yet.

Every statement goes through :meth:`Channel.run`, which first sends the batch's queued appends:
a read inside a batch sees what the batch wrote, as it would on SQLite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import ConflictError
from ...node import NodeId
from . import refs
from .conn import Conn, Connector

__all__ = ["Channel", "QueuedAppend"]

T = TypeVar("T")
#: An append a batch decided but has not sent: the head it expects, and its node's parameters
#: (see :func:`~sesstree.store.postgres.objects.node_params`).
QueuedAppend = tuple[NodeId | None, tuple[Any, ...]]


class Channel:
    """The connection of one backend and the state of its open batch (see the module)."""

    def __init__(self, conn: Connector, url: str) -> None:
        self.conn = conn
        #: The store's URL without its password, as messages name it.
        self.url = url
        self.lock = threading.RLock()
        #: How deeply batches are nested (0: none is open).
        self.depth = 0
        #: Inside a batch: where each ref the batch moved is now (the batch holds its row lock).
        self.heads: dict[str, NodeId | None] = {}
        #: Inside a batch: the appends not sent yet, by ref, oldest first.
        self.queue: dict[str, list[QueuedAppend]] = {}
        #: The reason of each ref's newest queued append (its run is logged as one entry).
        self.queue_reason: dict[str, str] = {}

    def run(self, work: Callable[[Conn, bool], T]) -> T:
        """Run ``work`` on the server, after the batch's queued appends (it may read them)."""
        if self.queue:
            self.send_queue()
        return self.conn.run(work)

    def read(
        self, sql: str, params: Any = None, *, fetch: bool = True, binary: bool = False,
    ) -> list[Any]:
        """One statement (rerun after a lost connection), its rows."""

        def work(conn: Conn, replay: bool) -> list[Any]:
            # The SQL is one of this package's constants.
            cur = conn.execute(sql, params, binary=binary)
            return cur.fetchall() if fetch and cur.description is not None else []

        with self.lock:
            return self.run(work)

    def send_queue(self) -> None:
        """Send each ref's queued run of appends, one call per ref."""
        queue, self.queue = self.queue, {}
        reasons, self.queue_reason = self.queue_reason, {}

        def work(conn: Conn, replay: bool) -> None:
            for name, run in queue.items():
                old = run[0][0]
                columns = list(zip(*(p for _, p in run), strict=True))
                row = conn.execute(refs.APPEND_RUN, (
                    name, bytes.fromhex(old) if old is not None else None,
                    list(columns[0]), list(columns[2]), list(columns[3]), list(columns[4]),
                    list(columns[5]), reasons[name],
                )).fetchone()
                if row is None or row[0] != "ok":  # pragma: no cover - the batch holds the lock
                    raise ConflictError(f"{name} moved during the batch")

        self.conn.run(work)

    def flush(self) -> None:
        """Send a batch's queued appends: an operation that rewrites the log must see them."""
        if self.queue:
            self.send_queue()
        self.heads.clear()  # a rename or gc may move refs: ask the server again

    def drop_queue(self) -> None:
        """Forget the queued appends (the batch is being rolled back)."""
        self.queue.clear()
        self.queue_reason.clear()

    def end_batch(self) -> None:
        """The outermost batch is over (committed or rolled back)."""
        self.depth = 0
        self.heads.clear()
        self.conn.end_batch()
