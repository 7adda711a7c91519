"""What is forwarded where: the upstream's path, query and credentials; header values as
HTTP means them; the response's headers as the upstream sent them; a UTF-8 session name; a
client that leaves before its request was read, and one that leaves before the upstream
answered (the upstream call is dropped, not left generating for nobody)."""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_upstream import FakeUpstream
from proxy_server import RunningProxy
from raw_upstream import LONG_ANSWER, RawUpstream, read_request

from sesstree import Store

BODY = {"model": "m", "messages": [{"role": "user", "content": "route me"}]}


def sent_headers(upstream: FakeUpstream) -> dict[str, str]:
    return {k.lower(): v for k, v in upstream.headers[-1].items()}


def test_upstream_path_and_query_are_merged_with_the_request(
        store: Store, upstream: FakeUpstream) -> None:
    base = upstream.url + "/api/?api-version=2024-06-01&key=upstreamsecret42"
    with RunningProxy(store, base) as proxy:
        assert httpx.post(proxy.url + "/v1/chat/completions", json=BODY).status_code == 200
        assert upstream.paths[-1] == \
            "/api/v1/chat/completions?api-version=2024-06-01&key=upstreamsecret42"
        reply = httpx.post(proxy.url + "/v1/chat/completions?api-version=2025-01-01&x=%2F",
                           json=BODY)
        assert reply.status_code == 200
        # the client's own parameter wins; the others are added
        assert upstream.paths[-1] == \
            "/api/v1/chat/completions?key=upstreamsecret42&api-version=2025-01-01&x=%2F"
        proxy.flush()
        assert proxy.proxy.stats.snapshot()["recorded"] == 2
        assert all("upstreamsecret42" not in line for line in proxy.lines)


def test_upstream_credentials_become_basic_authorization(
        store: Store, upstream: FakeUpstream, store_path: Path) -> None:
    password = "pa:ss@word-42"
    base = upstream.url.replace("http://", "http://me%40home:pa%3Ass%40word-42@")
    with RunningProxy(store, base) as proxy:
        assert httpx.post(proxy.url + "/v1/chat/completions", json=BODY).status_code == 200
        token = base64.b64encode(f"me@home:{password}".encode()).decode()
        assert sent_headers(upstream)["authorization"] == f"Basic {token}"
        assert httpx.post(proxy.url + "/v1/chat/completions", json=BODY,
                          headers={"Authorization": "Bearer client-own-key"}).status_code == 200
        # the client's own Authorization is forwarded instead, never both
        assert sent_headers(upstream)["authorization"] == "Bearer client-own-key"
        assert upstream.paths[-1] == "/v1/chat/completions"
        proxy.flush()
        printed = "\n".join(proxy.lines)
    assert password not in printed and token not in printed
    store.close()
    data = b"".join(p.read_bytes() for p in store_path.iterdir() if p.is_file())
    assert password.encode() not in data and token.encode() not in data


def raw_request(port: int, head: bytes, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_header_values_are_stripped_before_forwarding(proxy: RunningProxy,
                                                      upstream: FakeUpstream) -> None:
    body = json.dumps(BODY).encode()
    reply = raw_request(proxy.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Connection: close\r\nContent-Type: application/json\r\n"
                        b"X-Trace: abc \t\r\nAuthorization: Bearer sk-spaced-0123456789abcdefgh \r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body), body)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:300]
    sent = sent_headers(upstream)
    assert sent["x-trace"] == "abc"
    assert sent["authorization"] == "Bearer sk-spaced-0123456789abcdefgh"


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_logs() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_client_that_leaves_mid_upload_is_one_line(
        proxy: RunningProxy, upstream: FakeUpstream, server_logs: Records) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Length: 10000\r\n\r\n{\"model\": ")
        time.sleep(0.05)  # the request has reached the application, which waits for the rest
    deadline = time.monotonic() + 10
    while not any("went away" in line for line in proxy.lines):
        assert time.monotonic() < deadline, proxy.lines
        time.sleep(0.01)
    assert proxy.lines[-1] == ("POST /v1/chat/completions: the client went away before its "
                               "request was read (not forwarded)")
    assert upstream.requests == []
    assert [r.getMessage() for r in server_logs.records if r.exc_info] == []
    # the proxy goes on serving
    assert httpx.post(proxy.url + "/v1/chat/completions", json=BODY).status_code == 200


def test_response_headers_are_the_upstreams(proxy: RunningProxy,
                                            upstream: FakeUpstream) -> None:
    direct = httpx.get(upstream.url + "/v1/models")
    via = httpx.get(proxy.url + "/v1/models")
    assert via.headers.get_list("server") == direct.headers.get_list("server")
    assert len(via.headers.get_list("date")) == 1
    assert [k for k, _ in via.headers.raw] == [k.lower() for k, _ in direct.headers.raw]


def test_a_utf8_session_name(proxy: RunningProxy, store: Store, upstream: FakeUpstream) -> None:
    name = "équipe/réglage-ß"
    reply = httpx.post(proxy.url + "/v1/chat/completions", json=BODY,
                       headers={"X-Sess-Session": name.encode()})
    assert reply.status_code == 200
    proxy.flush()
    assert [s.name for s in store.sessions()] == [name]
    assert f"-> {name} (new)" in proxy.lines[-1]
    # not UTF-8: one clear error, nothing forwarded
    sent = len(upstream.requests)
    for bad in (b"caf\xe9", ):
        refused = httpx.post(proxy.url + "/v1/chat/completions", json=BODY,
                             headers={"X-Sess-Session": bad})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == \
            "sess proxy: X-Sess-Session: not UTF-8 text (byte 3)"
    twice = httpx.post(proxy.url + "/v1/chat/completions", json=BODY,
                       headers=[("X-Sess-Session", "a"), ("X-Sess-Session", "b")])
    assert twice.status_code == 400 and "more than once" in twice.text
    assert len(upstream.requests) == sent
    proxy.flush()
    assert [s.name for s in store.sessions()] == [name]


def test_a_client_that_leaves_before_the_reply_ends_the_upstream_call(store: Store) -> None:
    """The upstream call is dropped as soon as the client leaves, not when the upstream's
    headers finally come: a model would go on generating (and billing) for nobody."""
    dropped = threading.Event()

    def thinking(conn: socket.socket) -> None:
        if read_request(conn) is None:
            return
        conn.settimeout(8)  # a model thinking long before its first byte
        try:
            if conn.recv(1) == b"":
                dropped.set()
        except (TimeoutError, OSError):
            pass

    with RawUpstream(thinking) as up, RunningProxy(store, up.url) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        body = httpx.Request("POST", "http://x/v1/chat/completions", json=LONG_ANSWER).content
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
