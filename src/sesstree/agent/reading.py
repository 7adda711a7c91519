"""Reading one answer off the wire: Server-Sent Events, or the JSON body some servers send
instead, and deciding whether what arrived is a whole reply.

Shared by the sync and async paths of :class:`~sesstree.agent.provider.OpenAIProvider`, which
only differ in how they get the lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import ProviderError
from ..fmt import plural
from .redact import Redactor, one_line
from .wire import Completion, Delta, StreamAssembler, normalise_completion

__all__ = ["Retry", "StreamReading", "decode_completion", "is_event_stream", "seconds"]


class Retry(Exception):
    """Internal: this attempt failed in a way worth another try.

    ``cut`` is set when the failure was a stream cut before its reply was whole (closed, broken
    off, or stalled after part of the reply): how many chunks (``data:`` events) had arrived.
    """

    def __init__(self, message: str, status: int | None, after: float | None = None, *,
                 cut: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.after = after
        self.cut = cut


def is_event_stream(headers: Any) -> bool:
    """Whether a response says it is a stream, or may be one (no or an unknown type).

    A server that ignores ``"stream": true`` answers ``application/json``: that body is one
    whole ``chat.completion`` and is read as such.
    """
    kind = str(headers.get("content-type") or "").lower()
    return "json" not in kind


def decode_completion(text: str, redactor: Redactor, where: str) -> Completion:
    """A ``chat.completion`` body, scrubbed of secrets, normalised. ``where`` says who sent
    it, for messages: ``"<url> answered 200"``.

    Raises:
        ProviderError: not JSON, an error body, or no usable choice.
    """
    text = redactor.text(text)
    try:
        body = json.loads(text)
    except ValueError:
        raise ProviderError(f"{where} with a body that is not JSON: {one_line(text)}") from None
    try:
        return normalise_completion(redactor.value(body))
    except ProviderError as exc:
        raise ProviderError(f"{where} with {exc}") from None


class StreamReading:
    """One streamed answer being read, line by line.

    Only ``data:`` lines carry events; comments, ``event:``/``id:`` lines and blank lines are
    framing. Any other line is kept: if no event came at all, those lines may be a JSON answer
    from a server that ignored ``"stream": true`` and sent no content type saying so.
    """

    def __init__(
        self, url: str, status: int, redactor: Redactor,
        on_delta: Callable[[Delta], None] | None,
    ) -> None:
        self.url = url
        self.where = f"{url} answered {status}"
        self.redactor = redactor
        self.assembler = StreamAssembler(on_delta, redactor)
        self._other: list[str] = []

    def whole(self, text: str) -> Completion:
        """The reply from a body read whole because it was labelled JSON: a ``chat.completion``,
        or (a proxy that mislabels its stream) Server-Sent Events after all."""
        if not text.lstrip().startswith("data:"):
            return decode_completion(text, self.redactor, self.where)
        for line in text.splitlines():
            if self.line(line):
                break
        return self.finish()

    def line(self, line: str) -> bool:
        """Take one line; True when the stream said it is done (``[DONE]``)."""
        if not line.startswith("data:"):
            if line.strip() and not line.startswith((":", "event:", "id:", "retry:")):
                self._other.append(line)
            return False
        payload = self.redactor.text(line[5:].strip())
        if not payload:
            return False
        if payload == "[DONE]":
            self.assembler.done = True
            return True
        try:
            event = json.loads(payload)
        except ValueError:
            raise ProviderError(
                f"the stream from {self.url} sent an event that is not JSON: {one_line(payload)}"
            ) from None
        try:
            self.assembler.feed(self.redactor.value(event))
        except ProviderError as exc:
            raise ProviderError(f"the stream from {self.url} sent {exc}") from None
        return False

    def finish(self) -> Completion:
        """The reply, once the body has ended.

        Raises:
            Retry: the body ended without ``finish_reason`` or ``[DONE]`` (a cut stream, with
                ``cut`` set): the request is sent again, and what arrived of this reply is
                recorded as an incomplete step, never taken for the reply.
            ProviderError: the body was not a stream and not a JSON answer either.
        """
        assembler = self.assembler
        if assembler.events == 0 and not assembler.done and self._other:
            return decode_completion("\n".join(self._other), self.redactor, self.where)
        if assembler.complete:
            return assembler.finish()
        raise Retry(f"the stream from {self.url} ended without a finish_reason or [DONE] "
                    f"after {plural(assembler.events, 'event')}", None, cut=assembler.events)

    def broken(self, exc: Exception, read_timeout: float | None, raise_with: str = "timeout="
               ) -> Exception:
        """What to raise when reading the body failed with an httpx error ``exc``;
        ``raise_with`` is how the message says to raise the read timeout."""
        import httpx

        assembler = self.assembler
        if isinstance(exc, httpx.ReadTimeout):
            what = (f"the stream from {self.url} stalled: nothing for "
                    f"{seconds(read_timeout)} after {plural(assembler.events, 'event')} "
                    "(the read timeout, which applies between chunks; raise it with "
                    f"{raise_with})")
        else:
            detail = self.redactor.text(str(exc)) or type(exc).__name__
            what = f"the stream from {self.url} broke off ({type(exc).__name__}: {detail})"
        if isinstance(exc, httpx.ReadTimeout) and not assembler.received:
            # Still waiting for the reply to start: the server has the request and may be
            # working on it (a long prompt on a CPU server); a second request starts over.
            return ProviderError(what)
        # The stream was cut: a network error, or a stall in the middle of the reply (the
        # server stopped sending). What arrived is recorded as an incomplete step.
        return Retry(what, None, cut=assembler.events)


def seconds(value: float | None) -> str:
    """``0.2 s``, ``600 s``."""
    if value is None:
        return "ever"
    return f"{value:g} s"

