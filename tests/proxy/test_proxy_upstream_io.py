"""The proxy's own upstream connections: HTTPS (certificate checked), timeouts, a reply
stream that stalls past the timeout, a large reply to a client that pauses (back-pressure,
over TLS too), and upstreams that cannot be reached (a host that is no DNS name, a port out
of range)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy, track
from raw_upstream import LONG_ANSWER, RawUpstream, read_request

from sesstree import Store
from sesstree.proxy.app import create_app

BODY = {"model": "m", "messages": [{"role": "user", "content": "over tls"}]}


@pytest.fixture
def tls_upstream(certificate: tuple[str, str]) -> Iterator[FakeUpstream]:
    with FakeUpstream(tls=certificate) as up:
        yield up


def test_an_https_upstream_is_relayed_and_recorded(
        store: Store, tls_upstream: FakeUpstream, certificate: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", certificate[0])  # the proxy trusts this one
    with RunningProxy(store, tls_upstream.url) as proxy:
        client = track(openai.OpenAI(base_url=proxy.url + "/v1", api_key="test-key-0123456789"))
        first = client.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "over tls"}])
        answer = first.choices[0].message.content
        stream = client.chat.completions.create(model="m", stream=True, messages=[
            {"role": "user", "content": "over tls"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "and streamed"}])
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text.endswith("and streamed")
        proxy.flush()
    assert [s.name for s in store.sessions()] == ["over-tls"]
    assert [m["content"] for m in store.messages("over-tls")][-1] == text


def test_an_https_upstream_with_an_untrusted_certificate_is_refused(
        store: Store, tls_upstream: FakeUpstream) -> None:
    with RunningProxy(store, tls_upstream.url) as proxy:
        reply = httpx.post(proxy.url + "/v1/chat/completions", json=BODY)
        assert reply.status_code == 502
        message = reply.json()["error"]["message"]
        assert "unreachable (ConnectError" in message and "CERTIFICATE_VERIFY_FAILED" in message
        assert tls_upstream.requests == []


def test_an_upstream_slower_than_the_timeout_is_a_504(store: Store) -> None:
    with FakeUpstream(delay=2.0) as slow, RunningProxy(store, slow.url, timeout=0.3) as proxy:
        reply = httpx.post(proxy.url + "/v1/chat/completions", json=BODY, timeout=10)
        assert reply.status_code == 504
        assert "unreachable (ReadTimeout" in reply.json()["error"]["message"]
        proxy.flush()
        error = next(n.data for n in store.log("over-tls") if n.type == "error")
        assert error["status"] == 504


def test_a_stream_that_stalls_past_the_timeout_is_cut_and_recorded(
        store: Store, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.add(Scripted(stall_after=2, text="never finished"))
    with RunningProxy(store, upstream.url, timeout=0.3) as proxy:
        with pytest.raises(httpx.RemoteProtocolError), httpx.stream(
                "POST", proxy.url + "/v1/chat/completions", json={**BODY, "stream": True},
                timeout=10) as reply:
            assert reply.status_code == 200
            for _ in reply.iter_raw():
                pass
        upstream.release.set()
        proxy.flush()
        assert proxy.proxy.stats.snapshot()["incomplete"] == 1
    end = next(n.data for n in store.log("over-tls") if n.type == "step/end")
    assert end["incomplete"] is True and end["cut_by"] == "upstream"


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_large_reply_to_a_client_that_pauses_arrives_whole(
        store: Store, tls: bool, certificate: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy stops reading the upstream while the client is not reading, and starts again
    when it reads (over TLS too: the reading that is paused is the one that is resumed)."""
    size = 3 << 20
    monkeypatch.setenv("SSL_CERT_FILE", certificate[0])

    def big(conn: socket.socket) -> None:
        while read_request(conn) is not None:
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


@pytest.mark.parametrize("host", ["a..b", "x" * 64 + ".example"])
def test_an_upstream_host_that_is_no_dns_name_is_a_502_and_recorded(
        store: Store, host: str) -> None:
    with RunningProxy(store, f"http://{host}") as proxy:
        reply = httpx.post(proxy.url + "/v1/chat/completions", json=LONG_ANSWER, timeout=10)
        proxy.flush()
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "proxy_error" and "unreachable" in error["message"]
    assert proxy.proxy.stats.snapshot()["recorded"] == 1
    assert not any("Traceback" in line for line in proxy.lines)


def test_an_upstream_port_out_of_range_is_refused_by_the_library(store: Store) -> None:
    with pytest.raises(ValueError, match="99999"):
        create_app(store, "http://127.0.0.1:99999")
