"""Talking to an OpenAI-compatible ``/chat/completions`` endpoint over httpx, sync and async.

The provider knows HTTP, retries and the wire format; it knows nothing of the store. The loop
hands it the session's sending view and gets a :class:`~sesstree.agent.wire.Completion` back.
Reading the reply off the wire is in :mod:`~sesstree.agent.reading`; scrubbing secrets and
flattening error bodies in :mod:`~sesstree.agent.redact`.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..errors import IncompleteReplyError, ProviderError
from ..fmt import plural
from .reading import Retry, StreamReading, is_event_stream, seconds
from .redact import Redactor, scrub_http_logs, secret_header_values, shown_url
from .wire import Completion, Delta, error_message
from .wire import request_message as _request_message

if TYPE_CHECKING:
    # httpx is imported when the first request is made, not with sesstree: it costs more
    # than the rest of the package to import, and most ``sess`` commands never use it.
    import httpx

    from .transport import Borrowed

__all__ = ["NullContent", "OpenAIProvider", "Provider", "RetryNotice"]

#: Statuses worth another try: a timeout or conflict, rate limited, or the server (or a
#: proxy in front) failed. Every other 4xx says the request itself is wrong: sending it again
#: gets the same answer, so it is not retried.
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})

NullContent = Literal["null", "empty", "omit"]
"""How an assistant message with tool calls and no text is sent: ``content: null`` (OpenAI's
form), ``content: ""`` (llama-cpp-python's server and some llama.cpp builds need it), or no
``content`` key at all."""

#: How error messages name the settings that fix what they report (``OpenAIProvider.advice``).
ADVICE = {"timeout": "timeout=", "null_content": 'null_content="empty"'}


class RetryNotice(Protocol):
    """Called before each retry, with the attempt that failed (from 1), its HTTP status (None
    for a network error or a cut stream) and a message saying what failed.

    A provider may also say ``delay`` (seconds until the next attempt), ``attempts`` (how many
    it makes at most) and ``cut``: set when the attempt was a stream cut before its reply was
    whole, how many chunks had arrived (the chunks handed to ``on_delta`` since the last
    notice belong to that cut attempt, not to the reply).
    """

    def __call__(self, attempt: int, status: int | None, message: str, *,
                 delay: float | None = None, attempts: int | None = None,
                 cut: int | None = None) -> None: ...


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


class OpenAIProvider:
    """Any OpenAI-compatible chat-completions endpoint: OpenAI, Ollama, LM Studio, vLLM, a proxy.

    ``api_key`` is taken from the argument, else from the environment variable ``api_key_env``
    (default ``OPENAI_API_KEY``); without one no ``Authorization`` header is sent (local
    servers ignore it). The key lives only in this object: it is never recorded, it is masked
    in its ``repr``, and it (with every credential-looking value in ``headers``) is scrubbed
    from everything the server sends back before it is parsed, recorded or shown: servers and
    proxies echo keys back, in error bodies and elsewhere.

    Requests that fail with 408, 409, 429, a 5xx, a connection error or a connect timeout
    are retried up to ``max_retries`` times with exponential backoff from ``backoff`` seconds,
    capped at ``max_backoff``; a ``Retry-After`` header (seconds or an HTTP date) is honoured,
    up to ``max_backoff``. Other 4xx answers say the request itself is invalid and are not
    retried; nor is a read timeout (the server has the request and is still on it, or stuck:
    asking again starts the work over, behind the first). A stream cut before its reply is
    whole (it ends with no ``finish_reason``, ``[DONE]`` or error; the connection breaks; it
    stalls past the read timeout after part of the reply) is retried the same way, with the
    same request, sharing the same ``max_retries``; ``on_retry`` says it was a cut.

    ``timeout`` is the read (and write) timeout in seconds: how long to wait for the reply to
    start and, when streaming, between two chunks, never for the whole reply. It may also be an
    ``httpx.Timeout``. ``connect_timeout`` (default: ``timeout``) bounds making the connection.
    ``null_content`` is how an assistant message that has tool calls and no text is sent (see
    :data:`NullContent`). ``extra_body`` is merged into every request (``temperature``,
    ``tool_choice``, ...). ``stream`` is the default for :class:`~sesstree.Agent`.

    ``advice`` maps ``"timeout"`` and ``"null_content"`` to how error messages tell the user
    to change that setting: by default the parameter (``timeout=``); ``sess run`` puts its
    options there (``--timeout``), so that its user reads the words they can type.

    ``transport`` is an httpx transport that carries every request instead of one the
    provider opens (an ``httpx.MockTransport`` in tests, a transport with its own TLS or
    proxy settings): ``complete`` needs an ``httpx.BaseTransport``, ``acomplete`` an
    ``httpx.AsyncBaseTransport`` (``httpx.MockTransport`` is both). Nothing else changes:
    timeouts, headers, retries, streaming and the scrubbing of secrets work as without it.
    The provider never closes a transport it is given; whoever made it does.
    """

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float | httpx.Timeout = 60.0,
        connect_timeout: float | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        stream: bool = False,
        stream_usage: bool = True,
        null_content: NullContent = "null",
        extra_body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if null_content not in ("null", "empty", "omit"):
            raise ValueError(f"null_content must be 'null', 'empty' or 'omit', not {null_content!r}")
        self.base_url = base_url.rstrip("/")
        self.url = _endpoint(self.base_url)
        #: The URL as messages show it: a password or key in it (``https://user:pw@host``,
        #: ``?key=...``) is a credential, replaced by ``***``.
        self.shown_url, self._url_secrets = shown_url(self.url)
        self.model = model
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env) or None
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.stream = stream
        self.stream_usage = stream_usage
        self.null_content: NullContent = null_content
        self.extra_body = dict(extra_body or {})
        self.headers = dict(headers or {})
        self.transport = transport
        self.advice: dict[str, str] = dict(ADVICE)
        self._client: httpx.Client | None = None
        self._redactor_for: tuple[str | None, ...] | None = None
        self._redactor_cache = Redactor()
        scrub_http_logs(self)

    def __repr__(self) -> str:
        key = "***" if self._api_key else None
        base_url = shown_url(self.base_url)[0]
        return f"OpenAIProvider(base_url={base_url!r}, model={self.model!r}, api_key={key})"

    # -- secrets ------------------------------------------------------------------------------

    @property
    def _redactor(self) -> Redactor:
        # Rebuilt when the key or headers change (both are plain attributes).
        secrets = (self._api_key, *secret_header_values(self._headers()), *self._url_secrets)
        if self._redactor_for != secrets:
            self._redactor_cache = Redactor(secrets)
            self._redactor_for = secrets
        return self._redactor_cache

    def redact(self, text: str) -> str:
        """``text`` with the API key and every credential in ``headers`` replaced by ``***``.

        The loop passes every text it records that did not come through this provider (tool
        results, error messages) through here too.
        """
        return self._redactor.text(text)

    # -- plumbing shared by sync and async ----------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.headers}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _httpx_timeout(self) -> httpx.Timeout:
        import httpx

        if isinstance(self.timeout, httpx.Timeout):
            return self.timeout
        connect = self.timeout if self.connect_timeout is None else self.connect_timeout
        return httpx.Timeout(self.timeout, connect=connect)

    def _body(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], stream: bool
    ) -> dict[str, Any]:
        sent = [_request_message(m) for m in messages]
        if self.null_content != "null":
            sent = [_without_null_content(m, self.null_content) for m in sent]
        body: dict[str, Any] = {"model": self.model, "messages": sent}
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

    def _status_error(
        self, status: int, text: str, headers: httpx.Headers, body: dict[str, Any]
    ) -> Exception:
        text = self._redactor.text(text)
        try:
            detail = error_message(self._redactor.value(json.loads(text)))
        except ValueError:
            detail = error_message(text)
        message = f"{self.shown_url} answered {status}: {detail}"
        if status == 404 and not self.base_url.endswith("/v1"):
            message += " (does the base URL need to end in /v1?)"
        elif (status == 400 or status >= 500) and _sends_null_content(body) and (
            "content" in detail.lower()
        ):
            message += (" (this server may not accept content: null next to tool calls: "
                        f"try {self.advice['null_content']})")
        if status in _RETRY_STATUS:
            return Retry(message, status, _retry_after(headers.get("retry-after")))
        return ProviderError(message, status=status)

    def _transport_error(self, exc: Exception) -> Exception:
        import httpx

        timeout = self._httpx_timeout()
        if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
            shown = shown_url(self.base_url)[0]
            return ProviderError(self.redact(f"cannot use the base URL {shown!r}: {exc}"))
        if isinstance(exc, UnicodeEncodeError):
            # httpx encodes headers as ASCII; the exception's text names no secret, but its
            # .object holds the whole header value, so only its position is passed on.
            return ProviderError("the API key or a header value has a character HTTP headers "
                                 f"cannot carry (non-ASCII at position {exc.start})")
        if isinstance(exc, httpx.ReadTimeout):
            return ProviderError(
                f"{self.shown_url} sent no answer within {seconds(timeout.read)} (the read timeout; "
                f"raise it with {self.advice['timeout']})")
        if isinstance(exc, httpx.ConnectTimeout):
            return Retry(f"could not connect to {self.shown_url} within {seconds(timeout.connect)} "
                         "(the connect timeout)", None)
        kind = type(exc).__name__
        detail = str(exc) or "no detail given"  # an async timeout's text is empty
        return Retry(self.redact(f"{kind} talking to {self.shown_url}: {detail}"), None)

    def _delay(self, attempt: int, failure: Retry) -> float:
        if failure.after is not None:
            return min(failure.after, self.max_backoff)
        # Full jitter keeps many clients that failed together from retrying together.
        ceiling = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))

    def _give_up(self, failure: Retry, cuts: int) -> ProviderError:
        """The error once the retries ran out; ``cuts``: how many attempts were cut streams."""
        total = self.max_retries + 1
        tries = plural(total, "attempt")
        if failure.cut is None:
            cut = f", {cuts} of them cut" if cuts else ""
            return ProviderError(f"{failure} (gave up after {tries}{cut})", status=failure.status)
        cut = "cut" if total == 1 else f"all {total} cut" if cuts == total else f"{cuts} of them cut"
        return IncompleteReplyError(f"{failure}: the reply is incomplete (gave up after {tries}, "
                                    f"{cut})")

    def _notify(self, on_retry: RetryNotice | None, attempt: int, failure: Retry) -> float:
        """Say a retry is coming (``on_retry``); return how long to wait for it."""
        delay = self._delay(attempt, failure)
        if on_retry is not None:
            on_retry(attempt, failure.status, str(failure), delay=delay,
                     attempts=self.max_retries + 1, cut=failure.cut)
        return delay

    def _lent_transport(self) -> Borrowed | None:
        if self.transport is None:
            return None  # httpx's own, which the client opens and closes
        from .transport import Borrowed

        return Borrowed(self.transport)

    # -- sync ---------------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self._httpx_timeout(),
                                        transport=self._lent_transport())
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
            IncompleteReplyError: the retries ran out, the last attempt a stream cut before
                its reply was whole.
            ProviderError: the server refused, failed after every retry, or answered garbage.
        """
        body = self._body(messages, tools, stream)
        attempt = cuts = 0
        while True:
            attempt += 1
            try:
                return self._attempt(body, stream, on_delta)
            except Retry as failure:
                cuts += failure.cut is not None
                if attempt > self.max_retries:
                    raise self._give_up(failure, cuts) from None
                time.sleep(self._notify(on_retry, attempt, failure))

    def _attempt(
        self, body: dict[str, Any], stream: bool, on_delta: Callable[[Delta], None] | None
    ) -> Completion:
        import httpx

        client = self._sync_client()
        # Failures are raised after the except blocks, not in them: httpx's exception quotes
        # what the server sent (an echoed key, say), and must not ride along as __context__.
        failure: Exception
        try:
            with client.stream("POST", self.url, json=body, headers=self._headers()) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._status_error(
                        response.status_code, response.text, response.headers, body
                    )
                reading = StreamReading(self.shown_url, response.status_code, self._redactor, on_delta)
                if not stream or not is_event_stream(response.headers):
                    response.read()
                    return reading.whole(response.text)
                try:
                    for line in response.iter_lines():
                        if reading.line(line):
                            break
                except httpx.HTTPError as exc:
                    failure = reading.broken(exc, self._httpx_timeout().read,
                                             self.advice["timeout"])
                else:
                    return reading.finish()
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeEncodeError) as exc:
            failure = self._transport_error(exc)
        raise failure

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
        attempt = cuts = 0
        # One client per call: an httpx.AsyncClient is bound to the event loop that made it,
        # and users run agents from several loops (asyncio.run per day of a quest).
        async with httpx.AsyncClient(timeout=self._httpx_timeout(),
                                     transport=self._lent_transport()) as client:
            while True:
                attempt += 1
                try:
                    return await self._aattempt(client, body, stream, on_delta)
                except Retry as failure:
                    cuts += failure.cut is not None
                    if attempt > self.max_retries:
                        raise self._give_up(failure, cuts) from None
                    await asyncio.sleep(self._notify(on_retry, attempt, failure))

    async def _aattempt(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        stream: bool,
        on_delta: Callable[[Delta], None] | None,
    ) -> Completion:
        import httpx

        failure: Exception  # raised outside the except blocks, as in _attempt
        try:
            async with client.stream(
                "POST", self.url, json=body, headers=self._headers()
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(
                        response.status_code, response.text, response.headers, body
                    )
                reading = StreamReading(self.shown_url, response.status_code, self._redactor, on_delta)
                if not stream or not is_event_stream(response.headers):
                    await response.aread()
                    return reading.whole(response.text)
                try:
                    async for line in response.aiter_lines():
                        if reading.line(line):
                            break
                except httpx.HTTPError as exc:
                    failure = reading.broken(exc, self._httpx_timeout().read,
                                             self.advice["timeout"])
                else:
                    return reading.finish()
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeEncodeError) as exc:
            failure = self._transport_error(exc)
        raise failure


def _endpoint(base_url: str) -> str:
    # The path gets /chat/completions; a query (Azure's ?api-version=...) stays after it.
    import urllib.parse

    parts = urllib.parse.urlsplit(base_url)
    if not parts.query:
        return base_url + "/chat/completions"
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/chat/completions"))


def _sends_null_content(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("role") == "assistant" and "content" in m
        and m["content"] is None for m in messages
    )


def _without_null_content(message: dict[str, Any], mode: NullContent) -> dict[str, Any]:
    if message.get("role") != "assistant" or message.get("content", "") is not None:
        return message
    out = dict(message)
    if mode == "empty":
        out["content"] = ""
    else:
        del out["content"]
    return out


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


