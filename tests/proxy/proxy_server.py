"""The real proxy application served by uvicorn in a thread, on 127.0.0.1 (tests, bench)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from sesstree import Store
from sesstree.proxy.app import create_app
from sesstree.proxy.relay import quiet_cut_logs

__all__ = ["OPENED", "RunningProxy", "track"]

#: Clients to close after the test (see the ``close_clients`` fixture).
OPENED: list[Any] = []


def track(client: Any) -> Any:
    """Close ``client`` (anything with ``close()``) after the test."""
    OPENED.append(client)
    return client


class RunningProxy:
    """The real proxy application served by uvicorn in a thread, on 127.0.0.1."""

    def __init__(self, store: Store, upstream: str, grace: float = 2.0,
                 **options: Any) -> None:
        """``grace``: seconds the server waits for requests in flight when stopped, before
        it cancels them."""
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
                                lifespan="on", timeout_graceful_shutdown=grace, server_header=False,
                                date_header=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

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
        while OPENED:  # a client's idle connection would hold up the server's shutdown
            OPENED.pop().close()
        self.server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    def __enter__(self) -> RunningProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
