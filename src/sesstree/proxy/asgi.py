"""The ASGI face of a proxy: its lifespan, the check of who may use it
(:mod:`sesstree.proxy.guard`), ``GET /_sess/stats``, and every other HTTP request handed to
the proxy's ``forward`` (:meth:`sesstree.proxy.app.Proxy.forward`), whatever its method.

The face knows the proxy only as a :class:`Served` (what it calls, nothing more): the proxy
module builds on this one, never the other way.

A plain ASGI callable rather than a routing framework: two routes do not need one, and a
framework's request and response objects per call cost more CPU than the forwarding. The
small helpers the proxy reads a request and answers with are here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from .guard import Guard
from .protocols import ANTHROPIC, GEMINI, protocol_of
from .recorder import Stats

__all__ = ["ProxyApp", "Served", "answer_json", "error_body", "read_body"]

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
_json = msgspec.json.Encoder()


class Served(Protocol):
    """What the ASGI face calls of the proxy it serves (:class:`sesstree.proxy.app.Proxy`)."""

    @property
    def stats(self) -> Stats:
        """The proxy's counters (a refusal is counted)."""
        ...

    async def start(self) -> None:
        """Start serving (lifespan startup)."""

    async def stop(self) -> None:
        """Finish recording and stop (lifespan shutdown)."""

    async def quit(self) -> None:
        """Stop at once (the server was made to quit)."""

    async def stats_endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer ``GET /_sess/stats``."""

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Forward one HTTP request upstream (and record it)."""


#: Google's names for the statuses the proxy answers itself (google.rpc.Code).
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 502: "UNAVAILABLE",
                  503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(protocol: str | None, message: str, status: int | None = None) -> dict[str, Any]:
    """An error reply's body in the shape of ``protocol`` (Anthropic's, Google's with the
    HTTP ``status``, or OpenAI's)."""
    if protocol == GEMINI:
        return {"error": {"code": status, "message": message,
                          "status": _GOOGLE_STATUS.get(status or 0, "UNKNOWN")}}
    if protocol == ANTHROPIC:
        return {"type": "error", "error": {"type": "api_error", "message": message}}
    return {"error": {"message": message, "type": "proxy_error", "code": None}}


async def answer_json(send: Send, status: int, value: Any) -> None:
    """Answer ``value`` as JSON with ``status``."""
    body = _json.encode(value)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def read_body(receive: Receive) -> bytes | None:
    """The request's body, or None if the client left before it was read."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ProxyApp:
    """The ASGI application of one :class:`~sesstree.proxy.app.Proxy`: its lifespan,
    ``GET /_sess/stats``, and every other HTTP request forwarded (whatever its method)."""

    def __init__(self, proxy: Served, guard: Guard | None = None) -> None:
        self.proxy = proxy
        #: Which host names and origins are served (default: the loopback names, no page of
        #: another origin).
        self.guard = guard if guard is not None else Guard()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        kind = scope["type"]
        if kind in ("http", "websocket"):
            refused = self.guard.refusal(scope)
            if refused is not None:
                await self._refuse(scope, receive, send, *refused)
                return
        if kind == "http":
            if scope["path"] == "/_sess/stats" and scope["method"] in ("GET", "HEAD"):
                await self.proxy.stats_endpoint(scope, receive, send)
            else:
                await self.proxy.forward(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":  # not a model API: refused, as a router with no route would
            await receive()
            await send({"type": "websocket.close", "code": 1000})

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int,
                      message: str) -> None:
        """Answer ``status`` with ``message`` (nothing forwarded, nothing recorded)."""
        self.proxy.stats.add("refused")
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        protocol = protocol_of(scope["method"], scope["path"])
        await answer_json(send, status, error_body(protocol, message, status))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            try:
                message = await receive()
            except asyncio.CancelledError:
                # A server made to quit at once (a second Ctrl-C) skips the shutdown and
                # cancels this wait as its loop ends: the calls received are still recorded
                # (or named), and it is no error to print a traceback for.
                await self.proxy.quit()
                return
            if message["type"] == "lifespan.startup":
                try:
                    await self.proxy.start()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.proxy.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
