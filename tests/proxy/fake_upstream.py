"""A model provider on loopback speaking OpenAI chat completions, OpenAI Responses,
Anthropic Messages and Gemini (:mod:`fake_gemini`), streamed or not, for the proxy's tests and bench.

A real HTTP/1.1 server (``http.server`` in threads, keep-alive, chunked streams), not a mock.
By default every call gets a deterministic answer that quotes the last user message
(``"answer N: <text>"``), so a test can hold long conversations without a script; queued
:class:`Scripted` replies come first: any status and body, a stream cut after some events (the
connection closed with no end of body), or a reply held until released.
"""

from __future__ import annotations

import gzip
import itertools
import json
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_gemini import answer_gemini, is_gemini, last_user_text

__all__ = ["FakeUpstream", "Scripted", "free_port"]


@dataclass
class Scripted:
    """One scripted reply for the next model call."""

    status: int = 200
    body: Any = None  # JSON value, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)
    #: For a stream: send only this many events, then close the connection mid-body.
    cut_after: int | None = None
    #: For a stream: after this many events, wait until released (or 10 s) before going on.
    stall_after: int | None = None
    #: Text of the answer (default: quote the last user message).
    text: str | None = None
    #: A tool call instead of text: (id, name, arguments as a JSON string).
    tool_call: tuple[str, str, str] | None = None
    #: The number the answer is given (ids, usage) instead of the call's own.
    number: int | None = None
    #: A stream of these (event name, data) instead of the protocol's usual answer.
    events: list[tuple[str | None, Any]] | None = None
    #: Send a whole reply gzip-encoded (as OpenAI does for a client that accepts it).
    gzip: bool = False


