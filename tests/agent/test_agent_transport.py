"""``OpenAIProvider(transport=...)``: scripted answers through ``httpx.MockTransport``, no
network. Retries, streaming and the scrubbing of the key work as over a socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sesstree import OpenAIProvider, ProviderError

KEY = "sk-transport-secret-123456"
Handler = Callable[[httpx.Request], httpx.Response]


def reply(text: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"role": "assistant",
                                                              "content": text}}]})


def scripted(*answers: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return queue.pop(0)

    return httpx.MockTransport(handle), seen


def provider(transport: httpx.MockTransport, **kw: object) -> OpenAIProvider:
    return OpenAIProvider("http://model.invalid/v1", "m", KEY, transport=transport,
                          backoff=0.0, **kw)  # type: ignore[arg-type]


def test_requests_go_through_the_transport_with_the_same_headers_and_body() -> None:
    transport, seen = scripted(reply("hello"))
    p = provider(transport, headers={"X-Extra": "1"})
    done = p.complete([{"role": "user", "content": "hi"}], [])
    assert done.message["content"] == "hello"
    (request,) = seen
    assert str(request.url) == "http://model.invalid/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-extra"] == "1"
    assert json.loads(request.content)["messages"] == [{"role": "user", "content": "hi"}]
    p.close()


def test_a_streamed_reply_is_read_chunk_by_chunk() -> None:
    chunks = [{"choices": [{"delta": {"role": "assistant", "content": "Hel"}}]},
              {"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]}]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    transport, seen = scripted(httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=body.encode()))
    deltas: list[object] = []
    done = provider(transport).complete([{"role": "user", "content": "hi"}], [], stream=True,
                                        on_delta=deltas.append)
    assert done.message["content"] == "Hello"
    assert len(deltas) >= 2
    assert json.loads(seen[0].content)["stream"] is True


def test_a_429_waits_as_retry_after_says_then_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("sesstree.agent.provider.time.sleep", slept.append)
    transport, seen = scripted(
        httpx.Response(429, headers={"retry-after": "7"}, json={"error": {"message": "slow"}}),
        reply("ok"))
    notices: list[tuple[Any, ...]] = []
    done = provider(transport, max_backoff=30.0).complete(
        [{"role": "user", "content": "hi"}], [],
        on_retry=lambda *a, **k: notices.append((*a, k)))
    assert done.message["content"] == "ok"
    assert slept == [7.0]
    assert len(seen) == 2
    assert notices[0][:2] == (1, 429)
    assert notices[0][3] == {"delay": 7.0, "attempts": 4, "cut": None}


def test_a_key_echoed_in_an_error_body_is_redacted() -> None:
    transport, _ = scripted(httpx.Response(
        401, json={"error": {"message": f"Incorrect API key provided: {KEY}"}}))
    with pytest.raises(ProviderError) as info:
        provider(transport).complete([{"role": "user", "content": "hi"}], [])
    assert info.value.status == 401
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert KEY not in repr(info.value.__context__) and info.value.__cause__ is None


def test_acomplete_uses_the_transport_and_leaves_it_open() -> None:
    transport, seen = scripted(reply("one"), reply("two"))
    p = provider(transport)

    async def twice() -> list[str]:
        return [(await p.acomplete([{"role": "user", "content": "hi"}], [])).message["content"]
                for _ in range(2)]

    assert asyncio.run(twice()) == ["one", "two"]
    assert len(seen) == 2


def test_a_sync_only_transport_is_refused_by_acomplete_with_a_clear_error() -> None:
    class SyncOnly(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return reply("never")

    p = OpenAIProvider("http://model.invalid/v1", "m", KEY, transport=SyncOnly())
    assert p.complete([{"role": "user", "content": "hi"}], []).message["content"] == "never"
    with pytest.raises(TypeError, match=r"acomplete\(\) needs an httpx\.AsyncBaseTransport"):
        asyncio.run(p.acomplete([{"role": "user", "content": "hi"}], []))


def test_a_cut_stream_is_retried_and_the_notice_says_it_was_cut() -> None:
    cut = httpx.Response(200, headers={"content-type": "text/event-stream"},
                         content=b'data: {"choices": [{"delta": {"content": "Hal"}}]}\n\n')
    whole = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=(
        b'data: {"choices": [{"delta": {"content": "Hello"}, "finish_reason": "stop"}]}\n\n'
        b"data: [DONE]\n\n"))
    transport, seen = scripted(cut, whole)
    notices: list[tuple[Any, ...]] = []
    deltas: list[object] = []
    done = provider(transport).complete(
        [{"role": "user", "content": "hi"}], [], stream=True, on_delta=deltas.append,
        on_retry=lambda *a, **k: notices.append((*a, k)))
    assert done.message["content"] == "Hello"
    assert len(seen) == 2 and seen[0].content == seen[1].content  # the same request again
    assert deltas == [{"content": "Hal"}, {"content": "Hello"}]  # the cut one came first
    assert notices == [(1, None, "the stream from http://model.invalid/v1/chat/completions "
                        "ended without a finish_reason or [DONE] after 1 event",
                        {"delay": 0.0, "attempts": 4, "cut": 1})]
