"""The proxy as an ASGI application: forward every request, record the model calls.

Every request goes to the upstream with its method, path, query, headers and body as the
client sent them (less the hop-by-hop headers and ``X-Sess-Session``, header values trimmed;
the path and query joined to the upstream URL's, see :mod:`sesstree.proxy.upstream`); the
upstream's status, headers and body come back as they are, streamed. Requests of a recorded
protocol (see :mod:`sesstree.proxy.protocols`) are recorded once their reply has passed, on
one recorder thread, so a slow store never delays a reply, and a recording failure never
fails one: it is logged and counted.

``GET /_sess/stats`` answers the proxy's counters as JSON instead of being forwarded.

The application is a plain ASGI callable, and the upstream is reached through httpcore's
connection pool (the transport httpx is built on) over :mod:`sesstree.proxy.netio`: a
forwarded call is the proxy's whole cost, and a routing framework's request and response
objects, or httpx's request, URL and response models, cost more CPU than the forwarding.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import sys
import threading
import time
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx

from ..errors import InvalidRefNameError, SesstreeError
from ..fmt import printable
from ..node import check_ref_name
from ..repo.store import Store
from .asgi import ProxyApp, answer_json, error_body, read_body
from .calls import DECODABLE, Call, exchange_steps, parsed_request
from .guard import Guard
from .netio import LoopBackend
from .protocols import protocol_of
from .recorder import Outcome, Recorder, Stats, redact
from .relay import UPSTREAM_ERRORS, ClientWatch, ProxyStopping, relay
from .upstream import Upstream, header_secrets, query_secrets
from .worker import Job, RecordWorker, ctrl_c_sets

__all__ = ["RECORD_WAIT", "STOP_WAIT", "Proxy", "ProxyApp", "create_app", "safe_url"]

SESSION_HEADER = "x-sess-session"
_SESSION_KEY = SESSION_HEADER.encode()
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                  b"te", b"trailer", b"upgrade", b"host", b"content-length", _SESSION_KEY,
                  b"accept-encoding"})
_KEPT = frozenset({b"content-length"})
_BLANK = b" \t"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_POOLS = 8
#: Seconds a stopping proxy waits for its calls in flight to end, then for the ones it cut.
STOP_WAIT = 1.0
#: Seconds a stopping proxy gives the calls it received to be recorded; those still waiting
#: then are reported, one line each, as not recorded.
RECORD_WAIT = 30.0

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


def safe_url(url: str | httpx.URL) -> str:
    """A URL fit for a log line: no credentials, no query (either may hold a key)."""
    u = httpx.URL(str(url))
    port = f":{u.port}" if u.port is not None else ""
    return f"{u.scheme}://{u.host}{port}{u.path}"


def _accept_encoding(value: bytes | None) -> bytes:
    # Only encodings the recorder can read back are offered: a reply in another one would
    # pass through but could not be recorded.
    if not value:
        return b"identity"
    kept = [p.strip() for p in value.decode("latin-1").split(",")
            if p.split(";")[0].strip().lower() in DECODABLE]
    return ", ".join(kept).encode("latin-1") or b"identity"


def _session_name(values: list[bytes]) -> str | None:
    """The session the client names in ``X-Sess-Session``, or None.

    Raises:
        ValueError: the name is not UTF-8, not a valid session name, or given twice over.
    """
    if not values:
        return None
    if len(set(values)) > 1:
        raise ValueError("given more than once, with different names")
    try:
        # Decoded as UTF-8, not as the latin-1 of HTTP's history: names are UTF-8 text.
        name = values[0].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        return check_ref_name(name)
    except InvalidRefNameError as exc:
        raise ValueError(str(exc)) from None


def _cut(by: str | None) -> str:
    if by is None:
        return ""
    return ", cut by the proxy (stopping)" if by == "proxy" else f", cut by the {by}"


def _unmatched(outcome: Outcome) -> str:
    """What the line says of re-sent messages that did not match the store."""
    if not outcome.unmatched:
        return ""
    where = f" {outcome.diverged_from}" if outcome.diverged_from else " the store"
    return f", {outcome.unmatched} re-sent did not match{where}"


def _tokens(usage: Any) -> str:
    if not isinstance(usage, dict):
        return "no usage"
    # OpenAI chat's names, then Responses' and Anthropic's, then Gemini's usageMetadata
    inp = usage.get("prompt_tokens", usage.get("input_tokens", usage.get("promptTokenCount")))
    out = usage.get("completion_tokens", usage.get("output_tokens",
                                                   usage.get("candidatesTokenCount")))
    return f"tokens {inp} in/{out} out"


class Proxy:
    """One proxy: its upstream, connection pools, recorder and counters."""

    def __init__(self, store: Store, upstream: str, *, timeout: float = 600.0,
                 log: Callable[[str], None] | None = None, quiet: bool = False,
                 record_wait: float | None = None) -> None:
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
        self._quiet = quiet
        #: Where the line per request goes.
        self.log = (lambda line: None) if quiet else self.report
        self._pools: list[httpcore.AsyncConnectionPool] = []
        self._extensions = {"timeout": {"connect": min(timeout, 10.0), "read": timeout,
                                        "write": timeout, "pool": timeout}}
        self._turn = itertools.count()
        self._worker: RecordWorker | None = None
        self._record_wait = RECORD_WAIT if record_wait is None else record_wait
        self._finished = False
        self._inflight: set[asyncio.Task[Any]] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the upstream connection pools and the recorder thread; index the store."""
        # httpcore's pools, as httpx's transport makes them (its TLS context: certifi, and
        # SSL_CERT_FILE/SSL_CERT_DIR when set), without httpx's request and response models
        # around them. Several small pools rather than one large: a pool walks every
        # connection it holds on each request.
        ssl_context = httpx.create_ssl_context()
        backend = LoopBackend()
        self._pools = [httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, max_connections=None, max_keepalive_connections=16,
            keepalive_expiry=5.0, network_backend=backend,
            # Without TCP_NODELAY a request's headers and body, written apart, wait on the
            # upstream's delayed ACK: 40 ms added to every call.
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            for _ in range(_POOLS)]
        self._worker = RecordWorker("sess-proxy-recorder")
        self._worker.call(self._index)

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
        """Finish the calls and recordings in flight, close the connections, report the
        counters.

        A call still in flight (the server cancelled it at the end of its grace period, or
        it is still running) is given :data:`STOP_WAIT` seconds to end, then cut; either way
        it is recorded as cut by the proxy before the recorder stops. Then :meth:`finish`.
        """
        if self._inflight:
            _, running = await asyncio.wait(set(self._inflight), timeout=STOP_WAIT)
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running, timeout=STOP_WAIT)
        for pool in self._pools:
            await pool.aclose()
        self._pools = []
        self.finish()

    async def quit(self) -> None:
        """The server quit without its shutdown (its loop is ending, the calls in flight are
        being cancelled): give those :data:`STOP_WAIT` seconds to be handed to the recorder
        (cut by the proxy), then :meth:`finish`."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=STOP_WAIT)
        self.finish()

    def finish(self) -> None:
        """Record what was received, for up to ``record_wait`` seconds (a Ctrl-C cuts the wait
        short), report each call left unrecorded, and print the counters. Once: a second call
        does nothing.

        Called by :meth:`stop`, or by :meth:`quit` for a server made to quit without its
        shutdown (a second Ctrl-C).
        """
        if self._finished:
            return
        self._finished = True
        if self._inflight:  # a server that quit at once cut them without a word
            n = len(self._inflight)
            self.report(f"sess proxy: {n} call{'s' if n > 1 else ''} still in flight "
                        f"{'were' if n > 1 else 'was'} cut and not recorded")
        worker, self._worker = self._worker, None
        if worker is not None:
            give_up = threading.Event()
            # Taken before the line that offers it is printed: a Ctrl-C right after it counts.
            with ctrl_c_sets(give_up):
                waiting = worker.pending()
                if waiting:
                    self.report(f"sess proxy: stopping: recording the {waiting} call"
                                f"{'s' if waiting > 1 else ''} received (at most "
                                f"{self._record_wait:g} s; Ctrl-C to give up)")
                left, busy = worker.close(self._record_wait, give_up)
            if busy is not None:
                busy.abandon(True)
            for job in left:
                job.abandon(False)
            if left or busy is not None:
                n = len(left) + (busy is not None)
                self.report(f"sess proxy: {n} call{'s' if n > 1 else ''} received "
                            f"{'were' if n > 1 else 'was'} not recorded: the proxy stopped first")
        self.report("sess proxy: " + self.stats.line())
        for line in self.stats.divergence_lines():
            self.report(printable(f"sess proxy: {line}"))

    def flush(self) -> None:
        """Wait until every recording submitted so far is written (for tests and benches)."""
        if self._worker is not None:
            self._worker.wait_idle()

    # -- requests ----------------------------------------------------------------------------

    async def stats_endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The counters, as JSON."""
        await answer_json(send, 200, {**self.stats.snapshot(), "sessions": self.stats.sessions()})

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Forward one request, and record it if it is a model call.

        Nothing is parsed on the way: the request body and the reply's chunks are handed to
        the recorder thread as bytes once the reply has passed, so recording adds no work
        between a chunk's arrival and its relay.

        Raises:
            ProxyStopping: the server stopped the call (it outlived the server's grace
                period); it is recorded as cut by the proxy.
        """
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            await self._forward(scope, receive, send)
        except asyncio.CancelledError:
            # The server cancels what outlives its grace period when it stops: the call ends
            # here (recorded as cut), without the traceback a cancellation would print.
            raise ProxyStopping("the proxy is stopping") from None
        finally:
            self._inflight.discard(task)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        self.stats.add("requests")
        assert self._pools, "the proxy was not started"
        method: str = scope["method"]
        path: str = scope["path"]
        body = await read_body(receive)
        if body is None:
            # Nothing to forward, nobody to answer: one line, no traceback.
            self.log(printable(f"{method} {path}: the client went away before its request "
                               "was read (not forwarded)"))
            return
        call = Call(method, path, protocol_of(method, path), body, started)
        target = self._target
        # One pass over the client's headers: the ones forwarded (values trimmed: spaces
        # around a value are not part of it, RFC 9110 5.5, and the upstream's HTTP stack
        # refuses them), the session named, the encodings accepted.
        headers = [(b"host", target.host_header)]
        if body or method in _BODY_METHODS:
            headers.append((b"content-length", str(len(body)).encode()))
        names: list[bytes] = []
        accept: bytes | None = None
        authorized = False
        for key, value in scope["headers"]:
            key = key.lower()
            if key in _HOP:
                if key == _SESSION_KEY:
                    names.append(value.strip(_BLANK))
                elif key == b"accept-encoding" and accept is None:
                    accept = value
                continue
            if key == b"authorization":
                authorized = True
            headers.append((key, value.strip(_BLANK)))
        query: bytes = scope.get("query_string") or b""
        secrets = header_secrets(headers)
        if query or self._url_secrets:
            secrets = sorted({*secrets, *query_secrets(query), *self._url_secrets}, key=len,
                             reverse=True)
        call.secrets = secrets
        try:
            call.session = _session_name(names)
        except ValueError as exc:
            await answer_json(send, 400, error_body(
                call.protocol, f"sess proxy: X-Sess-Session: {exc}", 400))
            return
        headers.append((b"accept-encoding", _accept_encoding(accept)))
        if target.authorization is not None and not authorized:
            headers.append((b"authorization", target.authorization))
        url = target.url_for(scope.get("raw_path") or path.encode(), query)
        # Watched from now on: a client that leaves while the upstream is still thinking
        # drops the upstream call at once, instead of when its reply's headers come (a model
        # would generate, and bill, the whole reply for nobody).
        watch = ClientWatch(receive)
        try:
            pool = self._pools[next(self._turn) % len(self._pools)]
            upstream = await pool.handle_async_request(httpcore.Request(
                method.encode(), url, headers=headers, content=body,
                extensions=self._extensions))
        except asyncio.CancelledError:
            watch.close()
            left = watch.client_left()
            call.cut_by = watch.cut
            self._submit(call)
            if not left and watch.cut == "proxy":
                # The server is stopping: the client is still there and is told so, in its
                # protocol's shape, rather than with a bare 500.
                await answer_json(send, 503, error_body(
                    call.protocol, "sess proxy: the proxy is stopping", 503))
            elif not left:
                raise
            return
        except UPSTREAM_ERRORS as exc:
            watch.close()
            call.status = 504 if isinstance(exc, httpcore.TimeoutException) else 502
            reason = redact(f"{type(exc).__name__}: {exc}", call.secrets)
            message = f"sess proxy: upstream {safe_url(self.upstream)} unreachable ({reason})"
            call.error = message
            self.stats.add("upstream_errors")
            self._submit(call)
            await answer_json(send, call.status, error_body(call.protocol, message, call.status))
            return
        except BaseException:
            watch.close()
            raise
        call.status = upstream.status
        if call.status >= 400:
            self.stats.add("upstream_errors")
        headers_out = []
        for key, value in upstream.headers:
            key = key.lower()
            if key in _HOP and key not in _KEPT:
                continue
            if key == b"content-encoding":
                call.encoding = value.decode("latin-1").lower()
            elif key == b"content-type":
                call.streamed = b"text/event-stream" in value
            headers_out.append((key, value))

        def on_end(cut: str | None) -> None:
            call.cut_by = cut
            self._submit(call)

        stream = upstream.stream
        assert isinstance(stream, AsyncIterable)  # httpcore's async pool streams its replies
        await relay(watch, send, call.status, headers_out, stream, upstream.aclose,
                    call.chunks.append if call.protocol else None, on_end)

    def _submit(self, call: Call) -> None:
        call.ms = (time.perf_counter() - call.started) * 1000
        try:
            if self._worker is None:
                raise RuntimeError("not started")
            self._worker.submit(Job(self._record(call), lambda busy: self._abandoned(call, busy)))
        except RuntimeError:
            # A reply that ends while the proxy shuts down (a stream cut at the end of the
            # grace period): the recorder has stopped taking work.
            self.stats.add("record_failures")
            # Said even when quiet, like every call a stopping proxy could not record.
            self.report(printable(redact(
                f"sess proxy: {call.where}: not recorded: the proxy stopped first", call.secrets)))

    def _abandoned(self, call: Call, busy: bool) -> None:
        """Say that ``call`` was not recorded: the proxy stopped before its turn came (or,
        ``busy``, in the middle of it)."""
        self.stats.add("record_failures")
        why = ("the proxy stopped while it was being recorded (it may have been written)"
               if busy else "the proxy stopped before its turn came")
        # Always said, even when quiet: it is a call the user expected in the store.
        self.report(printable(redact(f"sess proxy: {call.where}: not recorded: {why}",
                                     call.secrets)))

    def _record(self, call: Call) -> Iterator[None]:
        """On the recorder thread, in steps: parse what passed, and record it."""
        try:
            parsed = parsed_request(call)
            if parsed is None:
                self.stats.add("passed_through")
                if not self._quiet:
                    tail = _cut(call.cut_by)
                    self._say(call, f"{call.where} (not recorded{tail}) {call.ms:.0f} ms")
                return
            if call.encoding not in DECODABLE:
                self.stats.add("record_failures")
                self._say(call, f"{call.where}: not recorded (content encoding "
                                f"{call.encoding})")
                return
            exchange, streamed_error = yield from exchange_steps(call, parsed)
            if streamed_error:
                self.stats.add("upstream_errors")
            outcome: Outcome = self.recorder.record(exchange)
        except Exception as exc:  # never let a recording failure reach the client
            self.stats.add("record_failures")
            self._say(call, f"{call.where}: recording failed: {type(exc).__name__}: {exc}")
            return
        if self._quiet:
            return  # the line would go nowhere: not worth building
        cut = _cut(call.cut_by)
        self._say(call,
                  f"{call.where} -> {outcome.session} ({outcome.kind}) +{outcome.new_nodes} "
                  f"nodes, {outcome.dedup} re-sent{_unmatched(outcome)}, "
                  f"{_tokens(exchange.reply.usage)}, {call.ms:.0f} ms{cut}")

    def _say(self, call: Call, line: str) -> None:
        """Log a line about ``call``, its secrets redacted (a session is named after the
        first words of a message, lower-cased: so are the secrets looked for)."""
        secrets = sorted({*call.secrets, *(s.lower() for s in call.secrets)}, key=len,
                         reverse=True)
        self.log(printable(redact(line, secrets)))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def create_app(store: Store, upstream: str, *, timeout: float = 600.0,
               log: Callable[[str], None] | None = None, quiet: bool = False,
               record_wait: float | None = None, host: str = "127.0.0.1",
               allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()
               ) -> tuple[ProxyApp, Proxy]:
    """The proxy's ASGI application and its :class:`Proxy` (counters, ``flush``).

    Lines go to ``log`` (default: standard error); ``quiet`` keeps only the start-up line and
    the counters at exit. The store is used from the proxy's recorder thread only; a stopping
    proxy gives the calls it received ``record_wait`` seconds to be recorded (default
    :data:`RECORD_WAIT`). It answers requests sent to the loopback names, ``host`` (the
    address it listens on), ``allowed_hosts`` and the names in ``$SESS_ALLOWED_HOSTS``, and
    no web page of another origin than ``allowed_origins`` (see :mod:`sesstree.proxy.guard`).

    Raises:
        ValueError: an allowed origin is not an origin.
    """
    guard = Guard(host, allowed_hosts, allowed_origins)
    proxy = Proxy(store, upstream, timeout=timeout, log=log, quiet=quiet,
                  record_wait=record_wait)
    return ProxyApp(proxy, guard), proxy
