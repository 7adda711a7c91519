"""Passing one upstream reply to the client, chunk by chunk, and noticing how it ended.

The reply is relayed as the raw bytes the upstream sent (content encoding untouched), each
chunk written to the client as soon as it arrives; the recorder sees a chunk only after the
client was sent it. A client that goes away stops the call (its ``http.disconnect`` is
watched from the moment its request was read, while the upstream thinks or is quiet); an
upstream that breaks the stream makes the relay break the client's connection too (no clean
end of body), so the client sees the cut as it would have without the proxy.

Plain asyncio (one watcher task, no task group or cancel scope): this runs once per
forwarded call, and its cost is the proxy's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Callable
from typing import Any

import httpcore

__all__ = ["UPSTREAM_ERRORS", "ClientWatch", "ProxyStopping", "QuietCut", "UpstreamCut",
           "quiet_cut_logs", "relay"]

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

#: What httpcore raises when the upstream cannot be reached or breaks a reply.
UPSTREAM_ERRORS: tuple[type[Exception], ...] = (
    httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
    httpcore.UnsupportedProtocol, httpcore.ProxyError, OSError)


class QuietCut(Exception):
    """A reply the proxy stopped on purpose: the server drops the client's connection (no
    clean end of body) and prints no traceback (the proxy logs its own line)."""


class UpstreamCut(QuietCut):
    """The upstream broke its reply stream: the client's connection is dropped as well."""


class ProxyStopping(QuietCut):
    """The server is stopping and cancelled a call still in flight after its grace period."""


class ClientWatch:
    """Watches the client's ``http.disconnect`` from the moment its request is read until its
    reply has passed: a client that leaves cancels the task serving it, whether the upstream
    is still thinking (its call is dropped, and its generation with it) or streaming.

    ``cut`` is ``"client"``, ``"upstream"`` or ``"proxy"`` once the exchange was cut.
    """

    __slots__ = ("_task", "_watcher", "cancelled", "cut", "finished")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self.cut: str | None = None
        self.finished = False
        self.cancelled = False  # by the watcher, for a client that left
        self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self.finished and self.cut is None:
                    self.cut = "client"
                    self.cancelled = True
                    self._task.cancel()
                return

    def client_left(self) -> bool:
        """Called once for a CancelledError being handled: True if the watcher raised it (the
        client left; the cancellation is absorbed), False if the server did (it is stopping:
        the cut is then the proxy's). Python 3.10 counts no cancellations: the flag decides."""
        uncancel = getattr(self._task, "uncancel", None)
        if self.cancelled and (uncancel is None or uncancel() == 0):
            return True
        if not self.cancelled:
            self.cut = self.cut or "proxy"
        return False

    def close(self) -> None:
        """Stop watching."""
        self._watcher.cancel()


async def relay(watch: ClientWatch, send: Send, status: int,
                headers: list[tuple[bytes, bytes]], body: AsyncIterable[bytes],
                close: Callable[[], Any], on_chunk: Callable[[bytes], None] | None,
                on_end: Callable[[str | None], None]) -> None:
    """Send the reply (``status``, ``headers``, the chunks of ``body``) to the client.

    ``on_chunk(bytes)`` sees every chunk after it was sent; ``close()`` (awaited) releases the
    upstream reply; ``on_end(cut_by)`` runs once, with None for a complete reply,
    ``"client"``, ``"upstream"`` or ``"proxy"`` (the server is stopping) for a cut one.
    ``watch`` is closed when the relay ends.

    Raises:
        UpstreamCut: the upstream broke the stream (the server then drops the client's
            connection instead of ending the body cleanly).
        asyncio.CancelledError: the server is stopping.
    """
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        try:
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if on_chunk is not None:
                    on_chunk(chunk)
        except UPSTREAM_ERRORS:
            watch.cut = "upstream"
        else:
            watch.finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        # The watcher's own cancellation (the client left) is absorbed; the server's goes on.
        if not watch.client_left():
            raise
    except OSError:
        watch.cut = watch.cut or "client"  # the server said the client is gone
    finally:
        watch.close()
        try:
            await close()
        except UPSTREAM_ERRORS:
            pass  # a connection already broken: nothing left to release
        finally:
            on_end(watch.cut)
    if watch.cut == "upstream":
        raise UpstreamCut("the upstream broke the reply stream")


class _DropCuts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        # The server's own line for the calls it cancels when it stops: the proxy logs one
        # per call ("cut by the proxy"), saying what became of it.
        return not isinstance(exc, QuietCut) and not str(record.msg).startswith(
            "Cancel %s running task")


def quiet_cut_logs() -> None:
    """Keep the ASGI server from printing a traceback for a reply the proxy cut on purpose
    (the upstream broke it, or the server is stopping: the proxy logs its own line)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropCuts) for f in logger.filters):
        logger.addFilter(_DropCuts())
