"""Defects found in review, each kept fixed: back-pressure over TLS, upstream hosts that are
no DNS name, stopping during a stream, upstream ports out of range, the key memo's bound, and
a client that leaves before the upstream answered."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from proxy_server import RunningProxy

from sesstree import Store
from sesstree.proxy.app import create_app
from sesstree.proxy.paths import MEMO_ENTRY_BYTES, PathIndex

SESS = [sys.executable, "-c", "from sesstree.cli import main; main()"]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "a long answer"}]}


def _read_request(conn: socket.socket) -> bytes | None:
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


def _sse(i: int) -> bytes:
    event = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
             b'"choices":[{"index":0,"delta":{"content":"w%d "},"finish_reason":null}]}\n\n' % i)
    return b"%x\r\n%s\r\n" % (len(event), event)


# -- 1. back-pressure over TLS ------------------------------------------------------------------

@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_large_reply_to_a_client_that_pauses_arrives_whole(
        store: Store, tls: bool, certificate: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy stops reading the upstream while the client is not reading, and starts again
    when it reads (over TLS too: the reading that is paused is the one that is resumed)."""
    size = 3 << 20
    monkeypatch.setenv("SSL_CERT_FILE", certificate[0])

    def big(conn: socket.socket) -> None:
        while _read_request(conn) is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                         b"Content-Length: %d\r\n\r\n" % size)
            conn.sendall(b"a" * size)

    with RawUpstream(big, certificate if tls else None) as up, \
            RunningProxy(store, up.url, timeout=2) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        client.sendall(b"GET /v1/files/big/content HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.5)  # a client busy elsewhere: the proxy's buffers fill up
        client.settimeout(10)
        got = b""
        while len(got.partition(b"\r\n\r\n")[2]) < size:
            data = client.recv(1 << 20)
            if not data:
                break
            got += data
        client.close()
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert len(body) == size, proxy.lines


# -- 2. an upstream host that is no DNS name ----------------------------------------------------

@pytest.mark.parametrize("host", ["a..b", "x" * 64 + ".example"])
def test_an_upstream_host_that_is_no_dns_name_is_a_502_and_recorded(
        store: Store, host: str) -> None:
    with RunningProxy(store, f"http://{host}") as proxy:
        reply = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=10)
        proxy.flush()
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "proxy_error" and "unreachable" in error["message"]
    assert proxy.proxy.stats.snapshot()["recorded"] == 1
    assert not any("Traceback" in line for line in proxy.lines)


@pytest.mark.parametrize("url, named", [
    ("http://a..b", "a..b"), (f"https://{'x' * 64}.example/v1", "x" * 64),
    ("http://127.0.0.1:99999", "99999"), ("http://127.0.0.1:0/v1", "port 0 ")])
def test_sess_proxy_refuses_an_upstream_it_could_not_reach(
        tmp_path: Path, url: str, named: str) -> None:
    """A host that is no DNS name, a port outside 1..65535: one error line, no server (a port
    out of range was taken modulo 65536, sending the calls and their keys elsewhere)."""
    done = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--upstream", url,
                           "--port", "0"], capture_output=True, text=True, timeout=20)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "listening" not in done.stderr, lines


def test_an_upstream_port_out_of_range_is_refused_by_the_library(store: Store) -> None:
    with pytest.raises(ValueError, match="99999"):
        create_app(store, "http://127.0.0.1:99999")


# -- 3. stopping during a call ------------------------------------------------------------------

