"""The HTTP side: retries with backoff and Retry-After, error bodies, the API key kept secret."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, error, message

from sesstree import Agent, OpenAIProvider, ProviderError, Store, open_store


def test_429_with_retry_after_is_honoured(server: FakeOpenAI, provider: OpenAIProvider,
                                          store: Store) -> None:
    server.add(error(429, retry_after="1"), message("ok"))
    agent = Agent(provider, store.session("s"))
    started = time.monotonic()
    provider.max_backoff = 5.0
    assert agent.run("hi") == "ok"
    assert time.monotonic() - started >= 0.9  # the backoff alone would be ~0.01 s
    retry = [n.data for n in agent.session.events() if n.type == "error"]
    assert retry == [{"kind": "retry", "attempt": 1, "status": 429,
                      "message": f"{provider.url} answered 429: scripted 429 (server_error)",
                      "max_attempts": 4, "delay": 1.0}]
    assert [n.type for n in agent.session.events()][-1] == "turn/end"


def test_5xx_retried_then_gives_up(server: FakeOpenAI, provider: OpenAIProvider,
                                   store: Store) -> None:
    provider.max_retries = 2
    server.add(error(500), error(503), message("third time lucky"))
    agent = Agent(provider, store.session("s"))
    assert agent.run("hi") == "third time lucky"
    server.add(error(500), error(502), error(500))
    with pytest.raises(ProviderError, match="gave up after 3 attempts") as info:
        agent.run("again")
    assert info.value.status == 500
    events = agent.session.events()
    assert events[-1].type == "turn/end"
    assert events[-1].data["reason"]["kind"] == "error"
    assert events[-2].data["kind"] == "provider" and events[-2].data["status"] == 500


def test_async_retries(server: FakeOpenAI, provider: OpenAIProvider, store: Store) -> None:
    server.add(error(500), message("ok"))
    agent = Agent(provider, store.session("s"))
    assert asyncio.run(agent.arun("hi")) == "ok"
    assert sum(n.type == "error" for n in agent.session.events()) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_connection_refused_then_up(tmp_path: Path, mode: str) -> None:
    port = _free_port()
    provider = OpenAIProvider(f"http://127.0.0.1:{port}/v1", "m", backoff=0.1,
                              max_backoff=0.2, max_retries=20)
    late: list[FakeOpenAI] = []

    def come_up() -> None:  # bind only now: a bound socket would accept into its backlog
        late.append(FakeOpenAI(port=port).add(message("up now")).start())

    timer = threading.Timer(0.4, come_up)
    timer.start()
    try:
        with open_store(tmp_path / "s") as store:
            agent = Agent(provider, store.session("s"))
            answer = agent.run("hi") if mode == "sync" else asyncio.run(agent.arun("hi"))
            assert answer == "up now"
            retries = [n.data for n in agent.session.events() if n.type == "error"]
            assert retries and all(r["kind"] == "retry" and r["status"] is None for r in retries)
            assert "ConnectError" in retries[0]["message"]
    finally:
        timer.join()
        for fake in late:
            fake.stop()
        provider.close()


def test_server_down_is_a_provider_error(tmp_path: Path) -> None:
    provider = OpenAIProvider(f"http://127.0.0.1:{_free_port()}/v1", "m", backoff=0.01,
                              max_retries=1)
    with open_store(tmp_path / "s") as store, pytest.raises(ProviderError, match="ConnectError"):
        Agent(provider, store.session("s")).run("hi")


def test_bad_url_is_not_retried(tmp_path: Path) -> None:
    provider = OpenAIProvider("ftp://example.invalid/v1", "m", backoff=5)
    with open_store(tmp_path / "s") as store, pytest.raises(ProviderError, match="base URL"):
        Agent(provider, store.session("s")).run("hi")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"message": "model 'x' not found", "type": "api_error"}},
         "model 'x' not found (api_error)"),  # OpenAI / Ollama shape
        ({"object": "error", "message": '"auto" tool choice requires --enable-auto-tool-choice',
          "type": "BadRequestError", "param": None, "code": 400},
         '"auto" tool choice requires --enable-auto-tool-choice (BadRequestError)'),  # vLLM
        ({"error": "invalid tool call arguments"}, "invalid tool call arguments"),
        (b"<html>Bad Gateway</html>", "Bad Gateway"),  # HTML is shown as its text
    ],
)
def test_error_bodies_are_readable(server: FakeOpenAI, provider: OpenAIProvider,
                                   store: Store, body: object, expected: str) -> None:
    from fake_openai import Reply

    server.add(Reply(status=400, body=body))
    with pytest.raises(ProviderError) as info:
        Agent(provider, store.session("s")).run("hi")
    assert str(info.value) == f"{provider.url} answered 400: {expected}"
    assert info.value.status == 400
    assert len(server.requests) == 1  # a 400 is not retried


def test_404_hints_at_v1(server: FakeOpenAI, store: Store) -> None:
    provider = OpenAIProvider(server.url.removesuffix("/v1"), "m")
    with pytest.raises(ProviderError, match="end in /v1"):
        Agent(provider, store.session("s")).run("hi")
    provider.close()


def test_garbage_reply(server: FakeOpenAI, provider: OpenAIProvider, store: Store) -> None:
    from fake_openai import Reply

    server.add(Reply(body=b"not json at all"), Reply(body={"choices": []}))
    agent = Agent(provider, store.session("s"))
    with pytest.raises(ProviderError, match="not JSON"):
        agent.run("hi")
    with pytest.raises(ProviderError, match="no choices"):
        agent.run("hi")


KEY = "sk-test-SECRET-4f9c2b7e1d"


def test_api_key_never_reaches_the_store(tmp_path: Path, server: FakeOpenAI,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY_VAR", KEY)
    provider = OpenAIProvider(server.url, "m", api_key_env="MY_KEY_VAR", backoff=0.01,
                              max_retries=1)
    assert KEY not in repr(provider)
    # Servers echo a bad key back in their error message: that text is recorded, so it must
    # be scrubbed first.
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "auth"}}
    server.add(error(500, echo), message("hello"), error(401, echo))
    with open_store(tmp_path / "s") as store:
        agent = Agent(provider, store.session("s"))
        agent.run("hi")
        with pytest.raises(ProviderError) as info:
            agent.run("again")
        assert KEY not in str(info.value) and "***" in str(info.value)
        # Read the files while the WAL is live, and again after close (checkpointed).
        assert not any(KEY.encode() in f.read_bytes() for f in (tmp_path / "s").iterdir())
    assert server.request_headers[0]["Authorization"] == f"Bearer {KEY}"
    files = list((tmp_path / "s").iterdir())
    assert files
    for f in files:
        data = f.read_bytes()
        assert KEY.encode() not in data, f
        assert b"4f9c2b7e1d" not in data
    provider.close()


def test_no_key_no_header(server: FakeOpenAI, store: Store,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.add(message("hi"))
    provider = OpenAIProvider(server.url, "m")
    Agent(provider, store.session("s")).run("hi")
    assert "Authorization" not in server.request_headers[0]
    provider.close()
