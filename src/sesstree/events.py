"""The event vocabulary, the registry of extension types, and deriving chat messages.

The model never sees events, only the OpenAI-style messages derived from them by walking a
session from its root:

- ``system/message``, ``user/message``, ``assistant/message``, ``tool/result`` and ``message``
  (any other role) carry an OpenAI message as their data and are sent as they are;
- ``context/message`` and ``steering/message`` become tagged synthetic user messages;
- ``assistant/chunk``, ``tool/call``, ``turn/*``, ``step/*``, ``usage`` and ``error`` are records
  of the run, not sent;
- ``compaction/marker`` (``{"summary", "first_kept"?, "message"?}``) replaces what it
  summarises (everything before it, or before node ``first_kept``; system messages excepted)
  with its ``message``, or else with its summary as a tagged user message;
- nothing else: what was stored comes back exactly, in order, no message invented or moved.

Problems in the history (a tool call with no result, a result with no call) are reported in
:attr:`Derived.problems`, never repaired here. A call at the tail with no result yet is
``pending`` (a tool may still be running), not an orphan. Making a history acceptable to a
model API is the separate sending view, :func:`sesstree.sending.repair_messages`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from typing import Any

import msgspec

from .errors import InvalidEventError

__all__ = [
    "MESSAGE_TYPES",
    "VOCABULARY",
    "Derived",
    "Problem",
    "call_ids",
    "derive_exact",
    "find_problems",
    "is_registered",
    "message_type",
    "pending_at",
    "register_event_type",
]

#: Events whose data is an OpenAI chat message, sent to the model as it is.
MESSAGE_TYPES = frozenset(
    {"system/message", "user/message", "assistant/message", "tool/result", "message"}
)

VOCABULARY = frozenset(
    {
        *MESSAGE_TYPES,
        "assistant/chunk",
        "tool/call",
        "steering/message",
        "context/message",
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "usage",
        "error",
        "compaction/marker",
    }
)

_ROLE_TYPES = {
    "system": "system/message",
    "user": "user/message",
    "assistant": "assistant/message",
    "tool": "tool/result",
}
_DEFAULT_ROLE = {
    "system/message": "system",
    "user/message": "user",
    "assistant/message": "assistant",
    "tool/result": "tool",
}

Renderer = Callable[[Any], "dict[str, Any] | None"]
_registry: dict[str, Renderer | None] = {}
_TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)+\Z")


def register_event_type(name: str, render: Renderer | None = None) -> None:
    """Register an extension event type such as ``compaction/marker`` or ``myapp/note``.

    ``render`` turns the event's data into a chat message for the model, or returns None to
    send nothing; without it the event is kept in the history but never sent. Registering the
    same name again replaces its renderer. Names are lowercase ``namespace/name``.
    """
    if name in VOCABULARY:
        raise InvalidEventError(f"{name!r} is a built-in event type")
    if not _TYPE_NAME.match(name):
        raise InvalidEventError(f"invalid event type {name!r}: use lowercase 'namespace/name'")
    _registry[name] = render


def is_registered(type: str) -> bool:
    """True for the built-in vocabulary and registered extension types."""
    return type in VOCABULARY or type in _registry


def message_type(message: Any) -> str:
    """The event type that holds an OpenAI message: by its role, ``message`` for other roles."""
    if not isinstance(message, dict):
        raise InvalidEventError(f"a message must be a JSON object, not {type(message).__name__}")
    role = message.get("role")
    return _ROLE_TYPES.get(role, "message") if isinstance(role, str) else "message"


class Problem(msgspec.Struct, frozen=True):
    """Something wrong with a history that derivation worked around."""

    #: "orphan-call" (no result anywhere after it), "pending-call" (at the tail, no result yet),
    #: "orphan-result" (no call before it has this id); the sending view adds "merged-user".
    kind: str
    tool_call_id: str
    detail: str


class Derived(msgspec.Struct):
    """The derived messages and the problems found in them (or, for the sending view, the
    repairs made)."""

    messages: list[dict[str, Any]]
    problems: list[Problem]


def _tagged(tag: str, data: Any) -> dict[str, Any]:
    content = data.get("content") if isinstance(data, dict) else data
    if not isinstance(content, str):
        content = msgspec.json.encode(content).decode()
    return {"role": "user", "content": f"<{tag}>\n{content}\n</{tag}>"}


def _summary(data: Any) -> dict[str, Any]:
    # A marker may carry the exact message its tool sent in place of what it replaced.
    if isinstance(data, dict) and isinstance(data.get("message"), dict):
        message: dict[str, Any] = data["message"]
        return message
    summary = data.get("summary", "") if isinstance(data, dict) else data
    return _tagged("summary", summary)


#: Ids of a session's events, or a function that gives them (called only when they are needed).
Ids = Sequence[str] | Callable[[], Sequence[str]]
#: Types that derive their message by a rule of their own (tagged, replacing what came before).
_RULED = frozenset({"context/message", "steering/message", "compaction/marker"})


def derive_exact(
    types: Sequence[str], datas: Sequence[Any], ids: Ids | None = None, *,
    problems: bool = True,
) -> Derived:
    """Derive the chat messages from a session's events, oldest first, exactly as stored.

    ``ids`` (hex node ids, or a function that gives them) are needed only to honour a
    compaction marker's ``first_kept``: a function is called only when a marker is there.
    ``problems`` lists tool calls and results that are not paired; the messages are not
    changed for them. The public :func:`sesstree.derive_messages` (in :mod:`sesstree.sending`,
    which builds on this module, never the other way) adds the sending view, which reports
    its own changes: it asks for ``problems=False``, the messages without that check.
    """
    if not problems:
        # (With problems, the pass over every event that checks the pairs derives them too.)
        plain = _plain_messages(types, datas)
        if plain is not None:
            return Derived(plain, [])
    return _derive_each(types, datas, ids, problems)


def _plain_messages(types: Sequence[str], datas: Sequence[Any]) -> list[dict[str, Any]] | None:
    """The derived messages when they are the payloads as they are, else None.

    So they are when every event that derives a message is a message event whose data is an
    object with its role, and every other one is a record of the run (which derives none).
    Each check is one pass in C over the events (a set, a ``map``), not a Python loop over
    them: what makes deriving an ordinary session cost next to nothing. None when an event
    needs a rule of its own (:func:`derive_exact` then applies it).
    """
    if len(types) != len(datas):
        return None  # (the rules pair them as zip does)
    if MESSAGE_TYPES.issuperset(types):
        messages = list(datas)
    else:
        present = set(types)
        if not present.isdisjoint(_RULED) or any(
            _registry.get(t) is not None for t in present - VOCABULARY
        ):
            return None
        messages = list(compress(datas, map(MESSAGE_TYPES.__contains__, types)))
    # A payload that is not an object is left out, and one without its role is given it:
    # both are for the rules.
    if messages and (set(map(type, messages)) != {dict}
                     or not all(map(operator.contains, messages, repeat("role")))):
        return None
    return messages


def _derive_each(types: Sequence[str], datas: Sequence[Any], ids: Ids | None,
                 problems: bool) -> Derived:
    """:func:`derive_exact` event by event, by the rules of the module docstring."""
    out: list[dict[str, Any]] = []
    append = out.append
    # Index in `out` of the first message derived from each node, for compaction: only a
    # marker needs the ids.
    node_ids = (ids() if callable(ids) else ids) if ids is not None and (
        "compaction/marker" in types) else None
    starts: dict[str, int] | None = {} if node_ids is not None else None
    # Tool calls still waiting for their result; None once pairing needs find_problems (or
    # when no problems are asked for).
    waiting: set[Any] | None = set() if problems else None
    message_types = MESSAGE_TYPES
    # Without ids, pair every event with None (an endless repeat, hence not strict).
    nodes = node_ids if node_ids is not None else repeat(None)
    for type, data, node_id in zip(types, datas, nodes, strict=False):
        if starts is not None and node_id is not None:
            starts[node_id] = len(out)
        if type in message_types:
            if data.__class__ is not dict:
                continue
            if "role" not in data and type in _DEFAULT_ROLE:
                data = {"role": _DEFAULT_ROLE[type], **data}
            append(data)
            if waiting is not None:
                # Inline check that results directly follow their calls, so a well-formed
                # history needs no second pass. (An id that cannot be hashed, a list say, is
                # for find_problems, which reads every id as text.)
                if type == "tool/result":
                    try:
                        waiting.remove(data.get("tool_call_id"))
                    except (KeyError, TypeError):
                        waiting = None
                elif waiting:
                    waiting = None
                elif "tool_calls" in data:
                    calls = data["tool_calls"]
                    try:
                        waiting = ({c.get("id") for c in calls} if isinstance(calls, list)
                                   and all(isinstance(c, dict) for c in calls) else None)
                    except TypeError:
                        waiting = None
        elif type == "context/message":
            append(_tagged("context", data))
            if waiting:
                waiting = None
        elif type == "steering/message":
            append(_tagged("steering", data))
            if waiting:
                waiting = None
        elif type == "compaction/marker":
            keep_from = len(out)
            first_kept = data.get("first_kept") if isinstance(data, dict) else None
            if starts is not None and isinstance(first_kept, str):
                keep_from = next(
                    (pos for node, pos in starts.items() if node.startswith(first_kept)), keep_from
                )
            # The system prompt is the agent's instructions, not conversation: it stays.
            kept = [m for m in out[:keep_from] if m.get("role") == "system"]
            out[:keep_from] = [*kept, _summary(data)]
            if starts is not None:
                shift = len(kept) + 1 - keep_from
                starts = {node: pos + shift for node, pos in starts.items()}
            waiting = None
        elif type in _registry:
            render = _registry[type]
            message = render(data) if render is not None else None
            if message is not None:
                append(message)
                waiting = None
    if not problems:
        return Derived(out, [])
    if waiting is None:
        return Derived(out, find_problems(out))
    # Well formed up to the tail: the calls still waiting there are pending, not orphans.
    return Derived(out, [Problem("pending-call", str(c), PENDING_DETAIL) for c in sorted(
        waiting, key=str)])


PENDING_DETAIL = "no result yet (the call is at the tail of the session)"


def call_ids(message: dict[str, Any]) -> list[str]:
    """The ids of an assistant message's tool calls, in order."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return []
    return [str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id") is not None]


def pending_at(messages: Sequence[dict[str, Any]]) -> int:
    """The index of the assistant message whose unanswered calls are pending: the last one
    with tool calls, when only tool results follow it. -1 when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if call_ids(m):
            return i
        if m.get("role") != "tool":
            return -1
    return -1


def find_problems(messages: Sequence[dict[str, Any]]) -> list[Problem]:
    """Tool calls with no result after them and results with no call before them.

    The unanswered calls of the last assistant message that only tool results follow are
    ``pending-call``: a tool may still be running (another process is executing it).
    """
    problems: list[Problem] = []
    open_calls: dict[str, int] = {}  # call id -> index of its assistant message
    answered: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            cid = str(m.get("tool_call_id"))
            if cid in open_calls and cid not in answered:
                answered.add(cid)
            else:
                problems.append(Problem("orphan-result", cid, "no tool call before it has this id"))
            continue
        ids = call_ids(m)
        if ids:
            for cid in ids:
                open_calls.setdefault(cid, i)
    pending = pending_at(messages)
    for cid, at in open_calls.items():
        if cid in answered:
            continue
        if at == pending:
            problems.append(Problem("pending-call", cid, PENDING_DETAIL))
        else:
            problems.append(Problem("orphan-call", cid, "no result was recorded"))
    return problems
