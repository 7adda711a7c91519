"""The canonical form of what a request re-sends, used to match its history against the store.

Clients re-send the whole history with every request, but rarely byte for byte: keys come in
another order, ``cache_control`` markers move from message to message, content is a string one
time and a list of one text block the next, tool-call arguments are re-serialized with other
whitespace, and a reply comes back without the ``refusal: null``, ``annotations: []``, item
``id`` and ``status`` the server sent. Matching is therefore done on a canonical form of each
*unit* of a history, never on the stored bytes; what the client sent first is what is stored.

A unit is what the wire protocol calls a message, whatever its role:

- a chat message event (OpenAI chat completions; the ``instructions`` and string ``input`` of
  a Responses request): :func:`canonical_message`;
- a protocol's wire form, registered with :func:`register_wire_form` by the module that
  knows the protocol (``anthropic/message``, ``openai/response-item``: see
  :mod:`sesstree.proxy.wireforms`). The chat messages a wire form maps to follow it and are
  *derived* from it (the form says how many): they carry its key on, and do not count again.

Each form is the msgpack array (sorted keys) ``[role, parts, tool_calls, tool_call_id, name]``
(plus, for a chat message, a sixth element with ``function_call``, ``refusal`` or ``audio``
when it has any), built from these shape rules shared by every protocol:

- a string is one text part, ``["text", TEXT]``; null, ``""`` and no content are no parts;
- a text part (``text``, ``input_text``, ``output_text``) is ``["text", TEXT]`` once its
  annotations (the protocol's list: ``cache_control``, ``annotations``, ``logprobs``) and its
  null fields are left out; text is compared exactly, whitespace included;
- adjacent text parts stay apart (no provider documents that it reads ``["a", "b"]`` as
  ``"ab"`` or ``"a\\nb"``: a user who splits a text changes the input);
- any other part is kept as written, less its annotations and null fields (at its top level
  only: a tool's input may have a ``cache_control`` key of its own);
- tool-call arguments are re-encoded as compact JSON with sorted keys when they parse as JSON.

Two encodings a provider reads as the same input have one form; any other difference (a
character, a role, a dropped, added or reordered part, a tool id, a block the protocol keeps
such as a thinking block) gives another form.

A history's key is a chain: ``key[0]`` is empty and ``key[i] = blake3(key[i-1] +
form(unit[i]))``, so two histories share ``key[i]`` exactly when their first ``i`` units are
canonically equal. A text-only history has one key whichever protocol carried it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

import msgspec
from blake3 import blake3

from ..events import MESSAGE_TYPES

__all__ = [
    "EMPTY_KEY",
    "WIRE_FORMS",
    "WireForm",
    "arguments",
    "canonical_message",
    "canonical_unit",
    "chain_key",
    "is_unit",
    "parts",
    "register_wire_form",
    "roll",
    "trimmed",
    "units",
]

#: The key of an empty history.
EMPTY_KEY = b""

_encode = msgspec.msgpack.Encoder(order="sorted").encode
_json_encode = msgspec.json.Encoder(order="sorted").encode
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_DEFAULT_ROLE = {"system/message": "system", "user/message": "user",
                 "assistant/message": "assistant", "tool/result": "tool"}
#: Keys of a chat part that never reach the model: OpenRouter's and Anthropic-compatible
#: servers' cache marker.
_CHAT_ANNOTATIONS = frozenset({"cache_control"})

class WireForm(NamedTuple):
    """How a protocol's raw message is keyed: its canonical form, and how many chat message
    events the protocol's parser puts after it (derived from it: they do not count again)."""

    form: Callable[[Any], Any]
    derived: Callable[[Any], int]


#: Event type of a protocol's raw message -> how it is keyed.
WIRE_FORMS: dict[str, WireForm] = {}


def register_wire_form(type: str, form: Callable[[Any], Any],
                       derived: Callable[[Any], int]) -> None:
    """Key the events of ``type`` (a protocol's raw message) by ``form``; ``derived(data)``
    is the number of chat message events that follow such an event, mapped from it, which
    carry its key on instead of rolling it again (it must agree with the protocol's
    parser: a message after them is a unit of its own)."""
    WIRE_FORMS[type] = WireForm(form, derived)


def trimmed(value: Any, annotations: Collection[str]) -> Any:
    """A part or block as it counts: without its ``annotations`` keys and null fields (at its
    top level only)."""
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if v is not None and k not in annotations}


def _chat_trim(part: Any) -> Any:
    return trimmed(part, _CHAT_ANNOTATIONS)


