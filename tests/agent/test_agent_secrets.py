"""The API key never reaches the store, a log or the terminal, whatever the server sends back.

Each case is a loopback server (or proxy) that echoes the key on one path: an error status,
a 200 with an error body, a body with no choices, garbage, a stream's garbage or error event,
the reply itself, a broken status line that httpx quotes in its exception, retries, the
max-turns path. After each, the key's bytes must be in no store file (the database and its
WAL, read while the store is open and after it is closed), in no exception text, and in
nothing printed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import Town, quest_tools
from fake_openai import FakeOpenAI, Reply, call, chunk, error, message

from sesstree import (
    Agent,
    IncompleteReplyError,
    MaxTurnsExceeded,
    OpenAIProvider,
    SesstreeError,
    Store,
    open_store,
)
from sesstree import tool as make_tool
from sesstree.agent.command import run

KEY = "sk-proj-TOPSECRET-7Qz9x2Lm4Kp8Vn3B"
HEADER_KEY = "azure-HDRSECRET-55aa66bb77cc"
#: Pieces of the key that must not be left behind by a cut, a split or a partial scrub either.
PIECES = [KEY, KEY[:14], KEY[8:], KEY[9:20], KEY[-12:], HEADER_KEY, HEADER_KEY[6:]]


def _echo(text: str) -> str:
    return f"Incorrect API key provided: {text}. You can find your key at https://..."


def _chunked_then(value: str) -> bytes:
    """A chunked stream whose second chunk header is ``value``: httpx's error quotes it."""
    event = b"data: " + json.dumps(chunk({"content": "Half"})).encode() + b"\n\n"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(event):x}\r\n".encode() + event
            + b"\r\n" + value.encode() + b"\r\n")


def _escaped(value: str) -> str:
    # The key as a JSON string with every character \u-escaped: still the key once decoded.
    return "".join(f"\\u{ord(c):04x}" for c in value)


#: name -> (replies, what the run raises (None: it answers), stream?)
CASES: dict[str, tuple[Callable[[str], list[Reply]], type[Exception] | None, bool]] = {
    "401 error body": (lambda k: [error(401, {"error": {"message": _echo(k),
                                                        "type": "invalid_api_key"}})],
                       SesstreeError, False),
    "401 echoes the header's key": (
        lambda k: [error(401, {"error": {"message": _echo(HEADER_KEY)}})], SesstreeError, False),
    "stream splits the key over events": (
        lambda k: [Reply(events=[chunk({"content": "Your key: " + k[:9]}),
                                 chunk({"content": k[9:20]}), chunk({"content": k[20:] + "."}),
                                 chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {
                                     "name": "talk_to", "arguments": '{"npc": "' + k[:5]}}]}),
                                 chunk({"tool_calls": [{"index": 0, "function": {
                                     "arguments": k[5:] + '"}'}}]}),
                                 chunk({}, "tool_calls")])],
        MaxTurnsExceeded, True),
    "200 with an error body": (lambda k: [Reply(body={"error": {"message": _echo(k)}})],
                               SesstreeError, False),
    "200 vLLM error shape": (lambda k: [Reply(body={"object": "error", "message": _echo(k)})],
                             SesstreeError, False),
    "200 with no choices": (lambda k: [Reply(body={"id": "x", "detail": _echo(k)})],
                            SesstreeError, False),
    "200 garbage": (lambda k: [Reply(body=f"<html><p>{_echo(k)}</p></html>".encode(),
                                     content_type="text/html")], SesstreeError, False),
    "200 key in \\u escapes": (
        lambda k: [Reply(body=('{"error": {"message": "key ' + _escaped(k) + '"}}').encode())],
        SesstreeError, False),
    "500 then retried": (lambda k: [error(500, {"error": {"message": _echo(k)}}),
                                    message("fine")], None, False),
    "429 retried until given up": (
        lambda k: [error(429, {"error": {"message": _echo(k)}}) for _ in range(2)],
        SesstreeError, False),
    "broken status line (httpx exception)": (
        lambda k: [Reply(raw=f"HTTP/1.1 {k} nonsense\r\n\r\n".encode()) for _ in range(2)],
        SesstreeError, False),
    "stream garbage event": (lambda k: [Reply(events=[f"data: not json {_echo(k)}"])],
                             SesstreeError, True),
    "stream error event": (lambda k: [Reply(events=[chunk({"content": "a"}),
                                                    {"error": {"message": _echo(k)}}])],
                           SesstreeError, True),
    "stream echoes the key in the reply": (
        lambda k: [Reply(events=[chunk({"content": f"Your key: {k}"}),
                                 chunk({"reasoning_content": k}), chunk({}, "stop")])],
        None, True),
    "stream cut after echoing the key": (
        lambda k: [Reply(events=[chunk({"content": _echo(k)})], done=False) for _ in range(2)],
        IncompleteReplyError, True),
    "stream cut, the key in the broken chunk httpx quotes": (
        lambda k: [Reply(raw=_chunked_then(k)) for _ in range(2)], IncompleteReplyError, True),
    "JSON reply echoes the key": (
        lambda k: [message(f"Your key: {k}", extra_field={"key": k})], None, False),
    "max turns, key in the call and its result": (
        lambda k: [message(f"calling with {k}",
                           tool_calls=[call("talk_to", json.dumps({"npc": k}))])],
        MaxTurnsExceeded, False),
}


