"""A store with forks, tool calls, an error, a compaction and a hostile message, and a real
uvicorn serving the web view of it on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from sesstree import Store
from sesstree.web import create_web_app

TOKEN = "s3cret-token-for-tests"
HOSTILE = ('<script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned = 2"> '
           'and [click](javascript:window.__pwned=3)')


def fill(store: Store) -> None:
    """Three sessions sharing a prefix (two forks), a tag, an agent-style turn."""
    main = store.session("quest-1")
    main.add_message({"role": "system", "content": "You are a careful coding agent."})
    main.append("turn/start", {"trigger": "user"})
    main.add_message({"role": "user", "content": "Find why the **build** fails on `main`."})
    main.append("step/start", {"step": 1})
    main.add_message({"role": "assistant", "content": "Let me look at the log.", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "build.log"}'}}]})
    main.append("usage", {"model": "demo-model", "usage": {"prompt_tokens": 1200,
                                                         "completion_tokens": 40,
                                                         "total_tokens": 1240}})
    main.append("tool/call", {"id": "call_1", "name": "read_file", "arguments": '{"path": "build.log"}'})
    main.add_message({"role": "tool", "tool_call_id": "call_1",
                      "content": "error: missing symbol `frobnicate`"})
    main.append("step/end", {"step": 1, "finish_reason": "tool_calls", "tool_calls": 1})
    store.tag("before-answer", "quest-1")
    main.add_message({"role": "assistant", "content": "The linker cannot find `frobnicate`:\n\n"
                      "1. it was renamed\n2. the old name is still used in `app.c`"})
    main.append("turn/end", {"reason": {"kind": "done"}, "steps": 1})
    alt = store.fork("quest-2", "before-answer")
    alt.add_message({"role": "assistant", "content": "Maybe the cache is stale; try a clean build."})
    alt.append("error", {"kind": "interrupted", "tool_call_id": "call_9", "name": "make"})
    alt.append("turn/end", {"reason": {"kind": "interrupted"}})
    side = store.fork("notes", "quest-1~6")
    side.add_message({"role": "user", "content": HOSTILE})
    side.append("compaction/marker", {"summary": "The user asked about the build; we read the log."})
    side.add_message({"role": "assistant", "content": "Noted."})
    other = store.session("scratch")
    other.add_message({"role": "user", "content": "an unrelated root"})


@contextmanager
def serve(store: Store, token: str | None = None, app: Any = None) -> Iterator[str]:
    """A real uvicorn on 127.0.0.1 (a free port) serving the web view (or ``app``); yields its
    base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK stalls
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app or create_web_app(store, token=token), log_level="warning",
                            lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the web view's server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