def free_port() -> int:
    """A port nothing listens on (bound and closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _last_user_text(body: dict[str, Any]) -> str:
    items = body.get("messages")
    if items is None:
        items = body.get("input")
        if isinstance(items, str):
            return items
    for m in reversed(items or []):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                texts = [p.get("text", "") for p in c if isinstance(p, dict) and "text" in p]
                if texts:
                    return " ".join(texts)
    return ""


class FakeUpstream:
    """The server: ``with FakeUpstream() as up: up.url`` (no trailing ``/v1``)."""

    def __init__(self, delay: float = 0.0, tls: tuple[str, str] | None = None) -> None:
        """``tls``: (certificate file, key file) to serve HTTPS with instead of HTTP."""
        #: Seconds before every answer of a model call (a provider's time to first token).
        self.delay = delay
        self.script: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._gzip: dict[int, bool] = {}  # per serving thread: gzip the reply being sent
        self._count = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with fake._lock:
                    fake.paths.append(self.path)
                    fake.headers.append(dict(self.headers))
                if self.path.startswith("/v1/models"):
                    fake._json(self, 200, {"object": "list", "data": [
                        {"id": "fake-1", "object": "model", "owned_by": "tests"}]})
                else:
                    fake._json(self, 404, {"error": {"message": "no such path"}})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                with fake._lock:
                    fake.paths.append(self.path)
                    fake.requests.append(body)
                    fake.headers.append(dict(self.headers))
                    scripted = fake.script.popleft() if fake.script else Scripted()
                    n = next(fake._count)
                if fake.delay and self.path.split("?")[0].endswith(
                        ("/chat/completions", "/responses", "/messages")):
                    time.sleep(fake.delay)
                fake._gzip[threading.get_ident()] = scripted.gzip
                fake._answer(self, self.path.split("?")[0], body, scripted,
                             n if scripted.number is None else scripted.number)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that went away mid-reply is expected here

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.01}, daemon=True)

    # -- replies -----------------------------------------------------------------------------

    def _json(self, h: BaseHTTPRequestHandler, status: int, body: Any,
              headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if self._gzip.get(threading.get_ident()):
            data = gzip.compress(data)
            headers = {**(headers or {}), "Content-Encoding": "gzip"}
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def _stream(self, h: BaseHTTPRequestHandler, events: list[tuple[str | None, Any]],
                scripted: Scripted) -> None:
        h.send_response(200)
        for k, v in scripted.headers.items():
            h.send_header(k, v)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i, (name, data) in enumerate(events):
            if scripted.cut_after is not None and i >= scripted.cut_after:
                h.wfile.flush()
                h.close_connection = True
                h.connection.shutdown(socket.SHUT_RDWR)
                return
            if scripted.stall_after is not None and i == scripted.stall_after:
                self.release.wait(10)
            text = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
            payload = frame.encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            h.wfile.flush()
        if scripted.stall_after is not None and scripted.stall_after >= len(events):
            self.release.wait(10)  # every event sent, the end of the body held back
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _answer(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any],
                scripted: Scripted, n: int) -> None:
        if scripted.status != 200 or scripted.body is not None:
            self._json(h, scripted.status, scripted.body if scripted.body is not None else {},
                       scripted.headers)
            return
        if scripted.events is not None:
            self._stream(h, scripted.events, scripted)
            return
        asked = last_user_text(body) if is_gemini(path) else _last_user_text(body)
        text = scripted.text if scripted.text is not None else f"answer {n}: {asked}"
        stream = body.get("stream") is True
        if path.endswith("/chat/completions"):
            self._chat(h, body, text, scripted, stream, n)
        elif path.endswith("/responses"):
            self._responses(h, body, text, scripted, stream, n)
        elif path.endswith("/messages"):
            self._anthropic(h, body, text, scripted, stream, n)
        elif is_gemini(path):
            answer_gemini(self, h, body, text, scripted, n)
        else:
            self._json(h, 404, {"error": {"message": "no such path"}})

    def _chat(self, h: BaseHTTPRequestHandler, body: dict[str, Any], text: str,
              scripted: Scripted, stream: bool, n: int) -> None:
        usage = {"prompt_tokens": 10 + n, "completion_tokens": 5, "total_tokens": 15 + n}
        call = scripted.tool_call
        base = {"id": f"chatcmpl-{n}", "created": 1700000000, "model": body.get("model", "m")}
        if not stream:
            msg: dict[str, Any] = {"role": "assistant", "content": None if call else text,
                                   "refusal": None, "annotations": []}
            if call:
                msg["tool_calls"] = [{"id": call[0], "type": "function",
                                      "function": {"name": call[1], "arguments": call[2]}}]
            self._json(h, 200, {**base, "object": "chat.completion", "choices": [
                {"index": 0, "message": msg, "logprobs": None,
                 "finish_reason": "tool_calls" if call else "stop"}], "usage": usage})
            return

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
            return None, {**base, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish}]}

        events = [chunk({"role": "assistant", "content": ""})]
        if call:
            events.append(chunk({"tool_calls": [{"index": 0, "id": call[0], "type": "function",
                                                 "function": {"name": call[1], "arguments": ""}}]}))
            half = len(call[2]) // 2
            for part in (call[2][:half], call[2][half:]):
                events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
        else:
            words = text.split(" ")
            events += [chunk({"content": w + (" " if i < len(words) - 1 else "")})
                       for i, w in enumerate(words)]
        events.append(chunk({}, "tool_calls" if call else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append((None, {**base, "object": "chat.completion.chunk", "choices": [],
                                  "usage": usage}))
        events.append((None, "[DONE]"))
        self._stream(h, events, scripted)

    def _responses(self, h: BaseHTTPRequestHandler, body: dict[str, Any], text: str,
                   scripted: Scripted, stream: bool, n: int) -> None:
        rid = f"resp_{n:04d}"
        call = scripted.tool_call
        item: dict[str, Any] = {"id": f"msg_{n:04d}", "type": "message", "status": "completed",
                                "role": "assistant", "content": [
                                    {"type": "output_text", "text": text, "annotations": []}]}
        if call:
            item = {"id": f"fc_{n:04d}", "type": "function_call", "status": "completed",
                    "call_id": call[0], "name": call[1], "arguments": call[2]}
        usage = {"input_tokens": 20 + n, "output_tokens": 7, "total_tokens": 27 + n}
        response = {"id": rid, "object": "response", "created_at": 1700000000,
                    "status": "completed", "model": body.get("model", "m"), "output": [item],
                    "usage": usage, "previous_response_id": body.get("previous_response_id"),
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
        if not stream:
            self._json(h, 200, response)
            return
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        partial = {**item, "status": "in_progress", **({} if call else {"content": []})}
        half = len(text) // 2
        events: list[tuple[str | None, Any]] = [
            ("response.created", {"type": "response.created", "response": started,
                                  "sequence_number": 0}),
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": partial,
                                            "sequence_number": 1})]
        if call:  # the call whole when it is done (no argument deltas: not needed here)
            events += [("response.output_item.done", {
                "type": "response.output_item.done", "output_index": 0, "item": item,
                "sequence_number": 2}), ("response.completed", {
                    "type": "response.completed", "response": response, "sequence_number": 3})]
            self._stream(h, events, scripted)
            return
        events += [
            ("response.content_part.added", {"type": "response.content_part.added",
                                             "item_id": item["id"], "output_index": 0,
                                             "content_index": 0, "sequence_number": 2,
                                             "part": {"type": "output_text", "text": "",
                                                      "annotations": []}}),
        ]
        for i, piece in enumerate((text[:half], text[half:])):
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "delta": piece, "logprobs": [], "sequence_number": 3 + i}))
        events.append(("response.output_item.done", {"type": "response.output_item.done",
                                                     "output_index": 0, "item": item,
                                                     "sequence_number": 5}))
        events.append(("response.completed", {"type": "response.completed",
                                              "response": response, "sequence_number": 6}))
        self._stream(h, events, scripted)

    def _anthropic(self, h: BaseHTTPRequestHandler, body: dict[str, Any], text: str,
                   scripted: Scripted, stream: bool, n: int) -> None:
        call = scripted.tool_call
        block: dict[str, Any] = ({"type": "tool_use", "id": call[0], "name": call[1],
                                  "input": json.loads(call[2])} if call
                                 else {"type": "text", "text": text})
        stop = "tool_use" if call else "end_turn"
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                   "model": body.get("model", "m"), "content": [block], "stop_reason": stop,
                   "stop_sequence": None, "usage": {"input_tokens": 30 + n, "output_tokens": 9}}
        if not stream:
            self._json(h, 200, message)
            return
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {"input_tokens": 30 + n, "output_tokens": 1}}
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": start})]
        if call:
            events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": {**block, "input": {}}}))
            half = len(call[2]) // 2
            for part in (call[2][:half], call[2][half:]):
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": part}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": {"type": "text", "text": ""}}))
            half = len(text) // 2
            for part in (text[:half], text[half:]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                       "delta": {"type": "text_delta",
                                                                 "text": part}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": 9}}))
        events.append(("message_stop", {"type": "message_stop"}))
        self._stream(h, events, scripted)

    # -- control -----------------------------------------------------------------------------

    def add(self, *replies: Scripted) -> FakeUpstream:
        """Queue scripted replies for the next model calls."""
        with self._lock:
            self.script.extend(replies)
        return self

    def __enter__(self) -> FakeUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    # A provider in a process of its own (the proxy bench): prints its URL, serves until killed.
    import sys

    with FakeUpstream(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0) as served:
        print(served.url, flush=True)
        while sys.stdin.readline():
            pass  # serve until the parent closes our standard input
