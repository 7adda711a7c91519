"""A raw loopback upstream for the proxy tests that need bytes no HTTP server library would
send: a reply the client is slow to read, a stream broken off, a model that never answers."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

#: A chat request whose session is named ``a-long-answer``.
LONG_ANSWER: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "a long answer"}]}


def read_request(conn: socket.socket) -> bytes | None:
    """One HTTP/1.1 request's head (its Content-Length body read and dropped), or None."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            break
        rest += data
    return head


class RawUpstream:
    """A loopback server (plain or TLS) running ``handler(connection)`` per connection."""

    def __init__(self, handler: Callable[[socket.socket], None],
                 tls: tuple[str, str] | None = None) -> None:
        self.handler = handler
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.context: ssl.SSLContext | None = None
        if tls is not None:
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.context.load_cert_chain(*tls)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            self.handler(conn)
        except OSError:
            pass  # the proxy went away mid-reply: what some tests do on purpose
        finally:
            conn.close()

    def __enter__(self) -> RawUpstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def sse_chunk(i: int) -> bytes:
    """The ``i``-th chunk of a chat completion stream, in HTTP chunked encoding."""
    event = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
             b'"choices":[{"index":0,"delta":{"content":"w%d "},"finish_reason":null}]}\n\n' % i)
    return b"%x\r\n%s\r\n" % (len(event), event)
