"""A scripted OpenAI-compatible server on loopback, for the agent tests.

A real HTTP server (``http.server`` in a thread, on 127.0.0.1 and an ephemeral port), not a
mock of httpx: the provider's whole HTTP path runs. Each request takes the next :class:`Reply`
of the script; an exhausted script answers 500 with a body saying so, so a test that expected
fewer requests fails loudly. Replies can stream, fail with any status and headers, stall until
released, and reproduce the quirks of real servers byte for byte.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "NGINX_502",
    "FakeOpenAI",
    "Reply",
    "call",
    "chunk",
    "error",
    "message",
    "rejects_null_content",
    "stream",
    "strict_roles",
    "template_error",
]


@dataclass
class Reply:
    """One scripted response."""

    status: int = 200
    body: Any = None  # a JSON value, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    #: For a stream: each item a JSON value (sent as ``data: <json>``) or a raw str line.
    events: list[Any] | None = None
    done: bool = True  # end a stream with data: [DONE]
    delay: float = 0.0  # seconds between stream events
    stall_after: int | None = None  # stall (until released) after this many events
    #: Hold the request this many seconds (or until released) before answering anything: a
    #: slow CPU server, or one stuck, longer than the client's read timeout.
    hold: float = 0.0
    #: The Content-Type sent; None for the usual one (JSON, or text/event-stream for events),
    #: "" for none at all.
    content_type: str | None = None
    #: Bytes written to the socket instead of an HTTP response (a broken server or proxy).
    raw: bytes | None = None
    #: For a stream: reset the connection (TCP RST) after this many events, as a crashed
    #: server or a proxy dropping the connection does.
    reset_after: int | None = None


def call(name: str, arguments: Any, id: Any = "call_1", **extra: Any) -> dict[str, Any]:
    """A complete tool call as it appears in a non-streamed message."""
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments},
            **extra}


def message(
    content: Any = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    omit_content: bool = False,
    **extra: Any,
) -> Reply:
    """A ``chat.completion`` reply (finish_reason defaults the way OpenAI's does)."""
    msg: dict[str, Any] = {"role": "assistant", **extra}
    if not omit_content:
        msg["content"] = content
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "scripted",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return Reply(body=body)


def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` event."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        **extra,
    }


def stream(*texts: str, usage: bool = True, **kw: Any) -> Reply:
    """A streamed text answer, one event per piece, then a usage-only chunk and [DONE]."""
    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": t}) for t in texts]
    events.append(chunk({}, "stop"))
    if usage:
        events.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
    return Reply(events=events, **kw)


def error(status: int, body: Any = None, *, retry_after: str | None = None) -> Reply:
    """An error reply; the body defaults to OpenAI's shape."""
    if body is None:
        body = {"error": {"message": f"scripted {status}", "type": "server_error"}}
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Reply(status=status, body=body, headers=headers)


#: A proxy's error page (nginx in front of a model server that went away), many lines of HTML.
NGINX_502 = b"""<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx/1.24.0</center>
</body>
</html>
""" + b"<!-- a padding comment, as some proxies add -->\n" * 8


def template_error(status: int = 400) -> Reply:
    """A chat template that refused the history, its message over many lines (llama.cpp's
    jinja errors quote the template around the failing spot)."""
    message = (
        "Conversation roles must alternate user/assistant/user/assistant/...\n"
        "  at row 1, column 1790:\n"
        "{%- for message in messages %}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "        {{- raise_exception('Conversation roles must alternate') }}\n"
        + "    " * 200
    )
    return error(status, {"error": {"code": status, "message": message,
                                    "type": "invalid_request_error"}})


def strict_roles(then: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A server with a strict chat template: two user messages in a row are refused with 400,
    anything else gets ``then``."""

    def answer(body: dict[str, Any]) -> Reply:
        roles = [m.get("role") for m in body.get("messages", [])]
        if any(a == b == "user" for a, b in itertools.pairwise(roles)):
            return template_error(400)
        return then

    return answer


def rejects_null_content(then: Reply) -> Callable[[dict[str, Any]], Reply]:
    """llama-cpp-python's server: an assistant message whose ``content`` is null is refused
    with 400 (it accepts ``""``, or no key); anything else gets ``then``."""

    def answer(body: dict[str, Any]) -> Reply:
        for i, m in enumerate(body.get("messages", [])):
            if m.get("role") == "assistant" and "content" in m and m["content"] is None:
                return error(400, {"error": {
                    "message": f"messages.{i}.content: Input should be a valid string",
                    "type": "invalid_request_error"}})
        return then

    return answer


def _reset(handler: BaseHTTPRequestHandler) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0) instead of an orderly end."""
    handler.wfile.flush()
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.connection.close()


class FakeOpenAI:
    """The server. Use as a context manager; ``url`` is the base URL (ending in ``/v1``)."""

    def __init__(self, port: int = 0) -> None:
        self.script: deque[Reply | Callable[[dict[str, Any]], Reply]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsable": raw.decode(errors="replace")}
                with fake._lock:
                    fake.requests.append(body)
                    fake.request_headers.append(dict(self.headers))
                    item = fake.script.popleft() if fake.script else None
                if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
                    fake._send(self, error(404, {"error": "not found"}))
                    return
                if item is None:
                    reply = error(500, {"error": {"message": "script exhausted"}})
                else:
                    reply = item(body) if callable(item) else item
                fake._send(self, reply)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that gave up (a read timeout) leaves a broken pipe: expected here.
                pass

        self._server = Server(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True
        )

    def _send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.hold:
            self.release.wait(reply.hold)
        if reply.raw is not None:
            handler.wfile.write(reply.raw)
            return
        handler.send_response(reply.status)
        for k, v in reply.headers.items():
            handler.send_header(k, v)
        if reply.events is None:
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            if reply.content_type != "":
                handler.send_header("Content-Type", reply.content_type or "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        if reply.content_type != "":
            handler.send_header("Content-Type", reply.content_type or "text/event-stream")
        handler.end_headers()
        for i, event in enumerate(reply.events):
            if reply.reset_after is not None and i == reply.reset_after:
                _reset(handler)
                return
            if reply.stall_after is not None and i == reply.stall_after:
                self.release.wait(30)
                return
            line = event if isinstance(event, str) else "data: " + json.dumps(event)
            handler.wfile.write((line + "\n\n").encode())
            handler.wfile.flush()
            if reply.delay:
                time.sleep(reply.delay)
        if reply.stall_after is not None and reply.stall_after >= len(reply.events):
            self.release.wait(30)
            return
        if reply.done:
            handler.wfile.write(b"data: [DONE]\n\n")

    def add(self, *replies: Reply | Callable[[dict[str, Any]], Reply]) -> FakeOpenAI:
        """Queue replies, served in order."""
        with self._lock:
            self.script.extend(replies)
        return self

    @property
    def remaining(self) -> int:
        """Replies not served yet."""
        return len(self.script)

    def start(self) -> FakeOpenAI:
        """Start serving (done by ``with``)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release stalled replies and stop."""
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
