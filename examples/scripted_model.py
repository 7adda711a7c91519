"""A scripted, offline stand-in for a model: a tiny OpenAI-compatible server on loopback.

It speaks the real wire format over real HTTP (``POST /v1/chat/completions``, streamed or
not), so the example exercises exactly the code path a real endpoint would. Its "model" is a
short script keyed on the latest user prompt and on how many tool results have come back
since, which is enough to play the quest in ``quest.py`` without any server or key.

    with ScriptedModel() as url:   # e.g. http://127.0.0.1:54321/v1
        ...
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedModel", "reply_to"]

# For each prompt keyword: the tool calls to make, one per step, then how to answer.
_PLAYS: list[tuple[str, list[tuple[str, dict[str, str]]], str]] = [
    ("cave of echoes",
     [("talk_to", {"npc": "innkeeper"}), ("talk_to", {"npc": "mayor"}),
      ("buy", {"item": "lantern"})],
     "The cave opens only to the Silver Key, which the mayor's daughter keeps. She will trade "
     "it for a lantern, so I bought one ({last})."),
    ("silver key",
     [],
     "Go to the Cave of Echoes at dawn and try the key in the iron door; keep the lantern lit."),
    ("iron door",
     [],
     "The Silver Key turns with a groan and the iron door swings open. The echoes begin."),
    ("another way",
     [("talk_to", {"npc": "old miner"})],
     "The old miner says: \"{last}\" So the west tunnel is the other way in."),
]


def reply_to(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message the script gives for this conversation."""
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    prompt = str(messages[last_user].get("content", "")).lower()
    results = [m for m in messages[last_user:] if m.get("role") == "tool"]
    for keyword, calls, answer in _PLAYS:
        if keyword in prompt:
            if len(results) < len(calls):
                name, args = calls[len(results)]
                call_id = f"call_{len(messages)}"
                return {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}]}
            last = str(results[-1]["content"]) if results else ""
            return {"role": "assistant", "content": answer.format(last=last)}
    return {"role": "assistant", "content": "I am only a scripted model; I know this quest."}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the example's output to the transcript

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        message = reply_to(body.get("messages", []))
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        prompt_chars = sum(len(str(m.get("content"))) for m in body["messages"])
        usage: dict[str, Any] = {"prompt_tokens": prompt_chars // 4,
                                 "completion_tokens": len(str(message.get("content"))) // 4}
        self.send_response(200)
        if not body.get("stream"):
            data = json.dumps({"id": "chatcmpl-scripted", "object": "chat.completion",
                               "model": "scripted", "usage": usage,
                               "choices": [{"index": 0, "message": message,
                                            "finish_reason": finish}]}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        deltas: list[dict[str, Any]] = []
        if message.get("tool_calls"):
            deltas.append({"role": "assistant", "tool_calls": [
                {"index": 0, **message["tool_calls"][0]}]})
        else:
            words = str(message["content"]).split(" ")
            deltas += [{"content": w + (" " if i < len(words) - 1 else "")}
                       for i, w in enumerate(words)]
        events: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        events.append({"choices": [], "usage": usage})
        for event in events:
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


class ScriptedModel:
    """Serve the script on 127.0.0.1 (an ephemeral port) in a background thread."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
