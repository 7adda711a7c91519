"""Keeping a store honest: fsck, gc and stats."""

from __future__ import annotations

from typing import Protocol

import msgspec

from ..errors import StoreCorruptError
from ..node import SESSIONS, TAGS, NodeId, node_id_from_encoded
from ..store.base import Backend, IndexCounts, PackCounts, Packing, Progress, TextIndex
from .scan import scale_reads

__all__ = [
    "GcResult", "Stats", "Upkept", "ancestors", "fsck", "gc", "rebuild_index", "repack", "stats",
    "text_index",
]

_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Decoder()


class Upkept(Protocol):
    """What upkeep needs of a store: its backend and this checkout's HEAD. A
    :class:`~sesstree.repo.store.Store` is one; this module does not import it, as Store
    calls down into this one."""

    @property
    def backend(self) -> Backend:
        """The store's backend."""
        ...

    def head(self) -> tuple[str | None, NodeId | None]:
        """``(session name, node)`` of HEAD, as :meth:`Store.head` returns it."""
        ...


class Stats(msgspec.Struct, frozen=True):
    """What the store holds and what it saves.

    ``logical_bytes`` is what the sessions would take as separate JSONL files, one line per
    event (as the seed's file-per-session store keeps them); ``physical_bytes`` is what the
    store takes on disk.
    """

    nodes: int
    sessions: int
    tags: int
    reflog_entries: int
    logical_bytes: int
    physical_bytes: int
    #: How much is packed (see sesstree.store.packs); None for an engine that keeps no packs.
    packs: PackCounts | None = None

    @property
    def ratio(self) -> float:
        """logical / physical; 0 when nothing is on disk."""
        return self.logical_bytes / self.physical_bytes if self.physical_bytes else 0.0


class GcResult(msgspec.Struct, frozen=True):
    """Nodes no ref, tag, HEAD or reflog entry reaches, and whether they were removed."""

    unreachable: list[NodeId]
    removed: int
    kept: int


def fsck(store: Upkept, *, progress: Progress | None = None) -> list[str]:
    """Every fault found: re-hash every node, check parents, refs, reflog, HEAD and indexes.

    An empty list means the store is sound. Everything is read from one snapshot, so writers
    at work meanwhile cannot make a sound store look damaged. On a backend with bounded reads
    the nodes are re-hashed a slice of rows at a time (memory does not grow with the store)
    and the links, depths and refs are checked by the backend's own queries; ``progress`` is
    called with (nodes checked, total) as it goes.
    """
    try:
        with store.backend.snapshot():
            if scale_reads(store.backend) is not None:
                faults = _fsck_streaming(store, progress)
            else:
                faults = _fsck(store)
        # The text index is checked after the snapshot: an engine that catches it up writes.
        index = text_index(store.backend)
        if index is not None:
            faults += index.index_faults(progress)
        return faults
    except StoreCorruptError as exc:
        # Damage that stops the check itself is a finding like any other.
        return [str(exc)]


def _fsck(store: Upkept) -> list[str]:
    backend = store.backend
    faults = list(backend.check())
    seen: dict[NodeId, int] = {}
    for node in backend.iter_nodes():
        if node_id_from_encoded(node.parent, node.type, node.encoded) != node.id:
            faults.append(f"node {node.id[:12]} does not hash to its id (content damaged)")
        expected = 1
        if node.parent is not None:
            if node.parent not in seen:
                faults.append(f"node {node.id[:12]} has a missing parent {node.parent[:12]}")
            else:
                expected = seen[node.parent] + 1
        if node.depth != expected:
            faults.append(f"node {node.id[:12]} has depth {node.depth}, expected {expected}")
        seen[node.id] = node.depth
    for ref in backend.list_refs(""):
        if ref.target not in seen:
            faults.append(f"ref {ref.name} points at missing node {ref.target[:12]}")
    for entry in backend.reflog():
        for target in (entry.old, entry.new):
            if target is not None and target not in seen:
                faults.append(f"reflog of {entry.ref} names missing node {target[:12]}")
    head_name, head = store.head()  # this checkout's HEAD, wherever it is kept
    if head_name is None and head is not None and head not in seen:
        faults.append(f"HEAD points at missing node {head[:12]}")
    return list(dict.fromkeys(faults))


def _fsck_streaming(store: Upkept, progress: Progress | None) -> list[str]:
    backend = store.backend
    scan = scale_reads(backend)
    assert scan is not None
    # The backend's checks cover links, depths, payload hashes and every ref and reflog entry
    # naming a missing node; what is left is the hash of every node, streamed.
    faults = list(backend.check())
    faults += scan.verify_nodes(progress)
    head_name, head = store.head()
    if head_name is None and head is not None and not backend.has([head]):
        faults.append(f"HEAD points at missing node {head[:12]}")
    return list(dict.fromkeys(faults))


