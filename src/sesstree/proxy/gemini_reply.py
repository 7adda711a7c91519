"""The reply to a Gemini ``generateContent`` call, whole or streamed, in the event vocabulary
(see :mod:`sesstree.proxy.gemini`), and its stream read as the google-genai SDK reads it."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..interop.gemini import gemini_contents_events
from .gemini import GEMINI, split_array
from .protocols import Event
from .replies import ReplyBuilder, ReplyResult, SseParser

__all__ = ["GeminiReply", "GeminiSse"]

_decode = msgspec.json.decode
_JSON_TOKENS = re.compile(r'["\\{}]')


class GeminiSse(SseParser):
    """Server-sent events as the google-genai SDK reads a Gemini stream: a JSON object sent as
    lines of its own, with no ``data:`` (how the API reports an error after the stream began),
    is one event once its braces balance; and :meth:`end` gives the event the body ended in
    without a blank line (the SDK takes it)."""

    def __init__(self) -> None:
        super().__init__()
        self._raw: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def _other(self, line: str, out: list[tuple[str | None, str]]) -> None:
        self._raw.append(line)
        # A backslash escapes the next character, the first of this line for one that ended
        # the line before (the SDK joins the lines as they are).
        skip = 0 if self._escaped else -1
        self._escaped = False
        for token in _JSON_TOKENS.finditer(line):
            at, char = token.start(), token.group()
            if at == skip:
                continue
            if self._in_string:
                if char == "\\":
                    skip = at + 1
                    self._escaped = skip == len(line)
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char == "{":
                self._depth += 1
            elif char == "}":
                self._depth -= 1
        if self._depth <= 0:
            out.append((None, "".join(self._raw)))
            self._raw, self._depth, self._in_string = [], 0, False

    def end(self) -> list[tuple[str | None, str]]:
        """The events the end of the body completes: the last one, and raw JSON still open."""
        out = super().end()
        if self._raw:
            out.append((None, "".join(self._raw)))
            self._raw, self._depth, self._in_string = [], 0, False
        return out


class GeminiReply(ReplyBuilder):
    """Accumulates one ``generateContent`` reply: a JSON object, a JSON array of chunks, or
    server-sent events each holding one chunk. ``position`` is the number of the reply's turn
    in the history (how many turns the request's contents make)."""

    def __init__(self, position: int = 0) -> None:
        super().__init__(GEMINI)
        self.position = position
        self._parts: list[dict[str, Any]] = []
        self._role: Any = None
        self._candidate = False

    def feed_json(self, body: Any) -> None:
        """A whole reply: one response, or the array of a stream without ``alt=sse``."""
        for chunk in body if isinstance(body, list) else [body]:
            self._chunk(chunk)

    def feed_partial(self, data: bytes) -> None:
        """A JSON-array stream cut short: its whole chunks."""
        for chunk in split_array(data):
            self._chunk(chunk)

    def feed_event(self, event: str | None, data: str) -> None:
        """One server-sent event (``alt=sse``): one chunk."""
        try:
            value = _decode(data)
        except msgspec.DecodeError:
            return
        self._chunk(value)

    def _chunk(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        if "error" in chunk and "candidates" not in chunk:
            self.error = chunk["error"]  # an error inside a stream (after a 200 status line)
            return
        if isinstance(chunk.get("usageMetadata"), dict):
            self.usage = chunk["usageMetadata"]
        self.model = chunk.get("modelVersion", self.model)
        feedback = chunk.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            self.finish = feedback["blockReason"]
            self.complete = True
        candidates = chunk.get("candidates")
        first = next((c for c in candidates if isinstance(c, dict) and c.get("index", 0) == 0),
                     None) if isinstance(candidates, list) else None
        if first is None:
            return
        content = first.get("content")
        if isinstance(content, dict):
            self._candidate = True
            self._role = content.get("role", self._role)
            for part in content.get("parts") or []:
                if isinstance(part, dict):
                    self._part(part)
        if first.get("finishReason"):
            self.finish = first["finishReason"]
            self.complete = True

    def _part(self, part: dict[str, Any]) -> None:
        last = self._parts[-1] if self._parts else None
        text = part.get("text")
        if isinstance(text, str) and last is not None and isinstance(last.get("text"), str) \
                and bool(last.get("thought")) == bool(part.get("thought")) \
                and set(part) <= {"text", "thought", "thoughtSignature"} \
                and set(last) <= {"text", "thought", "thoughtSignature"} \
                and not ("thoughtSignature" in last and "thoughtSignature" in part):
            # Merged as the Gemini CLI merges a streamed reply's text: into the part before,
            # its signature kept (two signatures stay two parts).
            self._grow(last, "text", text)
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
            return
        self._parts.append(dict(part))

    def result(self) -> ReplyResult:
        """The reply's events: its content and message if it finished, else one incomplete
        chunk."""
        self._join_growing()
        events: list[Event] = []
        content = {"role": self._role or "model", "parts": self._parts}
        if self.complete:
            if self._candidate:
                events = gemini_contents_events([content], self.position)
        elif self._parts:
            events.append(("assistant/chunk", content))
        return ReplyResult(events, self.usage, self.model, self.finish, None, self.complete)
