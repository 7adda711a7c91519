"""A stream cut before its reply was whole is retried, and every attempt stays recorded.

Each server here is a real loopback HTTP server that cuts its stream the way servers and
proxies do: it closes the connection after some chunks with no ``finish_reason`` and no
``[DONE]``, resets it, ends a chunked body short, or stalls past the read timeout. The loop
sends the same request again (the provider's backoff and ``max_retries``), records the cut
attempt as a step ended ``incomplete`` with its chunks, and never sends those chunks back.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Town, quest_tools
from fake_openai import FakeOpenAI, Reply, chunk, error, stream

from sesstree import Agent, IncompleteReplyError, OpenAIProvider, ProviderError, Store, open_store
from sesstree.node import Node

KEY = "sk-proj-RETRYSECRET-4Hd8Ws2Qp6Zx"


def _run(agent: Agent, prompt: str, mode: str) -> str:
    return agent.run(prompt) if mode == "sync" else asyncio.run(agent.arun(prompt))


def _cut(*texts: str) -> Reply:
    """A stream that closes after these pieces: no finish_reason, no [DONE], no error."""
    return Reply(events=[chunk({"role": "assistant", "content": ""}),
                         *[chunk({"content": t}) for t in texts]], done=False)


def _outline(events: list[Node]) -> list[str]:
    """The events, a step's ends marked: ``step/end!`` for one ended incomplete."""
    out = []
    for n in events:
        if n.type == "step/end" and n.data.get("incomplete"):
            out.append("step/end!")
        elif n.type == "step/start" and "attempt" in n.data:
            out.append(f"step/start#{n.data['attempt']}")
        else:
            out.append(n.type)
    return out


def _retries(events: list[Node]) -> list[dict[str, Any]]:
    return [n.data for n in events if n.type == "error" and n.data["kind"] == "retry"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_cut_once_is_retried_and_answers(server: FakeOpenAI, provider: OpenAIProvider,
                                                  store: Store, mode: str) -> None:
    server.add(_cut("The key is ", "under"), stream("The key is ", "under the mat."))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    assert _run(agent, "where is the key?", mode) == "The key is under the mat."
    events = agent.session.events()
    assert _outline(events) == [
        "turn/start", "user/message", "step/start",
        "assistant/chunk", "assistant/chunk", "step/end!",  # the cut attempt, as it arrived
        "error", "step/start#2",
        "assistant/chunk", "assistant/chunk", "assistant/message", "usage", "step/end",
        "turn/end"]
    cut_end = next(n.data for n in events if n.type == "step/end")
    assert cut_end == {"step": 1, "finish_reason": None, "incomplete": True,
                       "cut_by": "upstream"}
    (retry,) = _retries(events)
    assert retry["attempt"] == 1 and retry["status"] is None and retry["cut_after"] == 3
    assert retry["max_attempts"] == 4 and 0 <= retry["delay"] <= 0.05
    assert "ended without a finish_reason or [DONE] after 3 events" in retry["message"]
    assert events[-1].data == {"reason": {"kind": "answer"}, "steps": 1}
    # The same request twice: the cut changes nothing of what is sent.
    assert len(server.requests) == 2 and server.requests[0] == server.requests[1]
    # The partial reply is a record, not a message: the history holds the answer alone, and
    # the next turn's request does not carry the text of the cut attempt.
    assert [m["content"] for m in agent.session.messages()] == [
        "where is the key?", "The key is under the mat."]
    server.add(stream("Yes."))
    assert _run(agent, "sure?", mode) == "Yes."
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == "The key is under the mat."
    assert "The key is under\"" not in json.dumps(sent)  # the cut text ends in "under"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_that_is_always_cut_gives_up_with_every_attempt_recorded(
        server: FakeOpenAI, store: Store, mode: str) -> None:
    provider = OpenAIProvider(server.url, "m", max_retries=2, backoff=0.01, max_backoff=0.05)
    server.add(*[_cut(f"try {i}") for i in range(3)])
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    with pytest.raises(IncompleteReplyError) as info:
        _run(agent, "hi", mode)
    assert "(gave up after 3 attempts, all 3 cut)" in str(info.value)
    assert len(server.requests) == 3
    events = agent.session.events()
    assert _outline(events) == [
        "turn/start", "user/message",
        "step/start", "assistant/chunk", "step/end!", "error",
        "step/start#2", "assistant/chunk", "step/end!", "error",
        "step/start#3", "assistant/chunk", "step/end!",
        "error", "turn/end"]
    chunks = [n.data["content"] for n in events if n.type == "assistant/chunk"]
    assert chunks == ["try 0", "try 1", "try 2"]  # each attempt's chunks, in its own step
    assert [r["attempt"] for r in _retries(events)] == [1, 2]
    final = events[-2].data
    assert final["kind"] == "provider" and final["type"] == "IncompleteReplyError"
    assert events[-1].data["reason"]["kind"] == "incomplete"
    assert agent.session.messages()[-1] == {"role": "user", "content": "hi"}  # pending
    # Asking again later works, and sends no part of the cut attempts.
    server.add(stream("At last."))
    assert (agent.resume() if mode == "sync" else asyncio.run(agent.aresume())) == "At last."
    assert "try " not in json.dumps(server.requests[-1])
    provider.close()


