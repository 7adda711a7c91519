"""Shared parts of the sync tests: a real uvicorn server on 127.0.0.1 in a thread, and stores
with sessions in them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from sesstree import Store
from sesstree.node import NodeId
from sesstree.server import create_app

TOKEN = "s3cret-token-for-tests"


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1, on a free port, until the block ends; its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # no Nagle
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def served(store: Store, token: str | None = TOKEN) -> Iterator[str]:
    """``store`` served by the sync app."""
    with serving(create_app(store, token=token)) as url:
        yield url


def grow(store: Store, name: str, n: int, start: str | None = None, text: str = "m") -> NodeId:
    """Append ``n`` user messages to session ``name`` (forked from ``start`` if new)."""
    if start is not None and not store.has_session(name):
        store.fork(name, start)
    session = store.session(name)
    with store.batch():
        session.extend([("user/message", {"role": "user", "content": f"{text} {name} {i}"})
                        for i in range(n)])
    head = store.session_head(name)
    assert head is not None
    return head


def refs_of(store: Store) -> dict[str, str]:
    """Every session and tag: what a clone must reproduce."""
    out = {f"sessions/{s.name}": s.head for s in store.sessions()}
    out.update({f"tags/{t.name}": t.target for t in store.tags()})
    return out


def all_ids(store: Store) -> set[str]:
    return {n.id for n in store.backend.iter_nodes()}
