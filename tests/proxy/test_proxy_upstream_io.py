"""The proxy's own upstream connections: HTTPS (certificate checked), timeouts, and a reply
stream that stalls past the timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy, track

from sesstree import Store

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