def ancestors(tips: set[NodeId], parent: dict[NodeId, NodeId | None]) -> set[NodeId]:
    """Every node on the paths from the roots to ``tips``, given each node's parent."""
    live: set[NodeId] = set()
    for tip in tips:
        cur: NodeId | None = tip
        while cur is not None and cur not in live:
            live.add(cur)
            cur = parent.get(cur)
    return live


def gc(store: Upkept, *, dry_run: bool = False, progress: Progress | None = None) -> GcResult:
    """Remove nodes (and payloads) that no ref, tag, HEAD or reflog entry reaches.

    Reflog entries keep their nodes alive, so a rewind, reset or deleted session can always
    be undone; gc only removes what was written and never named (an aborted import, say).
    Reachability comes from ids and parents alone (no payload is loaded), and the removal
    happens in short write transactions, so writers in other processes keep their turns.
    """
    # This checkout's detached HEAD is kept; for a shared store it lives on this machine,
    # where the server cannot see it. (Other users' detached HEADs are theirs to tag.)
    head_name, head = store.head()
    keep = head if head_name is None else None
    scan = scale_reads(store.backend)
    if scan is not None:
        dead, removed, kept = scan.sweep(dry_run, keep, progress)
    else:
        dead, removed, kept = store.backend.collect_garbage(dry_run, keep)
    return GcResult(dead, removed, kept)


def packing(backend: Backend) -> Packing | None:
    """The backend's packing, if it keeps packs (the memory engine does not)."""
    if callable(getattr(backend, "repack", None)) and callable(getattr(backend, "pack_counts", None)):
        found: Packing = backend  # type: ignore[assignment]
        return found
    return None


def text_index(backend: Backend) -> TextIndex | None:
    """The backend's text index, if it keeps one (see :class:`~sesstree.store.base.TextIndex`)."""
    if callable(getattr(backend, "search_nodes", None)) and callable(getattr(backend, "rebuild_index", None)):
        found: TextIndex = backend  # type: ignore[assignment]
        return found
    return None


def rebuild_index(store: Upkept, *, progress: Progress | None = None) -> IndexCounts | None:
    """Build the text index again from the nodes (``sess fsck --rebuild-index``): what a
    damaged or missing index is restored with. None for an engine that keeps none."""
    index = text_index(store.backend)
    return index.rebuild_index(progress) if index is not None else None


def repack(store: Upkept, *, progress: Progress | None = None) -> PackCounts | None:
    """Pack every loose tail of every session, whatever its length, and finish the packing
    an upgrade from an older format left to do (``sess repack``, ``sess gc --aggressive``).
    Short transactions: the store stays usable, and a kill loses nothing. None for an engine
    that keeps no packs."""
    found = packing(store.backend)
    return found.repack(progress) if found is not None else None


def stats(store: Upkept, *, progress: Progress | None = None) -> Stats:
    """Count nodes and refs and compare the store's size with a JSONL file per session.

    ``progress`` is called ``(rows done, rows in all)`` while a maintained index of path sizes
    catches up with many rows (the first ``stats`` of a large SQLite store reads each row
    once); a usual ``stats`` never calls it."""
    backend = store.backend
    checkpoint = getattr(backend, "checkpoint", None)
    scan = scale_reads(backend)
    if scan is not None:  # from indexes and maintained sizes: no pass over the payloads
        c = scan.counts(progress)
        if checkpoint is not None:
            checkpoint()  # (before measuring the size on disk)
        packs = packing(backend)
        return Stats(c.nodes, c.sessions, c.tags, c.reflog_entries, c.logical_bytes,
                     backend.physical_bytes(), packs.pack_counts() if packs is not None else None)
    if checkpoint is not None:
        checkpoint()
    line: dict[NodeId, int] = {}
    total: dict[NodeId, int] = {}
    for node in backend.iter_nodes():
        # Cumulative size of the path ending here: one JSONL line per event.
        size = len(_json.encode(_msgpack.decode(node.encoded))) + 1
        line[node.id] = size
        total[node.id] = size + (total.get(node.parent, 0) if node.parent is not None else 0)
    sessions = backend.list_refs(SESSIONS)
    tags = backend.list_refs(TAGS)
    logical = sum(total.get(r.target, 0) for r in sessions)
    return Stats(
        nodes=len(line),
        sessions=len(sessions),
        tags=len(tags),
        reflog_entries=len(backend.reflog()),
        logical_bytes=logical,
        physical_bytes=backend.physical_bytes(),
        packs=packs.pack_counts() if (packs := packing(backend)) is not None else None,
    )