def test_a_stream_cut_before_any_chunk_is_retried(server: FakeOpenAI, provider: OpenAIProvider,
                                                 store: Store) -> None:
    server.add(Reply(events=[], done=False), stream("Whole."))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    assert agent.run("hi") == "Whole."
    events = agent.session.events()
    assert _outline(events)[2:6] == ["step/start", "step/end!", "error", "step/start#2"]
    assert _retries(events)[0]["cut_after"] == 0
    assert "after 0 events" in _retries(events)[0]["message"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_cut_in_a_tool_calls_arguments_never_runs_the_partial_call(
        server: FakeOpenAI, provider: OpenAIProvider, store: Store, mode: str) -> None:
    def buying(arguments: list[str], finish: bool) -> Reply:
        frags = [chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                        "function": {"name": "buy", "arguments": arguments[0]}}]})]
        frags += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]})
                  for a in arguments[1:]]
        if finish:
            frags.append(chunk({}, "tool_calls"))
        return Reply(events=frags, done=finish)

    server.add(buying(['{"it', 'em": "lan'], finish=False),
               buying(['{"it', 'em": "lantern"}'], finish=True),
               stream("Bought."))
    town = Town()
    agent = Agent(provider, store.session("s"), quest_tools(town), stream=True,
                  chunk_interval=0)
    assert _run(agent, "buy a lantern", mode) == "Bought."
    assert town.gold == 6  # bought once, from the whole call
    events = agent.session.events()
    calls = [n.data for n in events if n.type == "tool/call"]
    assert calls == [{"id": "c1", "name": "buy", "arguments": '{"item": "lantern"}'}]
    first_end = next(i for i, n in enumerate(events) if n.type == "step/end")
    assert events[first_end].data["incomplete"] is True
    assert not any(n.type in ("tool/call", "assistant/message") for n in events[:first_end])
    # The request after the tool ran carries the whole call, never the cut one.
    sent = server.requests[-1]["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"item": "lantern"}'
    assert "lan\"" not in json.dumps(server.requests[-1])


def test_a_stream_always_cut_in_a_tool_call_runs_nothing(
        server: FakeOpenAI, store: Store) -> None:
    provider = OpenAIProvider(server.url, "m", max_retries=1, backoff=0.01)
    cut = Reply(events=[chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                               "function": {"name": "buy",
                                                            "arguments": '{"item": "la'}}]})],
                done=False)
    server.add(cut, cut)
    town = Town()
    agent = Agent(provider, store.session("s"), quest_tools(town), stream=True)
    with pytest.raises(IncompleteReplyError, match=r"gave up after 2 attempts, all 2 cut"):
        agent.run("buy a lantern")
    types = [n.type for n in agent.session.events()]
    assert town.gold == 10 and "tool/call" not in types and "assistant/message" not in types
    provider.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_connection_reset_mid_stream_is_retried(server: FakeOpenAI, provider: OpenAIProvider,
                                                  store: Store, mode: str) -> None:
    reset = Reply(events=[chunk({"content": "Once"}), chunk({"content": " upon"}),
                          chunk({"content": "never sent"})], reset_after=2)
    server.add(reset, stream("Once upon a time."))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    assert _run(agent, "a story", mode) == "Once upon a time."
    (retry,) = _retries(agent.session.events())
    assert "broke off" in retry["message"] and retry["cut_after"] == 2
    assert [n.data["content"] for n in agent.session.events()
            if n.type == "assistant/chunk"][:2] == ["Once", " upon"]


