"""The canonical forms of the wire protocols' own messages: one small function per protocol.

Each form is built from the shape rules of :mod:`sesstree.proxy.canonical` (``parts``,
``trimmed``, ``arguments``) plus what the protocol's documentation says of its own fields,
and registered for the event type that holds the raw message. A protocol plugs in by adding
its function and one :func:`~sesstree.proxy.canonical.register_wire_form` call.

Anthropic Messages (``anthropic/message``; the ``system`` prompt is one too, role
``system``): ``[role, parts, [], None, None]`` (a sixth element with any other field of the
message). A string is one text block; ``cache_control`` (a caching directive, the model reads
the same input) and null or empty ``citations`` do not count. ``tool_use`` is ``["tool_use",
id, name, arguments]``, ``tool_result`` is ``["tool_result", tool_use_id, parts,
is_error]`` (its content under the same rules; ``is_error`` absent is false). Every other
block (thinking with its signature, images, documents, server tools) counts whole, less its
cache marker.

OpenAI Responses (``openai/response-item``): a message item (``type`` ``message``, or no type
and a ``role``) is ``[role, parts, [], None, None]``, its ``id``, ``status`` and its parts'
``annotations`` and ``logprobs`` (what the server says of its reply) not counted, so the
reply re-sent as ``{"role": "assistant", "content": "..."}`` is the item the server sent; any
other field it has (Codex's ``phase``) is a sixth element, so that an item is never the one
without it. Any other item is ``["#item", type, fields]``: every field but ``status`` and the
item's own ``id`` (kept for an ``item_reference``, whose id is all it says, and for a
``reasoning`` item without ``encrypted_content``, which the server reads back by its id),
with a function call's
arguments re-encoded and an output's content under the parts rules. Its three elements never
equal a message's five.
"""

from __future__ import annotations

from typing import Any

from .canonical import arguments, parts, register_wire_form, trimmed

__all__ = [
    "ANTHROPIC_FORM",
    "RESPONSES_FORM",
    "anthropic_derived",
    "anthropic_form",
    "response_item_derived",
    "response_item_form",
]

#: The event types of the raw messages keyed here.
ANTHROPIC_FORM = "anthropic/message"
RESPONSES_FORM = "openai/response-item"

_ANTHROPIC_ANNOTATIONS = frozenset({"cache_control"})
_RESPONSES_ANNOTATIONS = frozenset({"annotations", "logprobs", "cache_control"})


def _anthropic_trim(block: Any) -> Any:
    block = trimmed(block, _ANTHROPIC_ANNOTATIONS)
    if isinstance(block, dict) and block.get("citations") == []:
        block = {k: v for k, v in block.items() if k != "citations"}
    return block


def _anthropic_block(block: dict[str, Any]) -> Any:
    kind = block.get("type")
    if kind == "tool_use":
        rest = {k: v for k, v in block.items() if k not in ("type", "id", "name", "input")}
        form = ["tool_use", block.get("id"), block.get("name"), arguments(block.get("input"))]
        return [*form, rest] if rest else form
    if kind == "tool_result":
        rest = {k: v for k, v in block.items()
                if k not in ("type", "tool_use_id", "content", "is_error")}
        form = ["tool_result", block.get("tool_use_id"),
                parts(block.get("content"), _anthropic_trim, _anthropic_block),
                block.get("is_error") is True]
        return [*form, rest] if rest else form
    return block


def anthropic_form(message: Any) -> Any:
    """The canonical form of one Anthropic message (or of the system prompt, role
    ``system``)."""
    if not isinstance(message, dict):
        return ["#anthropic", message]
    form: list[Any] = [message.get("role"),
                       parts(message.get("content"), _anthropic_trim, _anthropic_block),
                       [], None, None]
    rest = {k: v for k, v in message.items() if k not in ("role", "content") and v is not None}
    if rest:
        form.append(rest)
    return form


def _responses_trim(part: Any) -> Any:
    return trimmed(part, _RESPONSES_ANNOTATIONS)


def response_item_form(item: Any) -> Any:
    """The canonical form of one Responses input or output item."""
    if not isinstance(item, dict):
        return ["#item", None, item]
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        form: list[Any] = [item.get("role"), parts(item.get("content"), _responses_trim), [],
                           None, None]
        # Any other field (Codex's ``phase`` of an assistant message, one to come) is read
        # by the model: a sixth element, so the item is not one it lacks.
        rest = {k: v for k, v in item.items()
                if v is not None and k not in ("type", "role", "content", "id", "status")}
        if rest:
            form.append(rest)
        return form
    fields = {k: v for k, v in item.items() if v is not None and k not in ("type", "status")
              and (k != "id" or _id_is_input(kind, item))}
    if "arguments" in fields:
        fields["arguments"] = arguments(fields["arguments"])
    if "output" in fields and isinstance(kind, str) and kind.endswith("_output"):
        fields["output"] = parts(fields["output"], _responses_trim)
    return ["#item", kind, fields]


def _id_is_input(kind: Any, item: dict[str, Any]) -> bool:
    """Whether an item's ``id`` is part of what the model reads: for an ``item_reference``
    (its id is all it says), and for a ``reasoning`` item that does not carry its content
    (no ``encrypted_content``: the server reads the reasoning it stored under that id). Any
    other id is the server's name for an item whose content is all there, which clients
    re-send or not."""
    if kind == "item_reference":
        return True
    return kind == "reasoning" and not item.get("encrypted_content")


def anthropic_derived(message: Any) -> int:
    """How many chat messages :func:`~sesstree.interop.claude.claude_message_events` maps an
    Anthropic message to (counted, not built: this runs for every message of every request):
    one per ``tool_result`` block, and one for its text and images (or, for an assistant,
    its text, images and tool calls), if it has any."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str) or content is None:
        return 1
    if not isinstance(content, list):
        return 0
    kinds = [b.get("type") for b in content if isinstance(b, dict)]
    own = ("text", "image", "tool_use") if message.get("role") == "assistant" \
        else ("text", "image")
    return kinds.count("tool_result") + any(k in own for k in kinds)


_MAPPED_ITEMS = frozenset({"message", "function_call", "custom_tool_call", "local_shell_call",
                           "function_call_output", "custom_tool_call_output",
                           "local_shell_call_output"})


def response_item_derived(item: Any) -> int:
    """How many chat messages :func:`~sesstree.interop.codex.response_item_events` maps a
    Responses item to: one for the items it maps, none for the others (reasoning, ...)."""
    if not isinstance(item, dict):
        return 0
    return int(item.get("type", "message" if "role" in item else None) in _MAPPED_ITEMS)


register_wire_form(ANTHROPIC_FORM, anthropic_form, anthropic_derived)
register_wire_form(RESPONSES_FORM, response_item_form, response_item_derived)
