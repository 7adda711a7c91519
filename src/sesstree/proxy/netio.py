"""The proxy's upstream connections: an httpcore network backend on asyncio's own transports.

httpcore (httpx's transport) talks to the network through a backend; its default one goes
through anyio, whose cancel scopes, task lookups and a ``poll()`` system call per idle
connection per request cost more CPU than the rest of a forwarded call. This backend is the
same contract on a plain :class:`asyncio.Protocol`: bytes arrive in a buffer as the event loop
reads them, a read waits on one future with one timer for its timeout, and whether an idle
connection was closed by the server is a flag, not a system call. HTTP itself (HTTP/1.1
framing, keep-alive, pooling) stays httpcore's. TLS is asyncio's (``loop.start_tls``).

Errors are httpcore's: :class:`httpcore.ConnectError`, :class:`httpcore.ConnectTimeout`,
:class:`httpcore.ReadError`, :class:`httpcore.ReadTimeout`, :class:`httpcore.WriteError`,
:class:`httpcore.WriteTimeout`, as with the default backend.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

import httpcore

__all__ = ["LoopBackend", "LoopStream"]

#: Bytes buffered from the upstream before the connection stops reading (back-pressure).
_HIGH_WATER = 1 << 18
#: Bytes of a request held before they are written without waiting for the rest.
_HELD = 1 << 20


class _Protocol(asyncio.Protocol):
    """Buffers what the upstream sends and wakes the one reader waiting for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.eof = False
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.drain: asyncio.Future[None] | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio's methods without being its classes.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport: an HTTP/1.1 client never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)

    def pause_writing(self) -> None:
        if self.drain is None or self.drain.done():
            self.drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)

    def _wake(self) -> None:
        if self.reader is not None and not self.reader.done():
            self.reader.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


async def _wait(future: asyncio.Future[None], timeout: float | None) -> None:
    """Wait for ``future``, at most ``timeout`` seconds (TimeoutError)."""
    if timeout is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future)
    try:
        await future
    finally:
        timer.cancel()


class LoopStream(httpcore.AsyncNetworkStream):
    """One upstream connection (plain TCP, or TLS over it)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol,
                 tls: bool = False) -> None:
        self._transport = transport
        self._protocol = protocol
        self._tls = tls
        self._pending: list[bytes] = []
        self._pending_size = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Up to ``max_bytes`` the upstream sent (``b""`` once it closed the connection),
        after writing the request held so far."""
        if self._pending:
            await self._flush(timeout)
        p = self._protocol
        if not p.chunks and not p.eof:
            p.reader = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.reader, timeout)
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out waiting for the upstream") from None
            finally:
                p.reader = None
        if p.chunks:
            data = p.chunks.popleft()
            if len(data) > max_bytes:
                p.chunks.appendleft(data[max_bytes:])
                data = data[:max_bytes]
            p.buffered -= len(data)
            if p.paused and p.buffered <= _HIGH_WATER // 4:
                p.paused = False
                self._transport.resume_reading()
            return data
        if p.error is not None:
            raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Send ``buffer`` to the upstream (held until the reply is read, see below)."""
        # Held until the reply is read (or a megabyte is held): httpcore writes a request's
        # head and its body apart, and one write of both is one system call and one packet
        # for the upstream to wake up for, instead of two.
        if not buffer:
            return
        if self._protocol.eof or self._transport.is_closing():
            raise httpcore.WriteError("the upstream closed the connection")
        self._pending.append(buffer)
        self._pending_size += len(buffer)
        if self._pending_size >= _HELD:
            await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        pending, self._pending, self._pending_size = self._pending, [], 0
        p = self._protocol
        if p.eof or self._transport.is_closing():
            raise httpcore.WriteError("the upstream closed the connection")
        self._transport.writelines(pending)
        if p.drain is not None and not p.drain.done():
            try:
                await _wait(p.drain, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out writing to the upstream") from None
            if p.eof:
                raise httpcore.WriteError("the upstream closed the connection")

    async def aclose(self) -> None:
        """Close the connection."""
        if self._tls:
            # No TLS close_notify exchange (httpcore's default backend skips it too: HTTP
            # frames its own messages): a TLS close waits for the server's answer, which may
            # never come, and would hold the connection open meanwhile.
            self._transport.abort()
        else:
            self._transport.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        """The connection with TLS over it, the server's certificate checked by
        ``ssl_context``."""
        loop = asyncio.get_running_loop()
        try:
            transport = await asyncio.wait_for(loop.start_tls(
                self._transport, self._protocol, ssl_context, server_hostname=server_hostname),
                timeout)
        except (TimeoutError, asyncio.TimeoutError):  # two classes before Python 3.11
            self._transport.close()
            raise httpcore.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        if transport is None:  # pragma: no cover - the connection went away meanwhile
            raise httpcore.ConnectError("the upstream closed the connection during TLS")
        # From now on the protocol is fed by the TLS transport (which calls no
        # connection_made): back-pressure must pause the reading of that one, the one a read
        # resumes. Pausing the TCP transport under it would stop the reading that a read
        # never resumes: a large reply stalled until the timeout.
        self._protocol.transport = transport
        return LoopStream(transport, self._protocol, tls=True)

    def get_extra_info(self, info: str) -> Any:
        """What httpcore asks of a connection: ``is_readable``, ``ssl_object``,
        ``client_addr``, ``server_addr``, ``socket``."""
        if info == "is_readable":
            # Asked of an idle connection only: readable means the server sent something or
            # closed it, which the protocol has already seen (no system call needed).
            p = self._protocol
            return bool(p.chunks) or p.eof or self._transport.is_closing()
        name = {"ssl_object": "ssl_object", "client_addr": "sockname",
                "server_addr": "peername", "socket": "socket"}.get(info)
        return None if name is None else self._transport.get_extra_info(name)


class LoopBackend(httpcore.AsyncNetworkBackend):
    """Connections for :class:`httpcore.AsyncConnectionPool` on the running asyncio loop."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        """A TCP connection to ``host:port`` with ``socket_options`` set."""
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        local = (local_address, 0) if local_address else None
        try:
            transport, _ = await asyncio.wait_for(loop.create_connection(
                lambda: protocol, host, port, local_addr=local), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise httpcore.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except (OSError, UnicodeError, ValueError, OverflowError) as exc:
            # Not only OSError: a host that is no DNS name (an empty label, one over 63
            # characters) makes getaddrinfo raise UnicodeError, a port out of range
            # OverflowError; each is an upstream that cannot be reached, not a proxy crash.
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            try:
                sock.setsockopt(*option)
            except OSError as exc:
                transport.close()
                raise httpcore.ConnectError(str(exc)) from exc
        return LoopStream(transport, protocol)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        """Not used by the proxy: always :class:`httpcore.ConnectError`."""
        raise httpcore.ConnectError("unix sockets are not an upstream the proxy uses")

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on the running loop."""
        await asyncio.sleep(seconds)
