"""The Gemini API of the fake provider (:mod:`fake_upstream`): ``generateContent``, and
``streamGenerateContent`` as server-sent events (``?alt=sse``) or as one JSON array, the way
the Gemini API answers: a reply's text in several chunks, a ``thoughtSignature`` on the first
part (standard base64 with ``+`` and ``/`` in it, which the SDK re-sends URL-safe), the finish
reason and the usage on the last chunk."""

from __future__ import annotations

import base64
import json
import socket
from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["SIGNATURE", "answer_gemini", "is_gemini", "last_user_text"]

#: The thought signature every reply carries (its base64 differs from its URL-safe form).
SIGNATURE = base64.b64encode(bytes(range(250, 256)) * 4).decode()


def is_gemini(path: str) -> bool:
    """True for a ``generateContent`` path."""
    return path.endswith((":generateContent", ":streamGenerateContent"))


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user content that has text."""
    for content in reversed(body.get("contents") or []):
        if isinstance(content, dict) and content.get("role", "user") == "user":
            texts = [p["text"] for p in content.get("parts") or [] if "text" in p]
            if texts:
                return "".join(texts)
    return ""


def _chunked(h: BaseHTTPRequestHandler, payload: bytes) -> None:
    h.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
    h.wfile.flush()


def answer_gemini(fake: Any, h: BaseHTTPRequestHandler, body: dict[str, Any], text: str,
                  scripted: Any, n: int) -> None:
    """Answer one Gemini call (``fake`` is the :class:`~fake_upstream.FakeUpstream`)."""
    path, _, query = h.path.partition("?")
    model = path.rsplit("/", 1)[-1].split(":")[0]
    call = scripted.tool_call
    usage = {"promptTokenCount": 40 + n, "candidatesTokenCount": 6, "totalTokenCount": 46 + n}
    if call:
        args = json.loads(call[2])
        function: dict[str, Any] = {"name": call[1], "args": args}
        if call[0]:
            function["id"] = call[0]
        pieces: list[dict[str, Any]] = [{"functionCall": function,
                                         "thoughtSignature": SIGNATURE}]
    else:
        half = len(text) // 2
        pieces = [{"text": text[:half], "thoughtSignature": SIGNATURE}, {"text": text[half:]}]
    finish = {"finishReason": "STOP", "index": 0}
    base = {"modelVersion": f"{model}-001", "responseId": f"resp-{n}"}
    if not path.endswith(":streamGenerateContent"):
        parts = pieces if call else [{"text": text, "thoughtSignature": SIGNATURE}]
        fake._json(h, 200, {"candidates": [{"content": {"role": "model", "parts": parts},
                                            **finish}], "usageMetadata": usage, **base})
        return
    chunks: list[dict[str, Any]] = [
        {"candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}],
         "usageMetadata": {"promptTokenCount": 40 + n}, **base} for piece in pieces]
    chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                                   **finish}], "usageMetadata": usage, **base})
    if "alt=sse" in query:
        fake._stream(h, [(None, c) for c in chunks], scripted)
        return
    # Without alt=sse: one JSON array, written as it is generated.
    h.send_response(200)
    h.send_header("Content-Type", "application/json; charset=UTF-8")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    for i, chunk in enumerate(chunks):
        if scripted.cut_after is not None and i >= scripted.cut_after:
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        _chunked(h, (b"[" if i == 0 else b"\r\n,\r\n") + json.dumps(chunk, indent=2).encode())
    _chunked(h, b"]")
    h.wfile.write(b"0\r\n\r\n")
    h.wfile.flush()