@pytest.mark.parametrize("thinking", [False, True], ids=["streaming", "thinking"])
def test_stopping_during_a_call_records_it_cut_by_the_proxy(
        store: Store, thinking: bool, capfd: pytest.CaptureFixture[str]) -> None:
    """A call still running when the server's grace period ends is cut and recorded as
    incomplete, and no traceback is printed: a stream is broken off, a client still waiting
    for the reply to begin gets a 503 in its protocol's shape."""
    def slow(conn: socket.socket) -> None:
        if _read_request(conn) is None:
            return
        if thinking:
            conn.settimeout(5)
            conn.recv(1)  # until the proxy drops the call
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(100):
            conn.sendall(_sse(i))
            time.sleep(0.05)

    got: list[bytes] = []
    status: list[int] = []
    with RawUpstream(slow) as up:
        proxy = RunningProxy(store, up.url, grace=0.2).start()
        started = threading.Event()

        def client() -> None:
            try:
                with httpx.stream("POST", proxy.url + "/v1/chat/completions",
                                  json={**CHAT, "stream": True}, timeout=10) as r:
                    status.append(r.status_code)
                    for chunk in r.iter_raw():
                        got.append(chunk)
                        started.set()
            except httpx.HTTPError:
                pass  # the proxy cut the stream: what is tested
        reader = threading.Thread(target=client)
        reader.start()
        if thinking:
            time.sleep(0.3)
        else:
            assert started.wait(5)
        proxy.stop()
        reader.join(10)
    if thinking:
        assert status == [503]
        assert b"".join(got) == (b'{"error":{"message":"sess proxy: the proxy is stopping",'
                                 b'"type":"proxy_error","code":null}}')
    else:
        assert status == [200] and got
    assert [s.name for s in store.sessions()] == ["a-long-answer"]
    event = store.log("a-long-answer")[0]
    assert event.type == "step/end"
    assert event.data["incomplete"] is True and event.data["cut_by"] == "proxy"
    assert any("cut by the proxy (stopping)" in line for line in proxy.lines), proxy.lines
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Cancel" not in err, err


# -- 5. the key memo's bound --------------------------------------------------------------------

@pytest.mark.parametrize("text", ["m", "message number", "a long message " * 100])
def test_the_key_memo_holds_no_more_than_its_bound(text: str) -> None:
    """What the memo holds, measured by tracemalloc with both generations full, stays within
    the bound documented (``MEMO_BYTES`` a generation, two generations)."""
    budget = 1 << 20
    index = PathIndex(store=None, memo_bytes=budget)  # type: ignore[arg-type]
    entries = 3 * budget // (len(text) + 30 + MEMO_ENTRY_BYTES)  # fills both generations
    tracemalloc.start()
    try:
        key = b""
        for i in range(entries):
            key = index._chain_key(key if i % 50 else b"", "user/message",
                                   {"role": "user", "content": f"{text} {i}"})
        _, held = tracemalloc.get_traced_memory()  # the peak: both generations full
    finally:
        tracemalloc.stop()
    newer, older = index.memo_size()
    assert newer and older  # the older generation was kept, full
    # a little slack for the dictionaries' own growth in steps
    assert held <= 2 * budget * 1.05, f"{held} bytes held for a bound of {2 * budget}"
    # and the count is not so generous that the memo holds much less than it may
    assert held >= 1.2 * budget, f"only {held} bytes held for a bound of {2 * budget}"


# -- 6. a client that leaves before the upstream answers ----------------------------------------

def test_a_client_that_leaves_before_the_reply_ends_the_upstream_call(store: Store) -> None:
    """The upstream call is dropped as soon as the client leaves, not when the upstream's
    headers finally come: a model would go on generating (and billing) for nobody."""
    dropped = threading.Event()

    def thinking(conn: socket.socket) -> None:
        if _read_request(conn) is None:
            return
        conn.settimeout(8)  # a model thinking long before its first byte
        try:
            if conn.recv(1) == b"":
                dropped.set()
        except (TimeoutError, OSError):
            pass

    with RawUpstream(thinking) as up, RunningProxy(store, up.url) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        body = httpx.Request("POST", "http://x/v1/chat/completions", json=CHAT).content
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body))
        time.sleep(0.3)
        client.close()
        assert dropped.wait(5), "the upstream call went on after the client left"
        proxy.flush()
    assert [s.name for s in store.sessions()] == ["a-long-answer"]
    end = store.log("a-long-answer")[0]
    assert end.data["cut_by"] == "client"
    assert any("cut by the client" in line for line in proxy.lines), proxy.lines
