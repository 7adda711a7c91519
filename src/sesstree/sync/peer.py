"""The other side of a sync, whatever the transport: a store opened in-process, or one served
over HTTP (:mod:`sesstree.sync.http`). Both speak the same five requests.

``refs`` lists the sessions and tags; ``has`` says which of some ids are stored; ``walk``
lists ids back from a node (the sender's half of the negotiation); ``nodes`` reads chains of
nodes for sending; ``receive`` verifies and stores nodes, then moves refs by compare-and-set.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol

import msgspec

from ..errors import ConflictError, InvalidRefNameError, MissingNodeError, RemoteError
from ..node import SESSIONS, TAGS, NodeId, check_ref_name, encode_data, short_name, tag_name
from ..repo.store import Store
from ..store.base import RawNode
from .pack import verify

__all__ = [
    "LocalPeer", "Peer", "RefResult", "Update", "Walk", "apply_push", "check_pushed_ref",
    "is_ancestor",
]


_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


class Update(msgspec.Struct, frozen=True):
    """Move remote ref ``ref`` (``sessions/NAME`` or ``tags/NAME``) from ``old`` (None: it must
    not exist) to ``new``. Without ``force`` a session must fast-forward and a tag must be new."""

    ref: str
    old: NodeId | None
    new: NodeId
    force: bool = False


class RefResult(msgspec.Struct, frozen=True):
    """What became of one ref: ``ok`` (moved), ``up-to-date``, or ``rejected`` with why."""

    ref: str
    old: NodeId | None
    new: NodeId | None
    status: Literal["ok", "up-to-date", "rejected"]
    reason: str = ""


class Walk(msgspec.Struct, frozen=True):
    """Ids back from a start node, newest first: the start's ``depth`` (0: not stored), and
    ``base``, the parent of the oldest id listed (None once the root is listed)."""

    depth: int
    ids: list[NodeId]
    base: NodeId | None


class Peer(Protocol):
    """One store as a sync sees it. Every call is one round trip over a network."""

    #: The peer as messages name it (a URL without its password, a path).
    name: str
    #: How many requests went to the peer so far.
    round_trips: int

    def refs(self) -> dict[str, NodeId]:
        """Every session and tag, by full ref name (``sessions/x``, ``tags/v1``)."""

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        """Which of ``ids`` are stored."""

    def walk(self, starts: Sequence[tuple[NodeId, int]]) -> list[Walk]:
        """For each ``(start, limit)``: up to ``limit`` ids back from ``start`` (included)."""

    def nodes(self, chains: Sequence[tuple[NodeId, int]]) -> list[RawNode]:
        """The newest ``count`` nodes of the chain ending at each ``tip``, oldest first, the
        chains in the order given."""

    def receive(self, nodes: Sequence[RawNode], updates: Sequence[Update],
                reason: str = "push") -> list[RefResult]:
        """Verify and store ``nodes`` (parents first), then apply ``updates`` one by one."""

    def close(self) -> None:
        """Release the connection or the store."""


def check_pushed_ref(ref: str) -> None:
    """A pushed ref must be a session or a tag with a valid name: nothing else can be created
    remotely (no remote-tracking refs, no settings)."""
    for prefix in (SESSIONS, TAGS):
        if ref.startswith(prefix):
            check_ref_name(ref[len(prefix):])
            return
    raise InvalidRefNameError(f"cannot push {ref!r}: only sessions/NAME and tags/NAME can be pushed")


def is_ancestor(store: Store, old: NodeId, new: NodeId) -> bool:
    """True if ``old`` is ``new`` or on its path back to the root (a fast-forward)."""
    a, b = store.get_node(old), store.get_node(new)
    if a is None or b is None or a.depth > b.depth:
        return False
    return store.chain_at(new, b.depth - a.depth + 1).ids[0] == old


def apply_push(store: Store, nodes: Sequence[RawNode], updates: Sequence[Update], *,
               peer: str, reason: str = "push") -> list[RefResult]:
    """The receiving side of a push, on ``store``: verify every node (RemoteError, nothing
    stored, if one fails), store them, then move each ref by compare-and-set with a reflog
    entry. A ref is refused (not raised) when it moved meanwhile, when a session would not
    fast-forward or a tag exists, unless ``force``: it says which heads, and nothing moves."""
    for u in updates:
        check_pushed_ref(u.ref)
        for node in (u.old, u.new):
            if node is not None and not _HEX64.match(node):
                raise RemoteError(f"{peer} sent an update of {u.ref} to {node[:70]!r}, "
                                  "which is not a node id")
    if nodes:
        verify(nodes, store.has, peer)
        store.put_nodes(nodes)
    results = []
    for u in updates:
        results.append(_apply_one(store, u, reason))
    return results


def _apply_one(store: Store, u: Update, reason: str) -> RefResult:
    tag = tag_name(u.ref)  # (check_pushed_ref let only a session or a tag through)
    kind, short = ("tag", tag) if tag is not None else ("session", short_name(u.ref))
    now = store.target(u.ref)
    if now == u.new:
        return RefResult(u.ref, now, u.new, "up-to-date")
    if not store.has([u.new]):
        return RefResult(u.ref, now, now, "rejected", f"node {u.new[:12]} was not sent")
    if now != u.old:
        return RefResult(u.ref, now, now, "rejected",
                         f"{kind} {short} moved meanwhile: it is at {_short(now)}, the push "
                         f"expected {_short(u.old)} (fetch, then push again)")
    if now is not None and not u.force:
        if kind == "tag":
            return RefResult(u.ref, now, now, "rejected",
                             f"tag {short} already exists at {now[:12]} (use --force to move it)")
        if not is_ancestor(store, now, u.new):
            return RefResult(u.ref, now, now, "rejected",
                             f"non-fast-forward: {kind} {short} is at {now[:12]}, which "
                             f"{u.new[:12]} does not extend (use --force to replace it)")
    how = "created" if now is None else "forced update" if u.force else "fast-forward"
    try:
        store.move_ref(u.ref, now, u.new, f"{reason}: {how}")
    except ConflictError:
        # Another push moved it between the read above and this compare-and-set.
        at = store.target(u.ref)
        return RefResult(u.ref, at, at, "rejected",
                         f"{kind} {short} moved meanwhile: it is at {_short(at)}, the push "
                         f"expected {_short(u.old)} (fetch, then push again)")
    except MissingNodeError as exc:
        return RefResult(u.ref, now, now, "rejected", f"{kind} {short}: {exc}")
    return RefResult(u.ref, now, u.new, "ok")


def _short(node: NodeId | None) -> str:
    return "nothing (absent)" if node is None else node[:12]


class LocalPeer:
    """A store opened in this process: a folder, a PostgreSQL URL, or a Store given."""

    def __init__(self, store: Store, name: str, *, owned: bool = True) -> None:
        self.store = store
        self.name = name
        self.round_trips = 0
        self._owned = owned

    def refs(self) -> dict[str, NodeId]:
        """Every session and tag."""
        self.round_trips += 1
        return listed_refs(self.store)

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        """Which of ``ids`` are stored."""
        self.round_trips += 1
        return self.store.has(ids)

    def walk(self, starts: Sequence[tuple[NodeId, int]]) -> list[Walk]:
        """Ids back from each start."""
        self.round_trips += 1
        return [walk_store(self.store, start, limit) for start, limit in starts]

    def nodes(self, chains: Sequence[tuple[NodeId, int]]) -> list[RawNode]:
        """Chains of nodes, oldest first."""
        self.round_trips += 1
        return read_chains(self.store, chains)

    def receive(self, nodes: Sequence[RawNode], updates: Sequence[Update],
                reason: str = "push") -> list[RefResult]:
        """Verify, store, move refs."""
        self.round_trips += 1
        return apply_push(self.store, nodes, updates, peer="the sender", reason=reason)

    def close(self) -> None:
        """Close the store if this peer opened it."""
        if self._owned:
            self.store.close()


def listed_refs(store: Store) -> dict[str, NodeId]:
    """Every session and tag of ``store`` by full name, read from one snapshot: what a peer
    lists (``/refs`` of the server, a local peer's :meth:`LocalPeer.refs`)."""
    with store.snapshot():
        return {r.name: r.target for p in (SESSIONS, TAGS) for r in store.refs(p)}


def walk_store(store: Store, start: NodeId, limit: int) -> Walk:
    """Up to ``limit`` ids back from ``start`` in ``store``; depth 0 if it is not stored."""
    node = store.get_node(start)  # an id a peer asks about: it may not be stored here
    if node is None or limit <= 0:
        return Walk(0 if node is None else node.depth, [], start if node else None)
    chain = store.chain_at(start, limit)
    ids = chain.ids
    ids.reverse()
    return Walk(node.depth, ids, chain.base)


def read_chains(store: Store, chains: Sequence[tuple[NodeId, int]], *,
                max_bytes: int | None = None) -> list[RawNode]:
    """The nodes of each ``(tip, count)`` chain, oldest first, encoded for sending.

    With ``max_bytes``, stop once the nodes' data reaches it (always at least one node): the
    answer is then the first nodes of that order, and the reader asks again for the rest.
    """
    out: list[RawNode] = []
    size = 0
    for tip, count in chains:
        if max_bytes is not None and out and size >= max_bytes:
            break
        chain = store.chain_if_stored(tip, count)
        if chain is None:
            raise RemoteError(f"node {tip[:12]} is not stored")
        ids = chain.ids
        parent = chain.base
        for i, type_, data in zip(ids, chain.types, chain.datas, strict=True):
            if max_bytes is not None and out and size >= max_bytes:
                break
            encoded = encode_data(data)
            size += len(encoded)
            out.append(RawNode(i, parent, type_, encoded))
            parent = i
    return out