def parts(content: Any, trim: Callable[[Any], Any] = _chat_trim,
          block: Callable[[dict[str, Any]], Any] | None = None) -> list[Any]:
    """The canonical parts of a content: a string or a list of parts. ``trim`` leaves out
    what of a part does not count (the protocol's annotations); ``block`` gives the form of
    a protocol's own non-text block (None: the block is kept, trimmed)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [["text", content]]
    if not isinstance(content, list):
        return [trim(content)]
    out: list[Any] = []
    for part in content:
        if isinstance(part, str):
            out.append(["text", part])
            continue
        kept = trim(part)
        if isinstance(kept, dict) and kept.get("type") in _TEXT_PARTS \
                and isinstance(kept.get("text"), str) and len(kept) == 2:
            out.append(["text", kept["text"]])
        elif block is not None and isinstance(kept, dict):
            out.append(block(kept))
        else:
            out.append(kept)
    return out


def arguments(value: Any) -> Any:
    """Tool-call arguments as compact JSON with sorted keys (a string that is no JSON as it
    is)."""
    if isinstance(value, str):
        try:
            return _json_encode(msgspec.json.decode(value)).decode()
        except (msgspec.DecodeError, TypeError, ValueError):
            return value
    return _json_encode(value).decode()


def _calls(calls: Any) -> list[Any]:
    if not isinstance(calls, list):
        return []
    out: list[Any] = []
    for call in calls:
        if not isinstance(call, dict):
            out.append(call)
            continue
        kind = call.get("type", "function")
        if kind == "function":
            fn = call.get("function")
            fn = fn if isinstance(fn, dict) else {}
            out.append([call.get("id"), fn.get("name"), arguments(fn.get("arguments"))])
        else:  # a custom tool's call, or one a newer API invents: all of it counts
            out.append([call.get("id"), kind,
                        trimmed({k: v for k, v in call.items() if k not in ("id", "type")},
                                ())])
    return out


def canonical_message(type: str, message: Any) -> list[Any]:
    """The canonical form of the chat message held by an event of type ``type``."""
    if not isinstance(message, dict):
        return [None, parts(message), [], None, None]
    role = message.get("role", _DEFAULT_ROLE.get(type))
    form = [role, parts(message.get("content")), _calls(message.get("tool_calls")),
            message.get("tool_call_id"), message.get("name")]
    # Fields the model reads that most messages lack: a legacy function call, a refusal
    # re-sent as such, a reference to an earlier audio reply.
    extra = {k: message[k] for k in ("function_call", "refusal", "audio")
             if message.get(k) is not None}
    if "function_call" in extra and isinstance(extra["function_call"], dict):
        fc = extra["function_call"]
        extra["function_call"] = [fc.get("name"), arguments(fc.get("arguments"))]
    if extra:
        form.append(extra)
    return form


def canonical_unit(type: str, data: Any) -> Any:
    """The canonical form of one unit of a history: a wire form's or a chat message's."""
    wire = WIRE_FORMS.get(type)
    return wire.form(data) if wire is not None else canonical_message(type, data)


def is_unit(type: str) -> bool:
    """Whether an event of ``type`` can be a unit of a history (a chat message, or a wire
    form)."""
    return type in WIRE_FORMS or type in MESSAGE_TYPES


def chain_key(previous: bytes, type: str, message: Any) -> bytes:
    """The key of a history ``previous`` extended by one unit."""
    return blake3(previous + _encode(canonical_unit(type, message))).digest()


def roll(key: bytes, pending: int, type: str, data: Any,
         chain: Callable[[bytes, str, Any], bytes] = chain_key) -> tuple[bytes, int, bool]:
    """One event of a path or a request on the way to its history key: ``(key, pending,
    counted)``. A wire form rolls the key, and the chat messages derived from it (``pending``
    of them still to come) carry it on; any other chat message rolls it; any other event
    leaves it. ``counted``: the event is a unit, or derived from one (its node continues the
    history)."""
    wire = WIRE_FORMS.get(type)
    if wire is not None:
        return chain(key, type, data), wire.derived(data), True
    if type in MESSAGE_TYPES:
        if pending:
            return key, pending - 1, True
        return chain(key, type, data), 0, True
    return key, 0, False


def units(types: Sequence[str], datas: Sequence[Any], pending: int = 0) -> list[bool]:
    """For each event of a history, whether it starts a unit: a wire form, or a chat message
    not derived from one (``pending``: derived messages still to come where it starts)."""
    out: list[bool] = []
    for type, data in zip(types, datas, strict=True):
        wire = WIRE_FORMS.get(type)
        if wire is not None:
            pending = wire.derived(data)
            out.append(True)
        elif type in MESSAGE_TYPES:
            out.append(not pending)
            pending = max(0, pending - 1)
        else:
            pending = 0
            out.append(False)
    return out
