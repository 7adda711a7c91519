"""Reading what a store holds by node id and ref name: the part of the one door
(:class:`~sesstree.repo.store.Store`) that sync, the server and the views need below names,
HEAD and revisions.

An id the store gave out (a ref's target, a parent, a resolved revision) that cannot be found
is damage, and these reads say so with StoreCorruptError; an id from outside (a peer's, a
user's) may simply not be stored, and the ``get_node``/``chain_if_stored`` reads answer None.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..errors import ReadViewWriteError
from ..node import NodeId
from ..store.base import Backend, Chain, RawNode, Ref, ReflogStamp, SessionMeta, StoredNode
from . import scan
from .view import lost

__all__ = ["StoredReads"]


class StoredReads:
    """The reads (and the one raw write) of a backend that take ids and full ref names, with
    their errors translated. :class:`~sesstree.repo.store.Store` is one, and adds the rest."""

    def __init__(self, backend: Backend) -> None:
        #: The storage seam below. Only repo/ (and the engine contract suite) reads it: every
        #: other caller goes through the methods of the store.
        self.backend = backend
        # How deep this thread is in read views (a view is the thread's: other threads write).
        self._views = threading.local()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One consistent read view: the reads inside ``with store.snapshot():`` all see the
        store as it was when the block began, whatever other writers commit meanwhile. It
        only reads: a write inside it raises :class:`ReadViewWriteError` and changes nothing."""
        with self.backend.snapshot():
            views = self._views
            views.depth = getattr(views, "depth", 0) + 1
            try:
                yield
            finally:
                views.depth -= 1

    def refuse_in_read_view(self, what: str) -> None:
        """Raise :class:`ReadViewWriteError` if this thread is inside :meth:`snapshot`
        (checked before anything is written, so the refused write changes nothing).

        Raises:
            ReadViewWriteError: inside a read view.
        """
        if getattr(self._views, "depth", 0):
            raise ReadViewWriteError(
                f"cannot {what} inside a read view (store.snapshot()), which only reads; "
                "nothing was changed: write after the block")

    @property
    def location(self) -> Path | str | None:
        """Where the store is: its SQLite file, its ``postgresql://`` URL (its password left
        out, as messages show it), or None for a store in memory. What files kept beside a
        store key on."""
        path = getattr(self.backend, "path", None)
        if isinstance(path, Path):
            return path
        url = getattr(self.backend, "url", None)
        return url if isinstance(url, str) else None

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        """Which of ``ids`` are stored (one query, whatever their number)."""
        return self.backend.has(list(ids)) if ids else set()

    def get_node(self, id: NodeId) -> StoredNode | None:
        """Node ``id`` as stored (encoded, with its depth), or None if it is not stored: for
        an id from outside (a peer's, a user's), where its absence is an answer."""
        return self.backend.get(id)

    def node(self, id: NodeId) -> StoredNode:
        """Node ``id`` as stored, for an id the store gave out (a ref's target, a parent).

        Raises:
            StoreCorruptError: it is not stored; gc never removes what a ref reaches, so only
                damage loses it.
        """
        stored = self.backend.get(id)
        if stored is None:
            raise lost(id)
        return stored

    def chain_at(self, node: NodeId, limit: int | None = None) -> Chain:
        """The events from the root to ``node`` (only the newest ``limit``), oldest first, for
        a node id the store gave out; :meth:`Store.chain` reads one by revision.

        Raises:
            StoreCorruptError: ``node`` or one of its ancestors is not stored (damage).
        """
        try:
            return self.backend.chain(node, limit)
        except KeyError:
            raise lost(node) from None

    def chain_if_stored(self, node: NodeId, limit: int | None = None) -> Chain | None:
        """As :meth:`chain_at` for an id from outside (what a peer asks for): None when
        ``node`` (or, in a damaged store, one of its ancestors) is not stored."""
        try:
            return self.backend.chain(node, limit)
        except KeyError:
            return None

    def ref(self, name: str) -> Ref | None:
        """The ref of full name ``name`` (:func:`~sesstree.node.session_ref`,
        :func:`~sesstree.node.tag_ref`, :func:`~sesstree.node.remote_ref`): where it points and
        when it moved, or None if there is no such ref."""
        return self.backend.get_ref(name)

    def target(self, name: str) -> NodeId | None:
        """Where the ref of full name ``name`` points, or None if there is no such ref."""
        found = self.backend.get_ref(name)
        return None if found is None else found.target

    def refs(self, prefix: str = "") -> list[Ref]:
        """Every ref whose full name starts with ``prefix`` (``sessions/``, ``tags/``, ``""``
        for all), with its full name, sorted by name."""
        return self.backend.list_refs(prefix)

    def put_nodes(self, nodes: Sequence[RawNode]) -> None:
        """Store encoded nodes (parents first or already stored; idempotent) and move no ref:
        what a fetch or a received push stores before it moves refs. The nodes must have
        been checked (:func:`sesstree.sync.pack.verify`); a ref moves with :meth:`Store.move_ref`.

        Raises:
            MissingNodeError: a parent is neither stored nor among ``nodes``.
        """
        self.refuse_in_read_view("store nodes")
        self.backend.commit(list(nodes), [])

    # -- bounded reads for the layers above (pages, labels, reachability) ------------------

    def session_metas(self) -> dict[str, SessionMeta]:
        """The stored metadata of every session that has some, by session name: one read."""
        return self.backend.list_session_meta()

    def count_nodes(self) -> int:
        """How many nodes the store holds."""
        return self.backend.count_nodes()

    def refs_at(self, targets: Sequence[NodeId]) -> list[Ref]:
        """The refs that point at one of ``targets``, sorted by name (an index lookup each where
        the engine has one)."""
        return scan.refs_at(self.backend, targets)

    def newest_refs(self, prefix: str, limit: int, offset: int = 0) -> list[Ref]:
        """The ``limit`` refs under ``prefix`` that moved last after the newest ``offset``, newest
        first (ties by name): read through an index on move time where the engine has one."""
        return scan.newest_refs(self.backend, prefix, limit, offset)

    def reflog_stamp(self) -> ReflogStamp:
        """A stamp of the reflog that changes whenever any ref moves (what a live page polls)."""
        return scan.reflog_stamp(self.backend)

    def recorded(self, ids: Sequence[NodeId]) -> dict[NodeId, float]:
        """When the store first recorded each of ``ids``, for the nodes it keeps a time for
        (see :meth:`~sesstree.store.base.ObjectStore.recorded`)."""
        return self.backend.recorded(list(ids)) if ids else {}

    def reflog_times(self, ref: str, targets: Sequence[NodeId]) -> dict[NodeId, float]:
        """When ref ``ref`` (a full name) last moved to each of ``targets`` it moved to."""
        return scan.reflog_times(self.backend, ref, targets)

    def links(self) -> scan.Links:
        """Every node as an integer key and its parent's key, newest first (see
        :class:`~sesstree.repo.scan.Links`): reachability without reading a payload."""
        return scan.Links(self.backend)
