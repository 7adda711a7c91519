"""What wraps every route of a served store: the security headers on every response (404s,
405s, refused hosts and internal errors included), a check of the ``Host`` header against
DNS rebinding, and errors that are one line in the site's frame (or ``{"error": ...}`` under
``/api/``), never a traceback.

DNS rebinding: a page on ``evil.example`` re-points its name at 127.0.0.1 and then reads
``http://evil.example:8765/``, which the browser deems its own origin. The request still says
``Host: evil.example``, so the server answers only the names it is known by: ``localhost``,
``127.0.0.1``, ``[::1]``, the address it was bound to, the local address the connection came in
on (a server bound to ``0.0.0.0`` is reached by the machine's own IP) and any name it was told
(``allowed_hosts``, or ``$SESS_ALLOWED_HOSTS`` for a server behind a reverse proxy).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..hosts import HOSTS_ENV, LOOPBACK_NAMES, header_host, host_name, local_name, served_names
from ..repo.store import Store
from .api import api_routes
from .app import Web, json_error
from .pages import page_routes
from .security import SECURITY_HEADERS
from .throttle import Throttle

__all__ = ["HOSTS_ENV", "LOOPBACK_NAMES", "CatchErrors", "HostCheck", "SecurityHeaders", "build_app",
           "host_name"]

_log = logging.getLogger("sesstree.web")
_RAW_HEADERS = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


class SecurityHeaders:
    """ASGI middleware: the web view's security headers on every HTTP response that lacks them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in _RAW_HEADERS if k not in have]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class CatchErrors:
    """ASGI middleware: an exception a route did not handle becomes ``answer(request, exc)``
    (its traceback goes to the ``sesstree.web`` log), and the connection stays usable. A
    client that went away before its body was read is one line in the log: no one is left
    to answer, and there is no bug to trace."""

    def __init__(self, app: ASGIApp,
                 answer: Callable[[Request, Exception], Awaitable[Response]]) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:
            client = scope.get("client")
            _log.warning("%s %s: the client%s went away before sending its whole request",
                         scope.get("method"), scope.get("path"),
                         f" {client[0]}:{client[1]}" if client else "")
        except Exception as exc:
            if started:  # half an answer is out: only closing the connection can say so
                raise
            _log.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=exc)
            response = await self.answer(Request(scope, receive), exc)
            await response(scope, receive, send)


class HostCheck:
    """ASGI middleware: refuse (400) a request whose ``Host`` is not a name of this server."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(h) for h in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = ""
        for key, value in scope.get("headers", []):
            if key == b"host":
                given = header_host(value.decode("latin-1"))
                break
        local = local_name(scope.get("server"))
        if given and (given in self.allowed or given == local):
            await self.app(scope, receive, send)
            return
        shown = given[:80] or "(none)"
        response = PlainTextResponse(
            f"this server does not answer to the host name {shown!r}: use its address or localhost",
            status_code=400)
        await response(scope, receive, send)


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def build_app(store: Store, *, token: str | None, routes: Sequence[BaseRoute] = (),
              host: str = "127.0.0.1", allowed_hosts: Iterable[str] = (),
              throttle: Throttle | None = None) -> Starlette:
    """A Starlette app serving the web view over ``store`` after ``routes``, with the security
    headers, the ``Host`` check (the loopback names, ``host`` unless it is a wildcard address,
    ``allowed_hosts``, the names in ``$SESS_ALLOWED_HOSTS``) and one-line errors. Wrong tokens
    are counted by ``throttle`` (a new :class:`Throttle` if None): pass the one ``routes``
    count theirs with, so every route shares one count per client."""
    web = Web(store, token, throttle)
    allowed = served_names(host, allowed_hosts)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            message = f"nothing here: {request.url.path[:200]}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path[:200]}"
        else:
            message = " ".join(str(exc.detail).split()).rstrip(".")[:300]
        if _wants_json(request):
            response = json_error(exc.status_code, message)
        else:
            response = web.error_page(request, exc.status_code, message)
        for key, value in (exc.headers or {}).items():  # e.g. a 405's Allow
            response.headers[key] = value
        return response

    async def internal_error(request: Request, exc: Exception) -> Response:
        # The traceback went to the server's log; the client gets one line.
        message = f"internal error ({type(exc).__name__}): the server could not answer this request"
        try:
            if _wants_json(request):
                return json_error(500, message)
            return web.error_page(request, 500, message)
        except Exception:  # the error page itself failed: still one line, still the headers
            _log.exception("rendering the error page failed")
            return PlainTextResponse(message, status_code=500, headers=dict(SECURITY_HEADERS))

    return Starlette(
        routes=[*routes, *api_routes(web), *page_routes(web)],
        middleware=[Middleware(SecurityHeaders), Middleware(HostCheck, allowed=allowed),
                    Middleware(CatchErrors, answer=internal_error)],
        exception_handlers={HTTPException: http_error},
    )
