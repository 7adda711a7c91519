"""What the upstream answered, in the event vocabulary: a whole JSON reply or a stream of
server-sent events, fed as it passes through.

A reply the upstream finished (``finish_reason``, ``[DONE]``, ``message_stop``,
``response.completed``) becomes the assistant's messages. A stream cut before that (by the
client or by the upstream) is recorded as one ``assistant/chunk`` event holding what had
arrived, marked incomplete: it is a record of what passed, not a message, so a client that
retries the request does not find a half reply in its history.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..interop.claude import claude_message_events
from ..interop.codex import response_item_events
from .protocols import ANTHROPIC, CHAT, Event

__all__ = ["ReplyBuilder", "ReplyResult", "SseParser"]

_decode = msgspec.json.decode


class SseParser:
    """Incremental server-sent-events parser: feed bytes, get ``(event, data)`` pairs.

    Linear in what it is fed: each chunk is scanned from a moving offset and only its lines
    are sliced out of it; the unfinished end of a chunk is kept as a list of pieces, joined
    once its newline comes. (Copying the rest of the buffer after every line made a stream of
    n lines cost n squared: 20 s for a 48,000-token reply.)
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # an unfinished line, in the pieces it came in
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        """The events completed by ``chunk``."""
        out: list[tuple[str | None, str]] = []
        end = chunk.find(b"\n")
        if end < 0:
            if chunk:
                self._pending.append(chunk)
            return out
        if self._pending:
            self._pending.append(chunk[:end])
            self._line(b"".join(self._pending), out)
            self._pending = []
        else:
            self._line(chunk[:end], out)
        start = end + 1
        find = chunk.find
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            self._line(chunk[start:end], out)
            start = end + 1
        if start < len(chunk):
            self._pending.append(chunk[start:])
        return out

    def _line(self, raw: bytes, out: list[tuple[str | None, str]]) -> None:
        line = raw.rstrip(b"\r").decode("utf-8", "replace")
        if not line:
            if self._data:
                out.append((self._event, "\n".join(self._data)))
            self._event, self._data = None, []
        elif line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            self._event = line[6:].strip()
        elif not line.startswith((":", "id:", "retry:")):
            self._other(line, out)

    def _other(self, line: str, out: list[tuple[str | None, str]]) -> None:
        """A line that is no SSE field (ignored here: a protocol may read it)."""

    def end(self) -> list[tuple[str | None, str]]:
        """The event the body ended in without the blank line that closes it (with its last
        line, if that had no newline either)."""
        out: list[tuple[str | None, str]] = []
        if self._pending:
            line, self._pending = b"".join(self._pending), []
            self._line(line, out)
        self._line(b"", out)
        return out


class ReplyResult(msgspec.Struct):
    """The reply as events, and what is recorded about it."""

    events: list[Event]
    usage: Any = None
    model: Any = None
    finish_reason: Any = None
    response_id: str | None = None
    complete: bool = False


