"""Bounded reads over any backend: the backend's own (:class:`~sesstree.store.base.ScaleReads`)
when it has them, else a generic version over the core seam (which reads the whole store: fine
for the in-memory backend, the only one without them).

They take a backend, so only ``repo/`` calls them: the layers above reach each through a
:class:`~sesstree.repo.store.Store` method of the same name (``store.newest_refs(...)``,
``store.links()``), which keeps the store the one door to its engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

from ..node import NodeId
from ..store.base import Backend, Ref, ReflogEntry, ReflogStamp, ScaleReads

__all__ = ["Links", "list_refs_with_depth", "newest_refs", "reflog_page", "reflog_stamp",
           "reflog_times", "refs_at", "scale_reads"]


def scale_reads(backend: Backend) -> ScaleReads | None:
    """The backend as :class:`ScaleReads`, or None if it does not provide them."""
    return cast(ScaleReads, backend) if hasattr(backend, "iter_links") else None


def list_refs_with_depth(backend: Backend, prefix: str) -> list[tuple[Ref, int]]:
    """Every ref under ``prefix`` with its target's depth, sorted by name."""
    scan = scale_reads(backend)
    if scan is not None:
        return scan.list_refs_with_depth(prefix)
    out = []
    for ref in backend.list_refs(prefix):
        node = backend.get(ref.target)
        out.append((ref, 0 if node is None else node.depth))
    return out


def refs_at(backend: Backend, targets: Sequence[NodeId]) -> list[Ref]:
    """The refs that point at one of ``targets``, sorted by name."""
    scan = scale_reads(backend)
    if scan is not None:
        return scan.refs_at(targets)
    wanted = set(targets)
    return [r for r in backend.list_refs("") if r.target in wanted]


def newest_refs(backend: Backend, prefix: str, limit: int, offset: int = 0) -> list[Ref]:
    """The refs under ``prefix`` that moved last, newest first (ties by name)."""
    scan = scale_reads(backend)
    if scan is not None:
        return scan.newest_refs(prefix, limit, offset)
    refs = sorted(backend.list_refs(prefix), key=lambda r: (-r.moved, r.name))
    return refs[offset:offset + limit]


def reflog_stamp(backend: Backend) -> ReflogStamp:
    """A stamp of the reflog that changes whenever any ref moves (see :class:`ReflogStamp`)."""
    scan = scale_reads(backend)
    if scan is not None:
        return scan.reflog_stamp()
    log = backend.reflog()
    return ReflogStamp(len(log), max((e.time for e in log), default=0.0))


def reflog_page(backend: Backend, name: str, limit: int, offset: int = 0
                ) -> tuple[list[ReflogEntry], int]:
    """Moves of ref ``name``, newest first: ``limit`` after the newest ``offset``, and the
    ref's count of entries (see :meth:`ScaleReads.reflog_page`)."""
    scan = scale_reads(backend)
    if scan is not None:
        return scan.reflog_page(name, limit, offset)
    log = backend.reflog(name)
    log.reverse()
    return log[offset:offset + limit], len(log)


def reflog_times(backend: Backend, name: str, targets: Sequence[NodeId]) -> dict[NodeId, float]:
    """When ref ``name`` last moved to each of ``targets`` it moved to."""
    scan = scale_reads(backend)
    if scan is not None:
        return scan.reflog_times(name, targets)
    wanted = set(targets)
    return {e.new: e.time for e in backend.reflog(name) if e.new in wanted}


class Links:
    """Each node as an integer key and its parent's key, newest first: reachability from
    integers only. Keys grow in write order (a parent's is smaller than its children's)."""

    def __init__(self, backend: Backend) -> None:
        self._scan = scale_reads(backend)
        self._backend = backend
        self._key: dict[NodeId, int] | None = None
        self._id: list[NodeId] | None = None
        self._parent: list[int | None] | None = None

    def _generic(self) -> tuple[dict[NodeId, int], list[NodeId], list[int | None]]:
        if self._key is None or self._id is None or self._parent is None:
            key: dict[NodeId, int] = {}
            ids: list[NodeId] = [NodeId("")]
            parent: list[int | None] = [None]
            for node in self._backend.iter_nodes():  # parents first
                key[node.id] = len(ids)
                ids.append(node.id)
                parent.append(None if node.parent is None else key.get(node.parent))
            self._key, self._id, self._parent = key, ids, parent
        return self._key, self._id, self._parent

    def keys(self, ids: Sequence[NodeId]) -> dict[NodeId, int]:
        """The key of each stored node among ``ids``."""
        if self._scan is not None:
            return self._scan.node_keys(ids)
        key = self._generic()[0]
        return {i: key[i] for i in ids if i in key}

    def ids(self, keys: Sequence[int]) -> dict[int, NodeId]:
        """The id of each stored key among ``keys``."""
        if self._scan is not None:
            return self._scan.ids_of_keys(keys)
        ids = self._generic()[1]
        return {k: ids[k] for k in keys if 0 < k < len(ids)}

    def newest_first(self) -> Iterator[tuple[int, int | None]]:
        """Every (key, parent key), newest first, streamed."""
        if self._scan is not None:
            yield from self._scan.iter_links()
            return
        parent = self._generic()[2]
        for k in range(len(parent) - 1, 0, -1):
            yield k, parent[k]

