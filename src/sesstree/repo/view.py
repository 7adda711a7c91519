"""What a store's reads hand out and its writes take: nodes from a chain, a diff of two
chains, a session as ``sess branch`` lists it, and a node encoded (and checked) for a backend.

Pure functions over what :class:`~sesstree.repo.store.Store` read: nothing here touches a
backend.
"""

from __future__ import annotations

import msgspec

from ..errors import InvalidEventError, StoreCorruptError
from ..events import is_registered
from ..node import Node, NodeId, encode_data, node_id_from_encoded
from ..store.base import Chain, RawNode
from .related import shared_length

__all__ = ["Diff", "SessionInfo", "diff_of", "lost", "nodes_of", "raw_node"]


class SessionInfo(msgspec.Struct, frozen=True):
    """One session as ``sess branch`` lists it."""

    name: str
    head: NodeId
    length: int
    moved: float


class Diff(msgspec.Struct, frozen=True):
    """Two revisions, where they part (the last node of the history they share, see
    :mod:`sesstree.repo.related`) and what each added after it (oldest first)."""

    base: NodeId | None
    only_a: list[Node]
    only_b: list[Node]


def diff_of(ca: Chain, cb: Chain) -> Diff:
    """Where the chains ``ca`` and ``cb`` (each from its root) part, and what each adds."""
    k = 0
    for x, y in zip(ca.ids, cb.ids, strict=False):
        if x != y:
            break
        k += 1
    k = shared_length(ca.types, k, len(ca.ids), len(cb.ids))
    return Diff(ca.ids[k - 1] if k else None, nodes_of(ca)[k:], nodes_of(cb)[k:])


def nodes_of(chain: Chain) -> list[Node]:
    """The nodes of ``chain``, oldest first, each with its parent."""
    ids = chain.ids
    parents: list[NodeId | None] = [chain.base, *ids][: len(ids)]
    return [Node(i, p, t, d) for i, p, t, d in zip(ids, parents, chain.types, chain.datas, strict=True)]


def raw_node(node: Node) -> RawNode:
    """Encode a node for a backend, checking its type and its id."""
    if not is_registered(node.type):
        raise InvalidEventError(f"unknown event type {node.type!r}: register it first")
    encoded = encode_data(node.data)
    if node_id_from_encoded(node.parent, node.type, encoded) != node.id:
        raise InvalidEventError(f"node {node.id[:12]} does not hash to its id")
    return RawNode(node.id, node.parent, node.type, encoded)


def lost(node: NodeId) -> StoreCorruptError:
    """The error for a node the store gave out (a ref's target, a resolved id) and lost:
    gc never removes what a ref reaches, so only damage makes it disappear."""
    return StoreCorruptError(f"node {node[:12]} cannot be found: the store is damaged")
