"""Talking to an OpenAI-compatible ``/chat/completions`` endpoint over httpx, sync and async.

The provider knows HTTP, retries and the wire format; it knows nothing of the store. The loop
hands it the derived messages and gets a :class:`~sesstree.agent.wire.Completion` back.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ProviderError
from .wire import Completion, Delta, StreamAssembler, error_message, normalise_completion
from .wire import request_message as _request_message

if TYPE_CHECKING:
    # httpx is imported when the first request is made, not with sesstree: it costs more
    # than the rest of the package to import, and most ``sess`` commands never use it.
    import httpx

__all__ = ["OpenAIProvider", "Provider", "RetryNotice"]

#: Statuses worth another try: rate limited, or the server (or a proxy in front) failed.
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})

RetryNotice = Callable[[int, "int | None", str], None]
"""Called before each retry with ``(attempt, status or None, message)``."""


class Provider(Protocol):
    """What the loop needs from a model endpoint. :class:`OpenAIProvider` is the one shipped."""

    model: str

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        stream: bool = False,
        on_delta: Callable[[Delta], None] | None = None,
        on_retry: RetryNotice | None = None,
    ) -> Completion:
        """One model call; raise ProviderError when it cannot be made."""
        ...

    async def acomplete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        stream: bool = False,
        on_delta: Callable[[Delta], None] | None = None,
        on_retry: RetryNotice | None = None,
    ) -> Completion:
        """The same call, for asyncio."""
        ...


class _Retry(Exception):
    """Internal: this attempt failed in a way worth retrying."""

    def __init__(self, message: str, status: int | None, after: float | None) -> None:
        super().__init__(message)
        self.status = status
        self.after = after


class OpenAIProvider:
    """Any OpenAI-compatible chat-completions endpoint: OpenAI, Ollama, LM Studio, vLLM, a proxy.

    ``api_key`` is taken from the argument, else from the environment variable ``api_key_env``
    (default ``OPENAI_API_KEY``); without one no ``Authorization`` header is sent (local
    servers ignore it). The key lives only in this object: it is never recorded, it is masked
    in its ``repr`` and removed from every error message (servers echo bad keys back).

    Requests that fail with 429, a 5xx or a connection error are retried up to
    ``max_retries`` times with exponential backoff from ``backoff`` seconds, capped at
    ``max_backoff``; a ``Retry-After`` header (seconds or an HTTP date) is honoured, up to
    ``max_backoff``. ``timeout`` is httpx's: seconds per connect/read/write, or an
    ``httpx.Timeout``. ``extra_body`` is merged into every request (``temperature``,
    ``tool_choice``, ...). ``stream`` is the default for :class:`~sesstree.Agent`.
    """

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        stream: bool = False,
        stream_usage: bool = True,
        extra_body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env) or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.stream = stream
        self.stream_usage = stream_usage
        self.extra_body = dict(extra_body or {})
        self.headers = dict(headers or {})
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        key = "***" if self._api_key else None
        return f"OpenAIProvider(base_url={self.base_url!r}, model={self.model!r}, api_key={key})"

    # -- plumbing shared by sync and async ----------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.headers}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _body(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_request_message(m) for m in messages],
        }
        if tools:
            # No tool_choice: Ollama ignores it and vLLM rejects "auto" unless launched for it;
            # "auto" is every server's default anyway. extra_body can still set one.
            body["tools"] = list(tools)
        if stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "***")
        return text

    def _status_error(self, status: int, text: str, headers: httpx.Headers) -> Exception:
        try:
            detail = error_message(json.loads(text))
        except ValueError:
            detail = error_message(text)
        detail = self._redact(detail)
        message = f"{self.url} answered {status}: {detail}"
        if status == 404 and not self.base_url.endswith("/v1"):
            message += " (does the base URL need to end in /v1?)"
        if status in _RETRY_STATUS:
            return _Retry(message, status, _retry_after(headers.get("retry-after")))
        return ProviderError(message, status=status)

    def _transport_error(self, exc: httpx.HTTPError) -> Exception:
        import httpx

        if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
            return ProviderError(f"cannot use the base URL {self.base_url!r}: {exc}")
        kind = type(exc).__name__
        return _Retry(self._redact(f"{kind} talking to {self.url}: {exc}"), None, None)

    def _delay(self, attempt: int, failure: _Retry) -> float:
        if failure.after is not None:
            return min(failure.after, self.max_backoff)
        # Full jitter keeps many clients that failed together from retrying together.
        ceiling = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))

    def _give_up(self, failure: _Retry) -> ProviderError:
        tries = self.max_retries + 1
        return ProviderError(f"{failure} (gave up after {tries} attempts)", status=failure.status)

    # -- sync ---------------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        return self._client

    def close(self) -> None:
        """Close the pooled sync connection (the async path opens a client per call)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        stream: bool = False,
        on_delta: Callable[[Delta], None] | None = None,
        on_retry: RetryNotice | None = None,
    ) -> Completion:
        """One model call, retried as the class says.

        Raises:
            ProviderError: the server refused, failed after every retry, or answered garbage.
        """
        body = self._body(messages, tools, stream)
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._attempt(body, stream, on_delta)
            except _Retry as failure:
                if attempt > self.max_retries:
                    raise self._give_up(failure) from None
                if on_retry is not None:
                    on_retry(attempt, failure.status, str(failure))
                time.sleep(self._delay(attempt, failure))

    def _attempt(
        self, body: dict[str, Any], stream: bool, on_delta: Callable[[Delta], None] | None
    ) -> Completion:
        import httpx

        client = self._sync_client()
        try:
            with client.stream("POST", self.url, json=body, headers=self._headers()) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._status_error(
                        response.status_code, response.text, response.headers
                    )
                if not stream:
                    response.read()
                    return _decode_completion(response.text)
                assembler = StreamAssembler(on_delta)
                started = False
                try:
                    for payload in _sse_payloads(response.iter_lines()):
                        started = True
                        if payload == "[DONE]":
                            assembler.done = True
                            break
                        assembler.feed(_decode_event(payload))
                except httpx.HTTPError as exc:
                    if not started:
                        raise
                    # Part of the reply is already recorded as chunks; retrying would record
                    # a second, different reply after it. Fail the step instead.
                    raise ProviderError(
                        self._redact(f"the stream from {self.url} broke off: {exc}")
                    ) from None
                return assembler.finish()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None

    # -- async --------------------------------------------------------------------------------

    async def acomplete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        stream: bool = False,
        on_delta: Callable[[Delta], None] | None = None,
        on_retry: RetryNotice | None = None,
    ) -> Completion:
        """The async twin of :meth:`complete`: same requests, retries and results."""
        import asyncio  # lazily, like httpx: `import sesstree` should stay cheap

        import httpx

        body = self._body(messages, tools, stream)
        attempt = 0
        # One client per call: an httpx.AsyncClient is bound to the event loop that made it,
        # and users run agents from several loops (asyncio.run per day of a quest).
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            while True:
                attempt += 1
                try:
                    return await self._aattempt(client, body, stream, on_delta)
                except _Retry as failure:
                    if attempt > self.max_retries:
                        raise self._give_up(failure) from None
                    if on_retry is not None:
                        on_retry(attempt, failure.status, str(failure))
                    await asyncio.sleep(self._delay(attempt, failure))

    async def _aattempt(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        stream: bool,
        on_delta: Callable[[Delta], None] | None,
    ) -> Completion:
        import httpx

        try:
            async with client.stream(
                "POST", self.url, json=body, headers=self._headers()
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(
                        response.status_code, response.text, response.headers
                    )
                if not stream:
                    await response.aread()
                    return _decode_completion(response.text)
                assembler = StreamAssembler(on_delta)
                started = False
                try:
                    async for payload in _asse_payloads(response.aiter_lines()):
                        started = True
                        if payload == "[DONE]":
                            assembler.done = True
                            break
                        assembler.feed(_decode_event(payload))
                except httpx.HTTPError as exc:
                    if not started:
                        raise
                    raise ProviderError(
                        self._redact(f"the stream from {self.url} broke off: {exc}")
                    ) from None
                return assembler.finish()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _decode_completion(text: str) -> Completion:
    try:
        body = json.loads(text)
    except ValueError:
        raise ProviderError(
            f"the server's reply is not JSON: {text.strip()[:200]!r}"
        ) from None
    return normalise_completion(body)


def _decode_event(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        raise ProviderError(f"a stream event is not JSON: {payload[:200]!r}") from None


def _sse_payload(line: str) -> str | None:
    # Only data lines matter; comments (":"), "event:", "id:" and blank lines are framing.
    if line.startswith("data:"):
        return line[5:].strip()
    return None


def _sse_payloads(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        payload = _sse_payload(line)
        if payload:
            yield payload


async def _asse_payloads(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    async for line in lines:
        payload = _sse_payload(line)
        if payload:
            yield payload
