"""What a request sent, in the event vocabulary, for each recorded wire protocol.

- OpenAI chat completions (``POST .../chat/completions``): each message of ``messages`` is
  one event, stored exactly as sent (it already is the vocabulary's chat message);
- OpenAI Responses (``POST .../responses``): ``instructions`` (when the request starts a
  history) is a ``system/message``; ``input`` as a string is a user message; each input item
  is its raw form (an ``openai/response-item`` event) followed by the chat messages it maps to
  (:func:`sesstree.interop.codex.response_item_events`, as a Codex rollout imports);
- Anthropic Messages (``POST .../messages``): ``system`` is a system message; each message is
  its raw form (an ``anthropic/message`` event) followed by the chat messages it maps to
  (:func:`sesstree.interop.claude.claude_message_events`, as a Claude Code transcript imports);
- Gemini (``POST .../models/{model}:generateContent`` and ``:streamGenerateContent``):
  ``systemInstruction`` and each content is its raw form (a ``gemini/content`` event) with,
  after each turn, the chat messages it maps to (:mod:`sesstree.proxy.gemini`, with
  :func:`sesstree.interop.gemini.gemini_contents_events`).

Everything else in the body (model, tools, sampling parameters, ...) is what the request asked
for: it is recorded beside the reply, never in the messages, so a changed parameter does not
change which stored path a history matches.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..events import is_registered, message_type, register_event_type
from ..interop.claude import claude_message_events
from ..interop.codex import response_item_events
from ..interop.gemini import RAW_TYPE as GEMINI_RAW
from .gemini import GEMINI, gemini_request, is_gemini_call

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "GEMINI",
    "RAW_TYPES",
    "RESPONSES",
    "Event",
    "ParsedRequest",
    "parse_request",
    "protocol_of",
]

CHAT = "openai.chat"
RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"

#: The wire form of an Anthropic message, a Responses item or a Gemini content, kept as the
#: client (or the server, for a reply) sent it; never sent to a model.
RAW_TYPES = ("anthropic/message", "openai/response-item", GEMINI_RAW)
for _type in RAW_TYPES:
    if not is_registered(_type):
        register_event_type(_type)

Event = tuple[str, Any]


class ParsedRequest(msgspec.Struct):
    """A recorded request: its protocol, its history as events, and what else it asked for."""

    protocol: str
    events: list[Event]
    #: Everything in the body but the history (model, tools, parameters).
    params: dict[str, Any]
    stream: bool = False
    #: Responses: the reply this request continues (only its new input is in ``events``).
    previous_response_id: str | None = None
    #: Gemini: how many turns the request's contents make (the number of its reply's turn).
    position: int = 0


def protocol_of(method: str, path: str) -> str | None:
    """The recorded protocol of a request, or None for one passed through unrecorded."""
    if method != "POST":
        return None
    path = path.rstrip("/")
    if is_gemini_call(path):
        return GEMINI
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/responses"):
        return RESPONSES
    if path.endswith("/messages"):
        return ANTHROPIC
    return None


def parse_request(protocol: str, body: Any, path: str = "") -> ParsedRequest | None:
    """The history and parameters of a request body (sent to ``path``: Gemini names the
    model there); None if it is not a request of that protocol (the upstream will say what is
    wrong with it)."""
    if not isinstance(body, dict):
        return None
    if protocol == GEMINI:
        return _gemini(body, path)
    if protocol == CHAT:
        return _chat(body)
    if protocol == RESPONSES:
        return _responses(body)
    return _anthropic(body)


def _rest(body: dict[str, Any], *history: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in history}


def _chat(body: dict[str, Any]) -> ParsedRequest | None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    events = [(message_type(m), m) for m in messages if isinstance(m, dict)]
    return ParsedRequest(CHAT, events, _rest(body, "messages"), body.get("stream") is True)


def _responses(body: dict[str, Any]) -> ParsedRequest | None:
    previous = body.get("previous_response_id")
    previous = previous if isinstance(previous, str) and previous else None
    events: list[Event] = []
    instructions = body.get("instructions")
    # Instructions are not carried over by previous_response_id, so a chained request
    # re-sends them every time: they start a history, and are a parameter of a chained one.
    history = ["input"]
    if previous is None and isinstance(instructions, str) and instructions:
        events.append(("system/message", {"role": "system", "content": instructions}))
        history.append("instructions")
    value = body.get("input")
    if isinstance(value, str):
        events.append(("user/message", {"role": "user", "content": value}))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                events.append(("openai/response-item", item))
                events.extend(response_item_events(item))
    else:
        return None
    return ParsedRequest(RESPONSES, events, _rest(body, *history), body.get("stream") is True,
                         previous)


def _anthropic(body: dict[str, Any]) -> ParsedRequest | None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    events: list[Event] = []
    system = body.get("system")
    if system:
        events.append(("anthropic/message", {"role": "system", "content": system}))
        events.extend(("system/message", {**m, "role": "system"}) for _, m in
                      claude_message_events({"content": system}, "user"))
    for m in messages:
        if isinstance(m, dict):
            events.append(("anthropic/message", m))
            events.extend(claude_message_events(m, str(m.get("role"))))
    return ParsedRequest(ANTHROPIC, events, _rest(body, "messages", "system"),
                         body.get("stream") is True)


def _gemini(body: dict[str, Any], path: str) -> ParsedRequest | None:
    found = gemini_request(body, path)
    if found is None:
        return None
    events, params, stream, position = found
    return ParsedRequest(GEMINI, events, params, stream, position=position)
