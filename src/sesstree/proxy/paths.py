"""Which stored node a history ends at: an index from history keys to nodes.

Every unit of a history (a chat message, or a protocol's wire form, whose derived chat
messages follow it) rolls the history key (:func:`~sesstree.proxy.canonical.roll`); every
other event is a record of the run and leaves the key as it is. The index maps a key to
the node where a history with that key can be continued: the message's node, moved on past
the records that close it (a reply's ``usage`` and ``step/end``). A model call is recorded as
``step/start``, the reply, ``usage``, ``step/end``: a call whose reply holds no message (an
upstream error, a stream cut short) closes the history it was sent, so a retry of the same
request continues after it instead of forking.

The index is built by walking every session of the store once, then kept up to date by the
proxy's own writes and by walking the new part of any session another writer moved. It lives
in memory (about 250 bytes per node).

Matching a request re-keys its whole history, and every request re-sends it: the keys of the
messages seen lately are remembered by the message's exact JSON (a client re-sends a message
as it sent it before), so a known message costs a JSON encoding and a lookup instead of its
canonical form and a hash (a quarter of the time). The memory is bounded: each generation
holds at most :data:`MEMO_BYTES` (an entry counted as its message's JSON plus
:data:`MEMO_ENTRY_BYTES`, what the entry's key, tuple and dictionary slot cost besides), and
two are kept: the older is dropped when the newer fills.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from ..node import SESSIONS, NodeId, short_name
from ..repo.store import Store
from .canonical import EMPTY_KEY, WIRE_FORMS, chain_key, is_unit, roll

__all__ = ["MEMO_BYTES", "MEMO_ENTRY_BYTES", "Candidate", "PathIndex", "WalkState"]

#: Records that close the message before them: the node after them continues the history.
_CLOSING = frozenset({"usage", "error", "step/end", "turn/end"})
_KEEP = 4  # attach points remembered per key (different records after one history)
#: Bytes the remembered keys hold, per generation (two are kept).
MEMO_BYTES = 32 << 20
#: Bytes an entry of the memo holds besides its message's JSON: the JSON's bytes object
#: header (33), the key tuple (64), the history key (65) and the dictionary's slot and index
#: (24 to 100, by how full the table is), rounded up: the two generations measure 70-80%
#: of twice MEMO_BYTES at their fullest. Checked against tracemalloc by
#: ``test_the_key_memo_holds_no_more_than_its_bound``.
MEMO_ENTRY_BYTES = 270
_encode_into = msgspec.json.Encoder().encode_into


class WalkState(NamedTuple):
    """Where a walk along a path is: the history key, whether it is inside a model call
    (0 no, 1 yes with no reply message yet, 2 yes with a reply message), and whether it is
    how many chat messages derived from the wire form before it are still to come (they do
    not roll the key)."""

    key: bytes
    call: int = 0
    pending: int = 0


ROOT = WalkState(EMPTY_KEY)


class Candidate(NamedTuple):
    """A node a history can be continued from, and the session that was walked through it."""

    node: NodeId
    session: str | None


class PathIndex:
    """History keys to nodes, for one store. Not thread-safe: one recorder thread owns it."""

    def __init__(self, store: Store, memo_bytes: int = MEMO_BYTES) -> None:
        self.store = store
        self._memo: dict[tuple[bytes, str, bytes], bytes] = {}
        self._older: dict[tuple[bytes, str, bytes], bytes] = {}
        self._memo_size = 0
        self._memo_bytes = memo_bytes
        self._buffer = bytearray()
        self.keys: dict[bytes, list[Candidate]] = {}
        self.states: dict[NodeId, WalkState] = {}
        self.responses: dict[str, NodeId] = {}
        #: session name -> head, as last seen
        self.heads: dict[str, NodeId] = {}

    # -- walking -----------------------------------------------------------------------------

    def _mark(self, key: bytes, node: NodeId, session: str | None,
              replaces: NodeId | None = None) -> None:
        found = self.keys.setdefault(key, [])
        if any(c.node == node or c.node == replaces for c in found):
            found[:] = [c for c in found if c.node != node and c.node != replaces]
        found.append(Candidate(node, session))
        if len(found) > _KEEP:
            del found[0]

    def walk(self, state: WalkState, ids: Sequence[NodeId], types: Sequence[str],
             datas: Sequence[Any], session: str | None) -> WalkState:
        """Index a stretch of a path that starts after a node in ``state``; the end state."""
        key, call, pending = state
        last: NodeId | None = None  # the node of the wire group the key is marked at
        for node, type, data in zip(ids, types, datas, strict=True):
            if is_unit(type):
                derived = pending > 0 and type not in WIRE_FORMS
                key, pending, _ = roll(key, pending, type, data)
                # A wire form's derived messages carry its key on: the history goes on after
                # the last of them, which alone keeps the mark.
                self._mark(key, node, session, last if derived else None)
                last = node
                if call:
                    call = 2
            else:
                pending, last = 0, None
                if type == "step/start":
                    call = 1
                elif type in _CLOSING:
                    if type == "step/end":
                        if isinstance(data, dict) and isinstance(data.get("response_id"), str):
                            self.responses[data["response_id"]] = node
                        self._mark(key, node, session)
                        call = 0
                    elif call != 1:
                        self._mark(key, node, session)
            self.states[node] = WalkState(key, call, pending)
        return WalkState(key, call, pending)

    def state_at(self, node: NodeId | None) -> WalkState | None:
        """The walk state after ``node`` (ROOT for None), or None if it was never walked."""
        return ROOT if node is None else self.states.get(node)

    def refresh(self) -> None:
        """Walk what changed in the store since the last look: new sessions, sessions that
        moved. Only the part of a path not walked before is read."""
        refs = self.store.refs(SESSIONS)
        heads = {short_name(r.name): r.target for r in refs}
        for name, head in heads.items():
            if head not in self.states:
                self._walk_session(name, head)
        self.heads = heads

    def _walk_session(self, name: str, head: NodeId) -> None:
        limit = 64
        while True:
            chain = self.store.chain_at(head, limit)
            state = self.state_at(chain.base)
            if state is not None:
                self.walk(state, chain.ids, chain.types, chain.datas, name)
                return
            limit *= 8

    # -- matching ----------------------------------------------------------------------------

    def match(self, base: WalkState, types: Sequence[str], datas: Sequence[Any]
              ) -> tuple[int, list[Candidate], list[bytes]]:
        """The longest known prefix of a history: how many of its events it covers, the nodes
        it can be continued from (most recent last; none: nothing matched), and the key after
        each event."""
        keys: list[bytes] = []
        counted: list[bool] = []
        key, pending = base.key, base.pending
        for type, data in zip(types, datas, strict=True):
            key, pending, unit = roll(key, pending, type, data, self._chain_key)
            keys.append(key)
            counted.append(unit)
        for i in range(len(types) - 1, -1, -1):
            if counted[i] and keys[i] in self.keys:
                return i + 1, list(self.keys[keys[i]]), keys
        return 0, [], keys

    def _chain_key(self, previous: bytes, type: str, data: Any) -> bytes:
        """:func:`chain_key`, remembered by the message's exact JSON."""
        buffer = self._buffer
        try:
            _encode_into(data, buffer)
        except (msgspec.EncodeError, TypeError, ValueError):  # not JSON: not remembered
            return chain_key(previous, type, data)
        # Encoded into one reused buffer, then copied at its exact size: the bytes that
        # msgspec's encode() returns keep up to half again their length spare, which the memo
        # would hold without counting it.
        raw = bytes(buffer)
        if len(buffer) > 1 << 20:
            self._buffer = bytearray()  # not held at the size of the largest message
        slot = (previous, type, raw)
        key = self._memo.get(slot)
        if key is None:
            key = self._older.get(slot)
            if key is None:
                key = chain_key(previous, type, data)
            self._memo[slot] = key
            self._memo_size += len(raw) + MEMO_ENTRY_BYTES
            if self._memo_size > self._memo_bytes:
                self._older, self._memo, self._memo_size = self._memo, {}, 0
        return key

    def memo_size(self) -> tuple[int, int]:
        """How many message keys are remembered, in the newer and the older generation."""
        return len(self._memo), len(self._older)

    def sessions_at(self, nodes: Iterable[NodeId]) -> dict[NodeId, list[str]]:
        """The sessions whose head is one of ``nodes``, as last seen."""
        wanted = set(nodes)
        out: dict[NodeId, list[str]] = {}
        for name, head in sorted(self.heads.items()):
            if head in wanted:
                out.setdefault(head, []).append(name)
        return out
