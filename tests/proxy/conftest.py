"""Fixtures for the proxy tests: a fake provider and the real proxy, both on loopback."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

sys.path.insert(0, str(Path(__file__).parent))

from fake_upstream import FakeUpstream  # noqa: E402

from sesstree import Store, open_store  # noqa: E402
from sesstree.proxy.app import Proxy, create_app  # noqa: E402
from sesstree.proxy.relay import quiet_cut_logs  # noqa: E402


class RunningProxy:
    """The real proxy application served by uvicorn in a thread, on 127.0.0.1."""

    def __init__(self, store: Store, upstream: str, **options: Any) -> None:
        self.store = store
        self.lines: list[str] = []
        self.app, self.proxy = create_app(store, upstream, log=self.lines.append, **options)
        # proto given: asyncio sets TCP_NODELAY only on sockets that say they are TCP
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        quiet_cut_logs()
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def p(self) -> Proxy:
        return self.proxy

    def start(self) -> RunningProxy:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the proxy did not start")
            time.sleep(0.005)
        return self

    def flush(self) -> None:
        """Wait for every recording submitted so far."""
        # A relay's last step runs just after the client got the end of the body.
        time.sleep(0.02)
        self.proxy.flush()

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    def __enter__(self) -> RunningProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "s"


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    with open_store(store_path) as s:
        yield s


@pytest.fixture
def proxy(store: Store, upstream: FakeUpstream) -> Iterator[RunningProxy]:
    with RunningProxy(store, upstream.url) as running:
        yield running
