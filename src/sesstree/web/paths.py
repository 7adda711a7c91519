"""The ids of each session's path (root to head), cached, so the forest is drawn from ids alone.

A session's path is read once; when the session grows, only the new tail is read and added to
what is cached (an append does not cost a re-read of the whole session). The cache holds at
most ``budget`` ids (32 bytes each) and forgets the least recently used paths beyond that.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import msgspec

from ..node import Node, NodeId
from ..repo.store import Store
from ..store.base import Chain
from .catalog import HISTORY_TAIL, note_history

__all__ = ["PathCache", "depth_of", "id_at", "node_of"]

ID_BYTES = 32


def depth_of(store: Store, id: NodeId) -> int:
    """How many events lead to the stored node ``id`` (the web view only handles ids it read
    from the store, so it skips revision parsing); StoreCorruptError if it is lost."""
    return store.node(id).depth


def node_of(store: Store, id: NodeId) -> Node:
    """The stored node ``id``, decoded; StoreCorruptError if it is lost."""
    stored = store.node(id)
    return Node(stored.id, stored.parent, stored.type, msgspec.msgpack.decode(stored.encoded))


def id_at(path: bytes, index: int) -> NodeId:
    """The hex id at ``index`` (0 = root) of a packed path."""
    return NodeId(path[index * ID_BYTES : (index + 1) * ID_BYTES].hex())


class PathCache:
    """Packed paths (the 32-byte ids end to end, root first) by head id, LRU-bounded."""

    def __init__(self, store: Store, budget: int = 2_000_000) -> None:
        self.store = store
        self.budget = budget
        self._lock = threading.Lock()
        self._paths: OrderedDict[NodeId, bytes] = OrderedDict()
        self._held = 0  # ids held in total
        self._last_head: dict[str, NodeId] = {}  # session name -> head last read for it

    def path(self, head: NodeId, name: str | None = None) -> bytes:
        """The packed path ending at ``head``; ``name`` (the session it heads) lets a grown
        session be read from where it was last seen instead of from its root."""
        with self._lock:
            found = self._paths.get(head)
            if found is not None:
                self._paths.move_to_end(head)
                return found
            before = self._last_head.get(name) if name is not None else None
            earlier = self._paths.get(before) if before is not None else None
        path = self._read(head, name, before, earlier)
        with self._lock:
            if head not in self._paths:
                self._paths[head] = path
                self._held += len(path) // ID_BYTES
            if name is not None:
                self._last_head[name] = head
            while self._held > self.budget and len(self._paths) > 1:
                _, dropped = self._paths.popitem(last=False)
                self._held -= len(dropped) // ID_BYTES
        return path

    def cached(self, head: NodeId) -> bool:
        """True if the path ending at ``head`` is in the cache (costs nothing to use)."""
        with self._lock:
            return head in self._paths

    def _read(self, head: NodeId, name: str | None, before: NodeId | None,
              earlier: bytes | None) -> bytes:
        if before is not None and earlier is not None:
            grown = depth_of(self.store, head) - len(earlier) // ID_BYTES
            if grown > 0:
                tail = self.store.chain_at(head, grown)
                if tail.base == before:  # a fast-forward: keep what was read, add the tail
                    self._noted(name, head, tail, whole=False)
                    return earlier + _packed(tail.ids)
        chain = self.store.chain_at(head)
        self._noted(name, head, chain, whole=True)
        return _packed(chain.ids)

    def _noted(self, name: str | None, head: NodeId, chain: Chain, *, whole: bool) -> None:
        """The events just read tell where the session came from: no second read for that."""
        if name is not None and (whole or len(chain) >= HISTORY_TAIL):
            note_history(self.store, name, head, chain.types[-HISTORY_TAIL:],
                         chain.datas[-HISTORY_TAIL:])


def _packed(ids: list[NodeId]) -> bytes:
    return bytes.fromhex("".join(ids))
