"""Passing one upstream reply to the client, chunk by chunk, and noticing how it ended.

The reply is relayed as the raw bytes the upstream sent (content encoding untouched), each
chunk written to the client as soon as it arrives; the recorder sees a chunk only after the
client was sent it. A client that goes away stops the relay (its ``http.disconnect`` is
watched while the upstream is quiet); an upstream that breaks the stream makes the relay
break the client's connection too (no clean end of body), so the client sees the cut as it
would have without the proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import httpx

__all__ = ["Relay", "UpstreamCut", "quiet_cut_logs"]

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class UpstreamCut(Exception):
    """The upstream broke its reply stream: the client's connection is dropped as well."""


class Relay:
    """An ASGI response that streams an open ``httpx.Response`` to the client.

    ``on_chunk(bytes)`` sees every chunk after it was sent; ``on_end(cut_by)`` runs once, with
    None for a complete reply, ``"client"`` or ``"upstream"`` for a cut one.
    """

    def __init__(self, response: httpx.Response, headers: list[tuple[bytes, bytes]],
                 on_chunk: Callable[[bytes], None] | None,
                 on_end: Callable[[str | None], None]) -> None:
        self.response = response
        self.headers = headers
        self.on_chunk = on_chunk
        self.on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cut: str | None = None
        finished = False

        async def pump(group: anyio.abc.TaskGroup) -> None:
            nonlocal cut, finished
            try:
                await send({"type": "http.response.start",
                            "status": self.response.status_code, "headers": self.headers})
                try:
                    async for chunk in self.response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk,
                                    "more_body": True})
                        if self.on_chunk is not None:
                            self.on_chunk(chunk)
                except httpx.HTTPError:
                    cut = "upstream"
                else:
                    finished = True
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                cut = cut or "client"  # the server said the client is gone
            group.cancel_scope.cancel()

        async def watch(group: anyio.abc.TaskGroup) -> None:
            nonlocal cut
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not finished and cut is None:
                        cut = "client"
                        group.cancel_scope.cancel()
                    return

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(pump, group)
                group.start_soon(watch, group)
        except BaseException:
            cut = cut or "client"  # cancelled: the server is stopping, or the client left
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self.response.aclose()
            self.on_end(cut)
        if cut == "upstream":
            raise UpstreamCut("the upstream broke the reply stream")


class _DropCuts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, UpstreamCut)


def quiet_cut_logs() -> None:
    """Keep the ASGI server from printing a traceback for a stream the upstream cut (the
    proxy logs its own line for it)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropCuts) for f in logger.filters):
        logger.addFilter(_DropCuts())