def _leaks(blobs: list[bytes]) -> list[str]:
    return [p for p in PIECES for b in blobs if p.encode() in b]


def _store_files(path: Path) -> list[bytes]:
    return [f.read_bytes() for f in sorted(path.iterdir()) if f.is_file()]


#: The async path shares the reading code; these cases run under asyncio too.
ASYNC_TOO = {"200 with an error body", "broken status line (httpx exception)",
             "stream splits the key over events", "stream error event",
             "stream cut after echoing the key", "401 error body",
             "stream cut, the key in the broken chunk httpx quotes"}


@pytest.mark.parametrize(("case", "mode"), [(c, "sync") for c in sorted(CASES)]
                         + [(c, "async") for c in sorted(ASYNC_TOO)])
def test_the_key_echoed_on_any_path_is_never_recorded_or_shown(
    tmp_path: Path, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, case: str, mode: str,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log requests at DEBUG
    monkeypatch.setenv("LEAKY_KEY", KEY)
    replies, raises, streamed = CASES[case]
    server.add(*replies(KEY))
    provider = OpenAIProvider(server.url, "m", api_key_env="LEAKY_KEY", max_retries=1,
                              backoff=0.01, max_backoff=0.02, headers={"api-key": HEADER_KEY})
    texts: list[str] = []
    with open_store(tmp_path / "s") as store:
        agent = Agent(provider, store.session("s"), quest_tools(Town()), stream=streamed,
                      max_turns=1, chunk_interval=0)
        try:
            if mode == "sync":
                texts.append(agent.run("hi"))
            else:
                texts.append(asyncio.run(agent.arun("hi")))
        except Exception as exc:
            assert raises is not None and isinstance(exc, raises), repr(exc)
            chained: BaseException | None = exc
            while chained is not None:  # what a traceback or an error reporter walks
                texts += [str(chained), repr(chained)]
                chained = chained.__cause__ or chained.__context__
        else:
            assert raises is None, f"expected {raises}"
        texts += [json.dumps(n.data) for n in agent.session.events()]
        live = _store_files(tmp_path / "s")  # the WAL holds the recent commits
    provider.close()
    assert server.request_headers[0]["Authorization"] == f"Bearer {KEY}"
    out, err = capfd.readouterr()
    blobs = [t.encode() for t in texts] + live + _store_files(tmp_path / "s")
    blobs += [out.encode(), err.encode(), caplog.text.encode()]
    assert _leaks(blobs) == []
    assert "***" in "".join(texts)  # the echo was there, and scrubbed


def test_a_tool_that_prints_the_key_does_not_record_it(tmp_path: Path, server: FakeOpenAI,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    @make_tool
    def env(name: str) -> str:
        """Read an environment variable."""
        return os.environ.get(name, "")

    server.add(message(tool_calls=[call("env", '{"name": "OPENAI_API_KEY"}')]), message("ok"))
    provider = OpenAIProvider(server.url, "m")
    with open_store(tmp_path / "s") as store:
        agent = Agent(provider, store.session("s"), [env])
        assert agent.run("what is my key?") == "ok"
        assert server.requests[1]["messages"][-1]["content"] == "***"
    provider.close()
    assert _leaks(_store_files(tmp_path / "s")) == []


def test_a_key_http_cannot_carry_is_one_line_without_the_key(store: Store,
                                                             server: FakeOpenAI) -> None:
    provider = OpenAIProvider(server.url, "m", api_key=KEY + "é", max_retries=0)
    agent = Agent(provider, store.session("s"))
    with pytest.raises(SesstreeError, match="cannot carry") as info:
        agent.run("hi")
    assert KEY not in str(info.value) and not server.requests
    assert not any(KEY in json.dumps(n.data) for n in agent.session.events())


class _Locator:
    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> Store:
        return open_store(self.path)


@pytest.mark.parametrize("stream", [True, False])
def test_sess_run_never_prints_the_key(tmp_path: Path, server: FakeOpenAI, stream: bool) -> None:
    @click.group()
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        ctx.obj = _Locator(tmp_path / "store")

    cli.add_command(run)
    echo: Any = {"error": {"message": _echo(KEY)}}
    server.add(error(500, echo, retry_after="0"), Reply(body=echo),  # a retry, a 200 error
               Reply(events=[chunk({"content": f"Your key is {KEY}"}), chunk({}, "stop")])
               if stream else message(f"Your key is {KEY}"))
    runner = CliRunner()
    env = {"OPENAI_API_KEY": KEY}
    base = ["--base-url", server.url, "--model", "m", "--stream" if stream else "--no-stream"]
    first = runner.invoke(cli, ["run", "s", "hi", *base], env=env)
    second = runner.invoke(cli, ["run", "s", *base], env=env)  # retry the pending turn
    assert second.exit_code == 0, second.output
    assert "Your key is ***" in second.stdout
    blobs = [r.stdout.encode() + r.stderr.encode() + repr(r.exception).encode()
             for r in (first, second)]
    assert _leaks(blobs + _store_files(tmp_path / "store")) == []
    assert "***" in first.stderr


def test_a_password_or_key_in_the_base_url_is_never_shown(tmp_path: Path,
                                                          server: FakeOpenAI) -> None:
    # The password in user:password@host is sent as a Basic Authorization header.
    host = server.url.removeprefix("http://")
    url = f"http://me:{KEY}@{host}?api-key={HEADER_KEY}&v=1"
    provider = OpenAIProvider(url, "m", max_retries=1, backoff=0.01)
    assert KEY not in repr(provider) and HEADER_KEY not in repr(provider)
    assert provider.shown_url.startswith("http://me:***@") and "api-key=***&v=1" in provider.shown_url
    server.add(error(500), error(502))
    with open_store(tmp_path / "s") as store:
        agent = Agent(provider, store.session("s"))
        with pytest.raises(SesstreeError) as info:
            agent.run("hi")
        texts = [str(info.value)] + [json.dumps(n.data) for n in agent.session.events()]
    provider.close()
    assert len(server.requests) == 2  # the 500 reached the endpoint and was retried
    assert server.request_headers[0]["Authorization"].startswith("Basic ")
    assert "me:***@" in texts[0]
    assert _leaks([t.encode() for t in texts] + _store_files(tmp_path / "s")) == []
