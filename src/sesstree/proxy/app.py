"""The proxy as an ASGI application: forward every request, record the model calls.

Every request goes to the upstream with its method, path, query, headers and body as the
client sent them (less the hop-by-hop headers and ``X-Sess-Session``, header values trimmed;
the path and query joined to the upstream URL's, see :mod:`sesstree.proxy.upstream`); the
upstream's status, headers and body come back as they are, streamed. Requests of a recorded
protocol (see :mod:`sesstree.proxy.protocols`) are recorded once their reply has passed, on
one recorder thread, so a slow store never delays a reply, and a recording failure never
fails one: it is logged and counted.

``GET /_sess/stats`` answers the proxy's counters as JSON instead of being forwarded.
"""

from __future__ import annotations

import itertools
import socket
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import InvalidRefNameError, SesstreeError
from ..fmt import printable
from ..node import check_ref_name
from ..repo import Store
from .protocols import ANTHROPIC, ParsedRequest, parse_request, protocol_of
from .recorder import Exchange, Outcome, Recorder, Stats, redact
from .relay import Relay
from .replies import ReplyBuilder, SseParser
from .upstream import Upstream, header_secrets, query_secrets, strip_header_values

__all__ = ["Proxy", "create_app", "safe_url"]

SESSION_HEADER = "x-sess-session"
_SESSION_KEY = SESSION_HEADER.encode()
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                  b"te", b"trailer", b"upgrade", b"host", b"content-length",
                  SESSION_HEADER.encode()})
_DECODABLE = ("gzip", "deflate", "identity")
_POOLS = 8
_decode = msgspec.json.decode


def safe_url(url: str | httpx.URL) -> str:
    """A URL fit for a log line: no credentials, no query (either may hold a key)."""
    u = httpx.URL(str(url))
    port = f":{u.port}" if u.port is not None else ""
    return f"{u.scheme}://{u.host}{port}{u.path}"


def _accept_encoding(value: str | None) -> str:
    # Only encodings the recorder can read back are offered: a reply in another one would
    # pass through but could not be recorded.
    if not value:
        return "identity"
    kept = [p.strip() for p in value.split(",")
            if p.split(";")[0].strip().lower() in _DECODABLE]
    return ", ".join(kept) or "identity"


