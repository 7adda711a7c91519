"""What passed through for one forwarded request, and turning it into an exchange to record.

Runs on the proxy's recorder thread, after the reply has passed: nothing here is on the path
between the upstream and the client.
"""

from __future__ import annotations

import zlib
from collections.abc import Generator
from typing import Any

import msgspec

from .gemini_reply import GeminiReply, GeminiSse
from .protocols import GEMINI, ParsedRequest, parse_request
from .recorder import Exchange, redact
from .replies import ReplyBuilder, SseParser

__all__ = ["DECODABLE", "STEP_BYTES", "Call", "exchange_of", "exchange_steps", "parsed_request"]

#: Content encodings the recorder can read back (the only ones offered to the upstream).
DECODABLE = ("gzip", "deflate", "identity")
#: Bytes of a streamed reply parsed in one turn of the recorder thread.
STEP_BYTES = 1 << 20
_decode = msgspec.json.decode


class Call:
    """What passed through for one request, handed to the recorder thread."""

    __slots__ = ("body", "chunks", "cut_by", "encoding", "error", "method", "ms", "path",
                 "protocol", "secrets", "session", "started", "status", "streamed")

    def __init__(self, method: str, path: str, protocol: str | None, body: bytes,
                 started: float) -> None:
        self.method = method
        self.path = path
        self.protocol = protocol
        self.body = body
        self.started = started
        self.session: str | None = None
        self.secrets: list[str] = []
        self.status: int | None = None
        self.error: Any = None
        self.encoding = "identity"
        self.streamed = False
        self.chunks: list[bytes] = []
        self.cut_by: str | None = None
        self.ms = 0.0

    @property
    def where(self) -> str:
        """The call as a log line starts: method, path, status."""
        # No status: the call was cut before the upstream's reply began.
        status = "(no reply)" if self.status is None else self.status
        return f"{self.method} {self.path} {status}"


def parsed_request(call: Call) -> ParsedRequest | None:
    """The model call ``call`` made, or None (not a recorded protocol, or not JSON)."""
    if call.protocol is None:
        return None
    try:
        return parse_request(call.protocol, _decode(call.body), call.path)
    except msgspec.DecodeError:
        return None


def exchange_steps(call: Call, parsed: ParsedRequest
                   ) -> Generator[None, None, tuple[Exchange, bool]]:
    """The exchange to record for ``call``, and whether the upstream's reply held an error
    event (a stream that said ``error``), in steps: a streamed reply is parsed
    :data:`STEP_BYTES` at a time, with a ``yield`` after each (see
    :mod:`sesstree.proxy.worker`)."""
    builder = GeminiReply(parsed.position) if parsed.protocol == GEMINI else \
        ReplyBuilder(parsed.protocol)
    error: Any = call.error
    if call.streamed and call.status is not None and call.status < 400:
        gemini = isinstance(builder, GeminiReply)
        parser = GeminiSse() if gemini else SseParser()
        inflate = zlib.decompressobj(47) if call.encoding in ("gzip", "deflate") else None
        done = 0
        # Chunk by chunk, as they came: no copy of the whole reply.
        for chunk in call.chunks:
            if inflate is not None:
                chunk = inflate.decompress(chunk)  # a cut stream ends mid-block: what passed
            for event, text in parser.feed(chunk):
                builder.feed_event(event, text)
            done += len(chunk)
            if done >= STEP_BYTES:
                done = 0
                yield
        if gemini:  # the SDK takes the event the body ends in, closed by a blank line or not
            for event, text in parser.end():
                builder.feed_event(event, text)
    else:
        data = b"".join(call.chunks)
        if call.encoding in ("gzip", "deflate") and data:
            # A cut reply ends mid-block: what could be inflated is what passed.
            data = zlib.decompressobj(47).decompress(data)
        if data:
            try:
                value = _decode(data)
            except msgspec.DecodeError:
                if isinstance(builder, GeminiReply) and (call.status or 0) < 400:
                    # A stream sent as one JSON array, cut: the chunks that had passed.
                    builder.feed_partial(data)
                # Redacted whole before it is cut: a key across the cut would leave its first
                # part behind.
                value = redact(data.decode("utf-8", "replace"), call.secrets)[:4000]
            if call.status is not None and call.status >= 400:
                error = value
            else:
                builder.feed_json(value)
        elif call.status is not None and call.status >= 400 and error is None:
            error = ""
    streamed_error = builder.error is not None
    if streamed_error:
        error = builder.error
    return Exchange(parsed, builder.result(), call.status, call.session, error, call.cut_by,
                    call.secrets), streamed_error


def exchange_of(call: Call, parsed: ParsedRequest) -> tuple[Exchange, bool]:
    """:func:`exchange_steps` run to its end at once."""
    steps = exchange_steps(call, parsed)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: tuple[Exchange, bool] = done.value
            return result