class ReplyBuilder:
    """Accumulates one reply of ``protocol`` from a JSON body or from stream events."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.complete = False
        self.usage: Any = None
        self.model: Any = None
        self.finish: Any = None
        self.response_id: str | None = None
        #: An error the upstream sent inside a stream (after a 200 status line).
        self.error: Any = None
        # chat
        self._text: list[str] = []
        self._role_seen = False
        self._calls: dict[int, dict[str, Any]] = {}
        self._message: dict[str, Any] | None = None
        # anthropic
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial_json: dict[int, list[str]] = {}
        # Text that arrives in deltas, kept as pieces and joined once (at the end of a block,
        # or when the reply is built): adding each delta to a string would copy the text so
        # far at every delta, n squared in the length of the reply.
        self._growing: dict[tuple[int, str], tuple[dict[str, Any], list[str]]] = {}
        # responses
        self._items: dict[int, dict[str, Any]] = {}
        self._output: list[Any] | None = None

    # -- feeding -----------------------------------------------------------------------------

    def feed_json(self, body: Any) -> None:
        """A whole (non-streamed) reply."""
        if not isinstance(body, dict):
            return
        self.model = body.get("model")
        self.usage = body.get("usage")
        if self.protocol == CHAT:
            choices = body.get("choices")
            first = choices[0] if isinstance(choices, list) and choices else None
            if isinstance(first, dict) and isinstance(first.get("message"), dict):
                self._message = first["message"]
                self.finish = first.get("finish_reason")
                self.complete = True
        elif self.protocol == ANTHROPIC:
            if isinstance(body.get("content"), list):
                self._blocks = dict(enumerate(body["content"]))
                self.finish = body.get("stop_reason")
                self.complete = True
        else:
            self._response(body)

    def feed_event(self, event: str | None, data: str) -> None:
        """One server-sent event of a streamed reply."""
        if data.strip() == "[DONE]":
            self.complete = self.complete or bool(self._text or self._calls or self._role_seen)
            return
        try:
            value = _decode(data)
        except msgspec.DecodeError:
            return
        if not isinstance(value, dict):
            return
        if event == "error" or value.get("type") == "error" or (
                "error" in value and "choices" not in value and "type" not in value):
            # Anthropic's overloaded_error, Responses' error event, OpenAI-compatible routers'
            # {"error": ...} chunk: the stream failed after its status line.
            self.error = value.get("error", value)
            return
        if self.protocol == CHAT:
            self._chat_chunk(value)
        elif self.protocol == ANTHROPIC:
            self._anthropic_event(value)
        else:
            self._responses_event(value)

    def _chat_chunk(self, chunk: dict[str, Any]) -> None:
        self.model = chunk.get("model", self.model)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        first = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0),
                     None) if isinstance(choices, list) else None
        if first is None:
            return
        delta = first.get("delta")
        if isinstance(delta, dict):
            if "role" in delta:
                self._role_seen = True
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                index = call.get("index", 0)
                acc = self._calls.setdefault(index if isinstance(index, int) else 0,
                                             {"id": None, "type": "function",
                                              "function": {"name": "", "arguments": ""}})
                if call.get("id"):
                    acc["id"] = call["id"]
                fn = call.get("function")
                if isinstance(fn, dict):
                    if isinstance(fn.get("name"), str):
                        self._grow(acc["function"], "name", fn["name"])
                    if isinstance(fn.get("arguments"), str):
                        self._grow(acc["function"], "arguments", fn["arguments"])
        if first.get("finish_reason"):
            self.finish = first["finish_reason"]
            self.complete = True

    def _anthropic_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        index = event.get("index")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = event["message"]
            self.model = message.get("model")
            self.usage = message.get("usage")
        elif kind == "content_block_start" and isinstance(index, int):
            self._join_growing()
            block = event.get("content_block")
            self._blocks[index] = dict(block) if isinstance(block, dict) else {}
        elif kind == "content_block_delta" and isinstance(index, int):
            block = self._blocks.setdefault(index, {"type": "text", "text": ""})
            raw_delta = event.get("delta")
            delta: dict[str, Any] = raw_delta if isinstance(raw_delta, dict) else {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                self._grow(block, "text", str(delta.get("text", "")))
            elif dtype == "input_json_delta":
                self._partial_json.setdefault(index, []).append(
                    str(delta.get("partial_json", "")))
            elif dtype == "thinking_delta":
                self._grow(block, "thinking", str(delta.get("thinking", "")))
            elif dtype == "signature_delta":
                block["signature"] = delta.get("signature")
        elif kind == "content_block_stop" and isinstance(index, int):
            self._join_growing()
            self._settle_json(index)
        elif kind == "message_delta":
            change = event.get("delta")
            if isinstance(change, dict) and change.get("stop_reason"):
                self.finish = change["stop_reason"]
            if isinstance(event.get("usage"), dict):
                self.usage = {**(self.usage if isinstance(self.usage, dict) else {}),
                              **event["usage"]}
        elif kind == "message_stop":
            self.complete = True

    def _grow(self, target: dict[str, Any], field: str, text: str) -> None:
        """Add ``text`` to the string ``target[field]`` (joined by :meth:`_join_growing`)."""
        key = (id(target), field)
        entry = self._growing.get(key)
        if entry is None or entry[0] is not target:
            entry = self._growing[key] = (target, [str(target.get(field, ""))])
        entry[1].append(text)

    def _join_growing(self) -> None:
        """Write every text grown by deltas into its place (before anything reads or
        replaces the parts of the reply it belongs to)."""
        for (_, field), (target, pieces) in self._growing.items():
            target[field] = "".join(pieces)
        self._growing.clear()

    def _settle_json(self, index: int) -> None:
        pieces = self._partial_json.pop(index, None)
        if pieces is None:
            return
        text = "".join(pieces)
        try:
            self._blocks[index]["input"] = _decode(text) if text else {}
        except msgspec.DecodeError:
            self._blocks[index]["input"] = text

    def _responses_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        index = event.get("output_index")
        if kind in ("response.created", "response.in_progress") and isinstance(
                event.get("response"), dict):
            self.response_id = event["response"].get("id")
            self.model = event["response"].get("model")
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._join_growing()
            if isinstance(event.get("response"), dict):
                self._response(event["response"])
        elif kind in ("response.output_item.added", "response.output_item.done") and \
                isinstance(index, int) and isinstance(event.get("item"), dict):
            self._join_growing()
            self._items[index] = dict(event["item"])
        elif kind == "response.output_text.delta" and isinstance(index, int):
            item = self._items.setdefault(index, {"type": "message", "role": "assistant"})
            parts = item.setdefault("content", [])
            if isinstance(parts, list):
                if not parts or not isinstance(parts[-1], dict):
                    parts.append({"type": "output_text", "text": ""})
                self._grow(parts[-1], "text", str(event.get("delta", "")))
        elif kind == "response.function_call_arguments.delta" and isinstance(index, int):
            item = self._items.setdefault(index, {"type": "function_call"})
            self._grow(item, "arguments", str(event.get("delta", "")))

    def _response(self, response: dict[str, Any]) -> None:
        self.response_id = response.get("id", self.response_id)
        self.model = response.get("model", self.model)
        self.usage = response.get("usage", self.usage)
        status = response.get("status")
        details = response.get("incomplete_details")
        self.finish = details.get("reason") if isinstance(details, dict) and \
            details.get("reason") else status
        if isinstance(response.get("output"), list):
            self._output = response["output"]
            self.complete = True

    # -- result ------------------------------------------------------------------------------

    def result(self) -> ReplyResult:
        """The reply's events: messages if it finished, else one incomplete chunk."""
        events: list[Event] = []
        self._join_growing()
        if self.protocol == CHAT:
            message = self._message
            if message is None:
                message = {"role": "assistant", "content": "".join(self._text) or None}
                if self._calls:
                    message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
                if not self._text and not self._calls and not self._role_seen:
                    message = None
            if message is not None:
                events.append(("assistant/message" if self.complete else "assistant/chunk",
                               message))
        elif self.protocol == ANTHROPIC:
            for index in list(self._partial_json):
                self._settle_json(index)
            blocks = [self._blocks[i] for i in sorted(self._blocks)]
            reply = {"role": "assistant", "content": blocks}
            if self.complete:
                events.append(("anthropic/message", reply))
                events.extend(claude_message_events(reply, "assistant"))
            elif blocks:
                events.append(("assistant/chunk", reply))
        else:
            items = self._output if self._output is not None else [
                self._items[i] for i in sorted(self._items)]
            if self.complete:
                for item in items:
                    if isinstance(item, dict):
                        events.append(("openai/response-item", item))
                        events.extend(response_item_events(item))
            elif items:
                events.append(("assistant/chunk", {"role": "assistant", "output": items}))
        return ReplyResult(events, self.usage, self.model, self.finish, self.response_id,
                           self.complete)