def _session_name(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The session the client names in ``X-Sess-Session``, or None.

    Raises:
        ValueError: the name is not UTF-8, not a valid session name, or given twice over.
    """
    values = {v for k, v in headers if k.lower() == _SESSION_KEY}
    if not values:
        return None
    if len(values) > 1:
        raise ValueError("given more than once, with different names")
    try:
        # Decoded as UTF-8, not as the latin-1 of HTTP's history: names are UTF-8 text.
        name = values.pop().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        return check_ref_name(name)
    except InvalidRefNameError as exc:
        raise ValueError(str(exc)) from None


def _error_body(protocol: str | None, message: str) -> dict[str, Any]:
    if protocol == ANTHROPIC:
        return {"type": "error", "error": {"type": "api_error", "message": message}}
    return {"error": {"message": message, "type": "proxy_error", "code": None}}


def _tokens(usage: Any) -> str:
    if not isinstance(usage, dict):
        return "no usage"
    inp = usage.get("prompt_tokens", usage.get("input_tokens"))
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    return f"tokens {inp} in/{out} out"


class Proxy:
    """One proxy: its upstream, connection pools, recorder and counters."""

    def __init__(self, store: Store, upstream: str, *, timeout: float = 600.0,
                 log: Callable[[str], None] | None = None, quiet: bool = False) -> None:
        self.upstream = httpx.URL(upstream)
        self._target = Upstream(self.upstream)
        # Credentials and query values in the upstream URL are secrets too: never in a record
        # or a line.
        self._url_secrets = self._target.secrets
        self.timeout = timeout
        self.stats = Stats()
        self.recorder = Recorder(store, self.stats)
        #: Where the start-up line and the counters at exit go.
        self.report = log if log is not None else _stderr
        #: Where the line per request goes.
        self.log = (lambda line: None) if quiet else self.report
        self._pools: list[httpx.AsyncHTTPTransport] = []
        self._timeout = {"connect": min(timeout, 10.0), "read": timeout, "write": timeout,
                         "pool": timeout}
        self._turn = itertools.count()
        self._worker: ThreadPoolExecutor | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the upstream connection pools and the recorder thread; index the store."""
        # The transport alone: a proxy wants none of the client's redirects, cookies, auth or
        # default headers, and skipping them is a third of the cost of a forwarded call.
        # Several small pools rather than one large: a pool checks every idle connection it
        # holds on each request (a system call each), so with 32 clients one pool costs a
        # millisecond a call.
        self._pools = [httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=16),
            # Without TCP_NODELAY a request's headers and body, written apart, wait on the
            # upstream's delayed ACK: 40 ms added to every call.
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            for _ in range(_POOLS)]
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="sess-proxy-recorder")
        self._worker.submit(self._index).result()

    def _index(self) -> None:
        started = time.perf_counter()
        try:
            self.recorder.index.refresh()
        except SesstreeError as exc:
            self.report(printable(f"sess proxy: could not read the store: {exc}"))
            return
        ms = (time.perf_counter() - started) * 1000
        self.report(f"sess proxy: {len(self.recorder.index.heads)} sessions, "
                    f"{len(self.recorder.index.states)} nodes indexed in {ms:.0f} ms")

    async def stop(self) -> None:
        """Finish the recordings in flight, close the connections, report the counters."""
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        for pool in self._pools:
            await pool.aclose()
        self._pools = []
        self.report("sess proxy: " + self.stats.line())

    def flush(self) -> None:
        """Wait until every recording submitted so far is written (for tests and benches)."""
        if self._worker is not None:
            self._worker.submit(lambda: None).result()

    # -- requests ----------------------------------------------------------------------------

    async def stats_endpoint(self, request: Request) -> Response:
        """The counters, as JSON."""
        return JSONResponse(self.stats.snapshot())

    async def forward(self, request: Request) -> Response | Relay:
        """Forward one request, and record it if it is a model call.

        Nothing is parsed on the way: the request body and the reply's chunks are handed to
        the recorder thread as bytes once the reply has passed, so recording adds no work
        between a chunk's arrival and its relay.
        """
        started = time.perf_counter()
        self.stats.add("requests")
        assert self._pools, "the proxy was not started"
        path = request.url.path
        try:
            body = await request.body()
        except ClientDisconnect:
            # Nothing to forward, nobody to answer: one line, no traceback.
            self.log(printable(f"{request.method} {path}: the client went away before its "
                               "request was read (not forwarded)"))
            return Response(status_code=400)
        call = _Call(request.method, path, protocol_of(request.method, path), body, started)
        raw_headers = strip_header_values(request.headers.raw)
        query = request.scope.get("query_string") or b""
        call.secrets = sorted({*header_secrets(raw_headers), *query_secrets(query),
                               *self._url_secrets}, key=len, reverse=True)
        try:
            call.session = _session_name(raw_headers)
        except ValueError as exc:
            return JSONResponse(_error_body(call.protocol, f"sess proxy: X-Sess-Session: {exc}"),
                                status_code=400)
        headers = [(k, v) for k, v in raw_headers if k.lower() not in _HOP
                   and k.lower() != b"accept-encoding"]
        headers.append((b"accept-encoding",
                        _accept_encoding(request.headers.get("accept-encoding")).encode()))
        if self._target.authorization is not None and not any(
                k.lower() == b"authorization" for k, _ in headers):
            headers.append((b"authorization", self._target.authorization))
        url = self._target.url_for(request.scope.get("raw_path") or path.encode(), query)
        try:
            pool = self._pools[next(self._turn) % len(self._pools)]
            upstream = await pool.handle_async_request(httpx.Request(
                request.method, url, headers=headers, content=body,
                extensions={"timeout": self._timeout}))
        except httpx.HTTPError as exc:
            call.status = 504 if isinstance(exc, httpx.TimeoutException) else 502
            reason = redact(f"{type(exc).__name__}: {exc}", call.secrets)
            message = f"sess proxy: upstream {safe_url(self.upstream)} unreachable ({reason})"
            call.error = message
            self.stats.add("upstream_errors")
            self._submit(call)
            return JSONResponse(_error_body(call.protocol, message), status_code=call.status)
        call.status = upstream.status_code
        if call.status >= 400:
            self.stats.add("upstream_errors")
        call.encoding = upstream.headers.get("content-encoding", "identity").lower()
        call.streamed = "text/event-stream" in upstream.headers.get("content-type", "")
        headers_out = [(k.lower(), v) for k, v in upstream.headers.raw
                       if k.lower() not in _HOP or k.lower() == b"content-length"]

        def on_end(cut: str | None) -> None:
            call.cut_by = cut
            self._submit(call)

        return Relay(upstream, headers_out, call.chunks.append if call.protocol else None,
                     on_end)

    def _submit(self, call: _Call) -> None:
        call.ms = (time.perf_counter() - call.started) * 1000
        try:
            if self._worker is None:
                raise RuntimeError("not started")
            self._worker.submit(self._record, call)
        except RuntimeError:
            # A reply that ends while the proxy shuts down (a stream cut at the end of the
            # grace period): the recorder has stopped taking work.
            self.stats.add("record_failures")
            self._say(call, f"{call.where}: not recorded: the proxy is stopping")

    def _record(self, call: _Call) -> None:
        """On the recorder thread: parse what passed, and record it."""
        exchange = None
        try:
            exchange = self._exchange(call)
            if exchange is None:
                return
            outcome: Outcome = self.recorder.record(exchange)
        except Exception as exc:  # never let a recording failure reach the client
            self.stats.add("record_failures")
            self._say(call, f"{call.where}: recording failed: {type(exc).__name__}: {exc}")
            return
        cut = f", cut by the {call.cut_by}" if call.cut_by else ""
        self._say(call,
                  f"{call.where} -> {outcome.session} ({outcome.kind}) +{outcome.new_nodes} "
                  f"nodes, {outcome.dedup} re-sent, {_tokens(exchange.reply.usage)}, "
                  f"{call.ms:.0f} ms{cut}")

    def _say(self, call: _Call, line: str) -> None:
        """Log a line about ``call``, its secrets redacted (a session is named after the
        first words of a message, lower-cased: so are the secrets looked for)."""
        secrets = sorted({*call.secrets, *(s.lower() for s in call.secrets)}, key=len,
                         reverse=True)
        self.log(printable(redact(line, secrets)))

    def _exchange(self, call: _Call) -> Exchange | None:
        """The exchange to record, or None (after logging why) for one that is not recorded."""
        parsed: ParsedRequest | None = None
        if call.protocol is not None:
            try:
                parsed = parse_request(call.protocol, _decode(call.body))
            except msgspec.DecodeError:
                parsed = None
        if parsed is None:
            self.stats.add("passed_through")
            tail = f", cut by the {call.cut_by}" if call.cut_by else ""
            self._say(call, f"{call.where} (not recorded{tail}) {call.ms:.0f} ms")
            return None
        if call.encoding not in _DECODABLE:
            self.stats.add("record_failures")
            self._say(call, f"{call.where}: not recorded (content encoding {call.encoding})")
            return None
        data = b"".join(call.chunks)
        if call.encoding in ("gzip", "deflate") and data:
            # A cut stream ends mid-block: what could be inflated is what passed.
            data = zlib.decompressobj(47).decompress(data)
        builder = ReplyBuilder(parsed.protocol)
        error: Any = call.error
        if call.streamed and call.status is not None and call.status < 400:
            for event, text in SseParser().feed(data):
                builder.feed_event(event, text)
        elif data:
            try:
                value = _decode(data)
            except msgspec.DecodeError:
                # Redacted whole before it is cut: a key across the cut would leave its
                # first part behind.
                value = redact(data.decode("utf-8", "replace"), call.secrets)[:4000]
            if call.status is not None and call.status >= 400:
                error = value
            else:
                builder.feed_json(value)
        elif call.status is not None and call.status >= 400 and error is None:
            error = ""
        if builder.error is not None:
            error = builder.error
            self.stats.add("upstream_errors")
        return Exchange(parsed, builder.result(), call.status, call.session, error,
                        call.cut_by, call.secrets)


class _Call:
    """What passed through for one request, handed to the recorder thread."""

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
        return f"{self.method} {self.path} {self.status}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def create_app(store: Store, upstream: str, *, timeout: float = 600.0,
               log: Callable[[str], None] | None = None, quiet: bool = False
               ) -> tuple[Starlette, Proxy]:
    """The proxy's ASGI application and its :class:`Proxy` (counters, ``flush``).

    Lines go to ``log`` (default: standard error); ``quiet`` keeps only the start-up line and
    the counters at exit. The store is used from the proxy's recorder thread only.
    """
    proxy = Proxy(store, upstream, timeout=timeout, log=log, quiet=quiet)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await proxy.start()
        try:
            yield
        finally:
            await proxy.stop()

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[
        Route("/_sess/stats", proxy.stats_endpoint, methods=["GET"]),
        Route("/{path:path}", proxy.forward, methods=methods),
    ], lifespan=lifespan)
    return app, proxy
