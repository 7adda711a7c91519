"""The canonical form of a chat message, used to match a re-sent history against the store.

Clients re-send the whole history with every request, but rarely byte for byte: keys come in
another order, ``cache_control`` markers move from message to message, content is a string one
time and a list of text parts the next, tool-call arguments are re-serialized with other
whitespace, and an assistant reply comes back without the ``refusal: null`` and
``annotations: []`` the server sent. Matching is therefore done on a canonical form of each
message, never on the stored bytes; what the client sent first is what is stored.

The canonical form of a message is the msgpack array (sorted keys)
``[role, content, tool_calls, tool_call_id, name]``:

- ``role``: the message's role (the one its event type implies when it has none);
- ``content``: a list of parts. A string is one text part; null, ``""`` and a missing content
  are the empty list; consecutive text parts (``text``, ``input_text``, ``output_text``) are
  joined with a newline into one ``["text", TEXT]``; any other part is kept as it is, less
  every ``cache_control`` key at any depth;
- ``tool_calls``: ``[id, name, arguments]`` for each call, the arguments re-encoded as compact
  JSON with sorted keys when they parse as JSON, else kept as written;
- ``tool_call_id`` and ``name``: as written, or nil.

Nothing else counts: ``refusal``, ``annotations``, ``audio``, ``reasoning_content`` and any other
key may differ between two sends of one message. Text is compared exactly (no whitespace is
trimmed from content: it is what the model read).

A history's key is a chain: ``key[0]`` is empty and ``key[i] = blake3(key[i-1] + canon(m[i]))``,
so two histories share ``key[i]`` exactly when their first ``i`` messages are canonically
equal, wherever they came from (OpenAI chat, Responses or Anthropic Messages).
"""

from __future__ import annotations

from typing import Any

import msgspec
from blake3 import blake3

__all__ = ["EMPTY_KEY", "canonical_message", "chain_key"]

#: The key of an empty history.
EMPTY_KEY = b""

_encode = msgspec.msgpack.Encoder(order="sorted").encode
_json_encode = msgspec.json.Encoder(order="sorted").encode
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_DEFAULT_ROLE = {"system/message": "system", "user/message": "user",
                 "assistant/message": "assistant", "tool/result": "tool"}


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _content(content: Any) -> list[Any]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [["text", content]]
    if not isinstance(content, list):
        return [_without_cache_control(content)]
    parts: list[Any] = []
    for part in content:
        text = None
        if isinstance(part, str):
            text = part
        elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS \
                and isinstance(part.get("text"), str):
            text = part["text"]
        if text is None:
            parts.append(_without_cache_control(part))
        elif parts and isinstance(parts[-1], list) and parts[-1][0] == "text":
            parts[-1] = ["text", parts[-1][1] + "\n" + text]
        else:
            parts.append(["text", text])
    return parts


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return _json_encode(msgspec.json.decode(arguments)).decode()
        except (msgspec.DecodeError, TypeError, ValueError):
            return arguments
    return _json_encode(arguments).decode()


def _calls(calls: Any) -> list[Any]:
    if not isinstance(calls, list):
        return []
    out: list[Any] = []
    for call in calls:
        if not isinstance(call, dict):
            out.append(_without_cache_control(call))
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        out.append([call.get("id"), fn.get("name"), _arguments(fn.get("arguments"))])
    return out


def canonical_message(type: str, message: Any) -> list[Any]:
    """The canonical form of the chat message held by an event of type ``type``."""
    if not isinstance(message, dict):
        return [None, _content(message), [], None, None]
    role = message.get("role", _DEFAULT_ROLE.get(type))
    return [role, _content(message.get("content")), _calls(message.get("tool_calls")),
            message.get("tool_call_id"), message.get("name")]


def chain_key(previous: bytes, type: str, message: Any) -> bytes:
    """The key of a history ``previous`` extended by one message."""
    return blake3(previous + _encode(canonical_message(type, message))).digest()
