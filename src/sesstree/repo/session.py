"""The agent-facing handle on one session: append, messages, fork, rewind, subscribe."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import ConflictError, InvalidEventError, StoreCorruptError, UnknownRevisionError
from ..events import MESSAGE_TYPES, Derived, derive_exact, is_registered, message_type
from ..node import Node, NodeId, encode_data, node_id_from_encoded, session_ref
from ..sending import derive_messages
from ..store.base import Chain, RawNode
from .policy import LogGroup

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Session"]

Subscriber = Callable[[Node], None]
_REBASE_ATTEMPTS = 100


def _a(word: str) -> str:
    """``a user/message``, ``an assistant/message``."""
    return ("an " if word[:1] in "aeio" else "a ") + word


class Session:
    """A named, growing path through the store's DAG; what an agent reads and writes.

    Get one with :meth:`Store.session`. The handle remembers the head it last saw: an append
    is a compare-and-set against it, so two writers can never silently interleave. The events
    read so far are cached in the handle, so ``messages()`` after an append costs no I/O.
    """

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.ref = session_ref(name)
        self._subscribers: list[Subscriber] = []
        self._head: NodeId | None = None
        # The events are read on first use, so that a handle (and a fork) costs O(1).
        self._loaded = False
        self._chain: Chain | None = None
        self._new_ids: list[NodeId] = []  # ids appended since the chain was read
        self._types: list[str] = []
        self._datas: list[Any] = []
        #: The open log group (see :meth:`log_group`), or None.
        self.log_group_open: LogGroup | None = None
        #: This handle's run of plain appends, which its next one may fold into (see
        #: sesstree.repo.policy), or None.
        self.append_run: LogGroup | None = None
        self.refresh()

    def __repr__(self) -> str:
        head = self._head[:12] if self._head else "empty"
        return f"<Session {self.name} at {head}>"

    @property
    def head(self) -> NodeId | None:
        """The id of the newest event as this handle last saw it; None for an empty session."""
        return self._head

    def __len__(self) -> int:
        if self._loaded:
            return len(self._types)
        # A head this handle saw may be gone since (deleted, its reflog expired, collected):
        # then the handle has no events, as before it was read.
        stored = self.store.get_node(self._head) if self._head is not None else None
        return stored.depth if stored is not None else 0

    def refresh(self) -> None:
        """Re-read where the session points (after another writer moved it)."""
        self._set_head(self.store.session_head(self.name))

    def _set_head(self, head: NodeId | None) -> None:
        self._head = head
        self._loaded = False
        self._chain = None
        self._new_ids, self._types, self._datas = [], [], []

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        if self._head is not None:
            # Through the store's translating read: damage is a StoreCorruptError, not a KeyError,
            # and it says which session it was reading (the engine names the pack or node).
            try:
                self._chain = self.store.chain_at(self._head)
            except StoreCorruptError as exc:
                raise StoreCorruptError(f"session {self.name!r}: {exc}") from None
            self._types, self._datas = self._chain.types, self._chain.datas
        self._loaded = True

    def _ids(self) -> list[NodeId]:
        """Every id, oldest first (built on demand: a load does not need them)."""
        self._ensure_loaded()
        if self._chain is None:
            return list(self._new_ids)
        ids = self._chain.ids + self._new_ids
        return ids

    # -- writing -----------------------------------------------------------------------------

    def append(self, type: str, data: Any, *, rebase: bool = False) -> Node:
        """Append one event and move the session to it, atomically, logged in the reflog (this
        handle's run of plain appends is one entry, ``append (N moves)``: see
        :mod:`sesstree.repo.policy`).

        When this returns, the event is stored (durable as the store's durability says; inside
        ``store.batch()``, when the batch ends).

        Raises:
            InvalidEventError: ``type`` is not registered or ``data`` is not a JSON value.
            ConflictError: another writer moved the session since this handle last saw it
                (nothing was written). With ``rebase=True`` the event is put on the session's
                current head instead (retried while other writers keep moving it, up to
                100 times).
        """
        if not is_registered(type):
            raise InvalidEventError(
                f"unknown event type {type!r}: use the vocabulary or register_event_type()"
            )
        return self._append(type, data, rebase, role_checked=False)

    def _append(self, type: str, data: Any, rebase: bool, *, role_checked: bool) -> Node:
        encoded = encode_data(data)
        if type in MESSAGE_TYPES and not role_checked:
            if not isinstance(data, dict):
                raise InvalidEventError(f"{_a(type)} event holds a chat message, a JSON object")
            if "role" in data and message_type(data) != type:
                raise InvalidEventError(
                    f"a message with role {data['role']!r} is {_a(message_type(data))} event, "
                    f"not {type}"
                )
        attempts = _REBASE_ATTEMPTS if rebase else 1
        for attempt in range(1, attempts + 1):
            try:
                node = self._commit(type, data, encoded)
                break
            except ConflictError:
                if attempt == attempts:
                    raise
                self.refresh()
        if self._subscribers:
            for subscriber in list(self._subscribers):
                subscriber(node)
        return node

    def _commit(self, type: str, data: Any, encoded: bytes) -> Node:
        parent = self._head
        id = node_id_from_encoded(parent, type, encoded)
        self.store.move_ref(self.ref, parent, id, f"append: {type}",
                            nodes=(RawNode(id, parent, type, encoded),), handle=self,
                            append=True)
        self._head = id
        if self._loaded:
            self._new_ids.append(id)
            self._types.append(type)
            self._datas.append(data)
        return Node(id, parent, type, data)

    @contextmanager
    def log_group(self, reason: str) -> Iterator[None]:
        """Log this session's moves inside the block as one reflog entry, ``reason``, while
        each event is still committed (and acknowledged) on its own as it is appended.

        The agent loop wraps each turn in one, so ``sess reflog`` lists turns, not each event
        of them, and ``NAME@{1}`` is the session before the last turn. A group nested in
        another joins it. If another writer moves the session meanwhile (or a batch inside
        rolls back), the group's next move starts a new entry instead of rewriting one.
        """
        if self.log_group_open is not None:
            yield
            return
        self.log_group_open = LogGroup(reason)
        try:
            yield
        finally:
            self.log_group_open = None

    def add_message(self, message: dict[str, Any], *, rebase: bool = False) -> Node:
        """Append an OpenAI chat message; its role picks the event type, every key is kept."""
        # The type comes from the role, so the role cannot contradict it.
        return self._append(message_type(message), message, rebase, role_checked=True)

    def extend(self, events: list[tuple[str, Any]]) -> list[Node]:
        """Append several ``(type, data)`` events in one transaction."""
        with self.store.batch():
            return [self.append(t, d) for t, d in events]

    # -- reading -----------------------------------------------------------------------------

    def events(self) -> list[Node]:
        """Every event of the session, oldest first."""
        ids = self._ids()
        parents: list[NodeId | None] = [None, *ids][: len(ids)]
        return [Node(i, p, t, d) for i, p, t, d in zip(ids, parents, self._types, self._datas, strict=True)]

    def derive(self, *, sending: bool = False) -> Derived:
        """The derived messages and the problems found in them (unpaired tool calls and
        results). With ``sending``, the sending view and the repairs made to it."""
        self._ensure_loaded()
        # The ids only if a compaction marker needs them: a load does not build them.
        return derive_messages(self._types, self._datas, self._ids, repair=sending)

    def messages(self) -> list[dict[str, Any]]:
        """The session's OpenAI-style chat messages, exactly as they were added, in order.

        The list is new on every call, but the message dicts in it are the handle's own (no
        copy is made of a 10,000-message history): copy one before changing it.
        """
        self._ensure_loaded()
        # Only the messages: the check for unpaired tool calls (a pass over every message) is
        # for those who show problems (:meth:`derive`).
        return derive_exact(self._types, self._datas, self._ids, problems=False).messages

    def sending_view(self) -> Derived:
        """What a model API is sent: the messages with every tool call answered, results
        without a call left out and consecutive user messages joined; ``problems`` says what
        was changed. Nothing stored changes. See :mod:`sesstree.sending`."""
        return self.derive(sending=True)

    # -- moving ------------------------------------------------------------------------------

    def fork(self, name: str) -> Session:
        """A new session at this one's head, O(1); this one is unchanged.

        Raises:
            RefExistsError: ``name`` exists.
            UnknownRevisionError: this session has no events yet.
        """
        if self._head is None:
            raise UnknownRevisionError(f"session {self.name!r} has no events to fork")
        # At this handle's head (not wherever the ref is now), logged as forked from this
        # session, so the fork can say where it came from.
        return self.store._fork_at(name, self._head, self.name)

    def rewind(self, n: int = 1) -> NodeId | None:
        """Move the session back ``n`` events; the reflog keeps where it was, so it is undoable.

        Rewinding by the whole length empties the session: its ref goes (a session with no
        events has none), the reflog keeps where it was, and the next append starts anew. Going
        further back raises UnknownRevisionError. Returns the new head, None when empty.
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        if n == 0:
            return self._head
        ids = self._ids()
        if n > len(ids):
            raise UnknownRevisionError(f"cannot rewind {self.name} by {n}: it has {len(ids)} events")
        target = ids[-1 - n] if n < len(ids) else None
        self.store.move_ref(self.ref, self._head, target, f"rewind: {n} events", handle=self)
        self._set_head(target)
        return target

    def reset(self, rev: str | NodeId) -> NodeId:
        """Move the session to any revision (rewind, fast-forward, or another path); logged.

        The same rules as :meth:`Store.reset`, as a compare-and-set against this handle's
        head: a reset to where it is logs nothing.
        """
        target = self.store.reset(self.name, rev, handle=self)
        if self._head != target:
            self._set_head(target)
        return target

    # -- observing ---------------------------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(node)`` after each event this handle appends; returns an unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def flush(self) -> None:
        """A durability point: returns once everything appended so far is committed.

        Outside a batch every append is committed when it returns, so this only checks that
        the store still has this session where the handle left it.
        """
        if self._head is not None and self.store.session_head(self.name) is None:
            raise ConflictError(f"session {self.name} was deleted")