def test_a_chunked_body_ended_short_is_retried(server: FakeOpenAI, provider: OpenAIProvider,
                                               store: Store) -> None:
    # HTTP/1.1 chunked encoding with no last chunk: httpx sees a remote protocol error.
    event = b"data: " + json.dumps(chunk({"content": "Half"})).encode() + b"\n\n"
    raw = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(event):x}\r\n".encode() + event
           + b"\r\n")
    server.add(Reply(raw=raw), stream("Whole."))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    assert agent.run("hi") == "Whole."
    (retry,) = _retries(agent.session.events())
    assert "RemoteProtocolError" in retry["message"] and retry["cut_after"] == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_stalled_mid_reply_is_retried(server: FakeOpenAI, store: Store,
                                               mode: str) -> None:
    provider = OpenAIProvider(server.url, "m", timeout=0.2, backoff=0.01)
    server.add(Reply(events=[chunk({"content": "Once upon"})], stall_after=1),
               stream("Once upon a time."))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    assert _run(agent, "a story", mode) == "Once upon a time."
    (retry,) = _retries(agent.session.events())
    assert "stalled: nothing for 0.2 s after 1 event" in retry["message"]
    provider.close()


def test_a_stall_before_the_reply_starts_is_not_retried(server: FakeOpenAI, store: Store) -> None:
    # Only the role arrived: the server may still be reading the prompt, and a second
    # request would start that work over, behind the first.
    provider = OpenAIProvider(server.url, "m", timeout=0.2, backoff=0.01)
    server.add(Reply(events=[chunk({"role": "assistant", "content": ""})], stall_after=1))
    agent = Agent(provider, store.session("s"), stream=True)
    with pytest.raises(ProviderError, match=r"stalled: nothing for 0\.2 s after 1 event"):
        agent.run("hi")
    assert len(server.requests) == 1 and not _retries(agent.session.events())
    provider.close()


def test_cuts_and_other_failures_share_one_budget(server: FakeOpenAI, store: Store) -> None:
    provider = OpenAIProvider(server.url, "m", max_retries=2, backoff=0.01)
    server.add(_cut("a"), error(503), error(503))
    agent = Agent(provider, store.session("s"), stream=True)
    with pytest.raises(ProviderError) as info:
        agent.run("hi")
    assert not isinstance(info.value, IncompleteReplyError) and info.value.status == 503
    assert "(gave up after 3 attempts, 1 of them cut)" in str(info.value)
    server.add(error(429, retry_after="0"), _cut("b"), _cut("c"))
    with pytest.raises(IncompleteReplyError, match=r"gave up after 3 attempts, 2 of them cut"):
        agent.resume()
    assert len(server.requests) == 6
    provider.close()


def test_a_provider_without_retries_records_the_cut_attempt(server: FakeOpenAI,
                                                           store: Store) -> None:
    provider = OpenAIProvider(server.url, "m", max_retries=0)
    server.add(_cut("half"))
    agent = Agent(provider, store.session("s"), stream=True)
    with pytest.raises(IncompleteReplyError, match=r"gave up after 1 attempt, cut\)"):
        agent.run("hi")
    assert _outline(agent.session.events())[-4:] == [
        "assistant/chunk", "step/end!", "error", "turn/end"]
    provider.close()


# -- sess run, as a subprocess ------------------------------------------------------------------


