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
- every tool call of an assistant message is paired with its result; a call with none is an
  orphan: it is reported and given a synthetic result so the session stays usable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

import msgspec

from .errors import InvalidEventError

__all__ = [
    "MESSAGE_TYPES",
    "VOCABULARY",
    "Derived",
    "Problem",
    "derive_messages",
    "is_registered",
    "message_type",
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
_TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)+$")

ORPHAN_RESULT = "[sesstree: no result was recorded for this tool call]"


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

    kind: str  # "orphan-call" or "orphan-result"
    tool_call_id: str
    detail: str


class Derived(msgspec.Struct):
    """The derived messages and what had to be worked around to derive them."""

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


def derive_messages(
    types: Sequence[str],
    datas: Sequence[Any],
    ids: Sequence[str] | None = None,
    *,
    repair: bool = True,
) -> Derived:
    """Derive the chat messages from a session's events, oldest first.

    ``ids`` (hex node ids) are needed only to honour a compaction marker's ``first_kept``.
    With ``repair=False`` tool calls are not paired (export writes what was stored).
    """
    out: list[dict[str, Any]] = []
    append = out.append
    # Index in `out` of the first message derived from each node, for compaction.
    starts: dict[str, int] | None = {} if ids is not None else None
    # Tool calls still waiting for their result; None once pairing needs the slow path.
    waiting: set[Any] | None = set()
    message_types = MESSAGE_TYPES
    # Without ids, pair every event with None (an endless repeat, hence not strict).
    nodes = ids if ids is not None else repeat(None)
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
                # history needs no second pass.
                if type == "tool/result":
                    call = data.get("tool_call_id")
                    if call in waiting:
                        waiting.discard(call)
                    else:
                        waiting = None
                elif waiting:
                    waiting = None
                elif "tool_calls" in data:
                    calls = data["tool_calls"]
                    if isinstance(calls, list) and all(isinstance(c, dict) for c in calls):
                        waiting = {c.get("id") for c in calls}
                    else:
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
    if not repair or (waiting is not None and not waiting):
        return Derived(out, [])
    return _pair_tool_calls(out)


def _call_ids(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return []
    return [str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id") is not None]


def _pair_tool_calls(messages: list[dict[str, Any]]) -> Derived:
    """Pair every tool call with its result right after its assistant message."""
    problems: list[Problem] = []
    results: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            results.setdefault(str(m.get("tool_call_id")), i)
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    i = 0
    n = len(messages)
    while i < n:
        m = messages[i]
        i += 1
        if i - 1 in used:
            continue
        if m.get("role") == "tool":
            problems.append(
                Problem("orphan-result", str(m.get("tool_call_id")), "no tool call has this id")
            )
            out.append(m)
            continue
        out.append(m)
        calls = _call_ids(m)
        if not calls:
            continue
        # Results that follow directly keep their order; missing ones are pulled forward
        # from later in the history or, if there are none, synthesised.
        answered: set[str] = set()
        while i < n and messages[i].get("role") == "tool":
            cid = str(messages[i].get("tool_call_id"))
            if cid in calls and cid not in answered:
                answered.add(cid)
                used.add(i)
                out.append(messages[i])
                i += 1
            else:
                break
        for cid in calls:
            if cid in answered:
                continue
            later = results.get(cid)
            if later is not None and later >= i and later not in used:
                used.add(later)
                out.append(messages[later])
                continue
            problems.append(Problem("orphan-call", cid, "no result was recorded"))
            out.append({"role": "tool", "tool_call_id": cid, "content": ORPHAN_RESULT})
    return Derived(out, problems)
