"""The Gemini API (``POST .../models/{model}:generateContent`` and ``:streamGenerateContent``)
as the proxy records it: the request's history, and the reply, whole, streamed as server-sent
events (``?alt=sse``) or streamed as one JSON array (without ``alt=sse``).

A request is recorded as ``systemInstruction`` and each of its ``contents`` mapped by
:mod:`sesstree.interop.gemini` (raw ``gemini/content`` events, then the chat messages each
turn maps to); the model named in the path and everything else in the body (``tools``,
``generationConfig``, ``toolConfig``, ``safetySettings``, ``cachedContent``, ...) are what the
call asked for. The reply is the first candidate's ``content``, its streamed chunks' parts
merged (consecutive text parts of one kind, thought or not, concatenated; every other part
kept as it came), recorded as one ``gemini/content`` and the message it maps to once a
``finishReason`` came (or the prompt was blocked: ``promptFeedback.blockReason``), else as
one incomplete ``assistant/chunk``. ``usageMetadata`` is the call's usage.

The API key (``x-goog-api-key``, or ``key=`` in the query) is a secret like every other
credential (:mod:`sesstree.proxy.upstream`): forwarded, never recorded.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..interop.gemini import gemini_contents_events, gemini_system_events, gemini_turns

__all__ = ["GEMINI", "gemini_model", "gemini_request", "is_gemini_call", "split_array"]

GEMINI = "gemini.generate"

#: ``.../models/NAME:method`` (also ``tunedModels/``, and Vertex AI's
#: ``projects/P/locations/L/publishers/google/models/NAME``), any API version before it.
_METHOD = re.compile(r"/(?:tunedModels|models)/([^/:]+):(generateContent|streamGenerateContent)$")
_decode = msgspec.json.decode
_OBJECT_TOKENS = re.compile(rb'["\\{}]')


def gemini_model(path: str) -> tuple[str, bool] | None:
    """The model a Gemini request's path names and whether it streams; None for a path that
    is not a ``generateContent`` call."""
    found = _METHOD.search(path.rstrip("/"))
    if found is None:
        return None
    return found.group(1), found.group(2) == "streamGenerateContent"


def is_gemini_call(path: str) -> bool:
    """True for the path of a ``generateContent`` or ``streamGenerateContent`` call."""
    return ":" in path and _METHOD.search(path.rstrip("/")) is not None


def gemini_request(body: dict[str, Any], path: str
                   ) -> tuple[list[tuple[str, Any]], dict[str, Any], bool, int] | None:
    """The history of a ``generateContent`` request body as events, the parameters (the
    model named in the path among them), whether it streams, and how many turns its contents
    make (the number of the reply's turn); None if the body has no ``contents``."""
    contents = body.get("contents")
    if isinstance(contents, dict):  # one Content, as some clients send a single turn
        contents = [contents]
    if not isinstance(contents, list):
        return None
    named = gemini_model(path)
    model, stream = named if named is not None else (None, False)
    events: list[tuple[str, Any]] = []
    history = ["contents"]
    system = body.get("systemInstruction", body.get("system_instruction"))
    if system:
        events.extend(gemini_system_events(system))
        history += ["systemInstruction", "system_instruction"]
    events.extend(gemini_contents_events(contents))
    params = {k: v for k, v in body.items() if k not in history}
    params.setdefault("model", model)
    return events, params, stream, gemini_turns(contents)


def split_array(data: bytes) -> list[Any]:
    """The whole objects at the top level of a JSON array cut short (``[{...},{...},{..``):
    what a ``streamGenerateContent`` reply without ``alt=sse`` had sent when it was cut."""
    out: list[Any] = []
    start = depth = 0
    in_string = False
    skip = -1  # the position of a character a backslash escapes
    for token in _OBJECT_TOKENS.finditer(data):
        at = token.start()
        if at == skip:
            continue
        char = token.group()
        if in_string:
            if char == b"\\":
                skip = at + 1
            elif char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char == b"{":
            if depth == 0:
                start = at
            depth += 1
        elif char == b"}":
            depth -= 1
            if depth == 0:
                try:
                    out.append(_decode(data[start:token.end()]))
                except msgspec.DecodeError:
                    return out
    return out