def _sess_run(store: Path, server: FakeOpenAI, *args: str) -> subprocess.CompletedProcess[str]:
    if not store.exists():
        open_store(store).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSTREE_", "SESS_"))}
    env["OPENAI_API_KEY"] = KEY
    return subprocess.run(
        [sys.executable, "-c", "from sesstree.cli import main; main()", "--store", str(store),
         "run", *args, "--base-url", server.url, "--model", "m"],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


def _chunked_then(header: str) -> Reply:
    """A chunked stream that sends one chunk, then ``header`` where the next chunk's size
    should be: httpx breaks off with an error that quotes it (here: the key)."""
    event = b"data: " + json.dumps(chunk({"content": "Half"})).encode() + b"\n\n"
    return Reply(raw=b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(event):x}\r\n".encode()
                 + event + b"\r\n" + header.encode() + b"\r\n")


def test_sess_run_retries_a_stream_cut_once_and_answers(tmp_path: Path,
                                                        server: FakeOpenAI) -> None:
    server.add(_cut("The key is ", "under"), stream("The key is ", "under the mat."))
    result = _sess_run(tmp_path / "store", server, "s", "where is the key?")
    assert result.returncode == 0, result.stderr
    # The cut text was shown as it came; the retry is said on stderr; then the answer.
    assert result.stdout == "The key is under\nThe key is under the mat.\n"
    (line,) = result.stderr.splitlines()
    assert line.startswith("sess: stream cut after 3 chunks; retrying (2/4) in ")
    assert line.endswith(f"the stream from {server.url}/chat/completions ended without a "
                         "finish_reason or [DONE] after 3 events")
    assert server.requests[0] == server.requests[1]
    with open_store(tmp_path / "store") as store:
        events = store.session("s").events()
        assert [m["content"] for m in store.session("s").messages()] == [
            "where is the key?", "The key is under the mat."]
    assert "step/end!" in _outline(events) and events[-1].data["reason"] == {"kind": "answer"}
    server.add(stream("Yes."))
    again = _sess_run(tmp_path / "store", server, "s", "sure?")
    assert again.returncode == 0 and again.stdout == "Yes.\n" and again.stderr == ""
    assert [m["content"] for m in server.requests[-1]["messages"]] == [
        "where is the key?", "The key is under the mat.", "sure?"]


def test_sess_run_against_a_server_that_always_cuts_exits_1(tmp_path: Path,
                                                            server: FakeOpenAI) -> None:
    server.add(*[_chunked_then(KEY) for _ in range(4)])
    result = _sess_run(tmp_path / "store", server, "s", "hi")
    assert result.returncode == 1
    assert result.stdout == "Half\n" * 4
    *retries, failed = result.stderr.splitlines()
    assert [r[:len("sess: stream cut after 1 chunk; retrying (2/4)")] for r in retries] == [
        f"sess: stream cut after 1 chunk; retrying ({n}/4)" for n in (2, 3, 4)]
    assert all("RemoteProtocolError: illegal chunk header" in r and "***" in r
               for r in retries)
    assert failed.startswith("Error: the stream from ")
    assert failed.endswith("the reply is incomplete (gave up after 4 attempts, all 4 cut); "
                           "what arrived is recorded, the turn as incomplete: `sess run s` "
                           "retries it")
    assert "Traceback" not in result.stderr
    assert len(server.requests) == 4
    with open_store(tmp_path / "store") as store:
        events = store.session("s").events()
    outline = _outline(events)
    assert outline.count("step/end!") == 4 and len(_retries(events)) == 3
    assert [n.data["content"] for n in events if n.type == "assistant/chunk"] == ["Half"] * 4
    assert events[-1].data["reason"]["kind"] == "incomplete"
    # The key: sent to the server, quoted back in its broken stream, shown and stored nowhere.
    assert server.request_headers[0]["Authorization"] == f"Bearer {KEY}"
    files = [f.read_bytes() for f in (tmp_path / "store").rglob("*") if f.is_file()]
    assert not [b for b in [result.stdout.encode(), result.stderr.encode(), *files]
                if KEY[8:].encode() in b]
