"""The seed's program end to end: day 1, day 2 reload, a fork, the original untouched."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import Town, quest_tools
from fake_openai import FakeOpenAI, Reply, call, message, stream

from sesstree import Agent, Node, OpenAIProvider, Store, open_store, tool

DAY1 = "I need to get into the Cave of Echoes. Find out what it takes, and get what you can."
DAY2 = "I got the Silver Key from the mayor's daughter. What now?"
WEST = "Suppose the key doesn't fit. Is there another way in?"


def day1_script() -> list[Reply]:
    return [
        message(tool_calls=[call("talk_to", '{"npc": "innkeeper"}', id="call_a")]),
        message(tool_calls=[call("buy", '{"item": "lantern"}', id="call_b")]),
        message("You need the Silver Key; I bought a lantern to trade for it."),
    ]


def test_seed_scenario(tmp_path: Path, server: FakeOpenAI, provider: OpenAIProvider) -> None:
    town = Town()
    tools = quest_tools(town)
    server.add(*day1_script())
    with open_store(tmp_path / "sessions") as store:
        day1 = Agent(provider=provider, tools=tools, session=store.session("quest-1"))
        answer = day1.run(DAY1)
        assert answer == "You need the Silver Key; I bought a lantern to trade for it."
        assert town.said == ["innkeeper"] and town.gold == 6
        day1_messages = day1.messages()
        assert len(day1_messages) == 6
        assert [n.type for n in day1.session.events()] == [
            "turn/start", "user/message",
            "step/start", "assistant/message", "usage", "tool/call", "tool/result", "step/end",
            "step/start", "assistant/message", "usage", "tool/call", "tool/result", "step/end",
            "step/start", "assistant/message", "usage", "step/end",
            "turn/end",
        ]
    # What the model was sent: the tools, and on each step the whole history so far.
    first, _second, third = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["talk_to", "buy"]
    assert first["tools"][0]["function"]["parameters"]["properties"]["npc"]["type"] == "string"
    assert first["messages"] == [{"role": "user", "content": DAY1}]
    assert third["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_b", "content": "lantern bought for 4 gold; 6 gold left"
    }
    assert "tool_choice" not in first and "stream" not in first

    # Day 2: a new process, a new store handle, the same session name.
    server.add(message("Go to the cave at dawn."), message("Try the west tunnel."))
    with open_store(tmp_path / "sessions") as store:
        day2 = Agent(provider=provider, tools=tools, session=store.session("quest-1"))
        assert day2.messages() == day1_messages
        day2.run(DAY2)
        assert server.requests[3]["messages"][:6] == third["messages"] + [
            {"role": "assistant", "content": "You need the Silver Key; I bought a lantern to "
             "trade for it."}
        ]
        quest1 = day2.messages()
        west = day2.fork("quest-2")
        west.run(WEST)
        assert len(west.messages()) == 10
        assert west.messages()[:8] == quest1
        assert west.messages()[-1]["content"] == "Try the west tunnel."
    with open_store(tmp_path / "sessions") as store:
        assert store.session("quest-1").messages() == quest1  # untouched by the fork
        assert len(store.session("quest-2").messages()) == 10
    assert server.remaining == 0


def test_subscribers_see_every_event_in_order(
    server: FakeOpenAI, provider: OpenAIProvider, tmp_path: Path
) -> None:
    server.add(*day1_script())
    seen: list[Node] = []
    with open_store(tmp_path / "s") as store:
        agent = Agent(provider, store.session("q"), quest_tools(Town()), system="Be brief.")
        unsubscribe = agent.subscribe(seen.append)
        agent.run(DAY1)
        assert seen == agent.session.events()
        assert seen[0].type == "system/message"
        unsubscribe()
        server.add(message("ok"))
        agent.run("again")
        assert len(seen) < len(agent.session.events())
        agent.flush()
        asyncio.run(agent.aflush())


def _run_both(tmp_path: Path, script: list[Reply], *, stream_mode: bool) -> list[list[str]]:
    ids: list[list[str]] = []
    for mode in ("sync", "async"):
        with FakeOpenAI() as fake, open_store(tmp_path / mode) as store:
            fake.add(*script)
            p = OpenAIProvider(fake.url, "scripted", backoff=0.01)
            agent = Agent(p, store.session("quest-1"), quest_tools(Town()),
                          stream=stream_mode, chunk_interval=0)
            if mode == "sync":
                agent.run(DAY1)
            else:
                asyncio.run(agent.arun(DAY1))
            p.close()
            ids.append([str(n.id) for n in agent.session.events()])
    return ids


def test_async_parity_non_streaming(tmp_path: Path) -> None:
    sync_ids, async_ids = _run_both(tmp_path, day1_script(), stream_mode=False)
    assert len(sync_ids) == 19
    assert sync_ids == async_ids


def test_async_parity_streaming(tmp_path: Path) -> None:
    from fake_openai import chunk

    tool_stream = Reply(events=[
        chunk({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "talk_to", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"npc": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"mayor"}'}}]}),
        chunk({}, "tool_calls"),
    ])
    script = [tool_stream, stream("The mayor ", "says: ", "bring a lantern.")]
    sync_ids, async_ids = _run_both(tmp_path, script, stream_mode=True)
    assert sync_ids == async_ids
    with open_store(tmp_path / "sync") as store:
        events = store.session("quest-1").events()
    chunks = [n.data for n in events if n.type == "assistant/chunk"]
    # Every delta is a chunk at interval 0; the chunks of a step add up to its message.
    assert "".join(c.get("content", "") for c in chunks) == "The mayor says: bring a lantern."
    assert "".join(a for c in chunks for t in c.get("tool_calls", [])
                   if (a := t.get("arguments"))) == '{"npc": "mayor"}'
    messages = [n.data for n in events if n.type == "assistant/message"]
    assert messages[0]["tool_calls"][0]["function"] == {
        "name": "talk_to", "arguments": '{"npc": "mayor"}'}
    assert messages[1]["content"] == "The mayor says: bring a lantern."
    assert any(n.type == "usage" for n in events)


def test_async_tools_run_under_arun(server: FakeOpenAI, provider: OpenAIProvider,
                                    store: Store) -> None:
    calls: list[str] = []

    @tool
    async def wait_for(event: str, seconds: float = 0.0) -> dict[str, object]:
        """Wait for something to happen."""
        await asyncio.sleep(seconds)
        calls.append(event)
        return {"happened": event}

    server.add(message(tool_calls=[call("wait_for", '{"event": "dawn", "seconds": 0.01}')]),
               message("Dawn came."))
    agent = Agent(provider, store.session("a"), [wait_for])
    assert asyncio.run(agent.arun("wait")) == "Dawn came."
    assert calls == ["dawn"]
    assert agent.messages()[2]["content"] == '{"happened":"dawn"}'
    # Under the sync run an async tool cannot be awaited: the model is told, nothing crashes.
    server.add(message(tool_calls=[call("wait_for", '{"event": "dusk"}', id="c2")]),
               message("ok"))
    agent.run("again")
    assert "use Agent.arun" in agent.messages()[-2]["content"]
    assert calls == ["dawn"]


def test_streamed_chunks_are_batched_by_time(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    pieces = [f"w{i} " for i in range(40)]
    server.add(stream(*pieces))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=60)
    assert agent.run("talk") == "".join(pieces)
    chunks = [n.data for n in agent.session.events() if n.type == "assistant/chunk"]
    # The first delta at once, the rest in the one batch written when the stream ended.
    assert len(chunks) == 2
    assert "".join(c["content"] for c in chunks) == "".join(pieces)
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


def test_example_runs_offline(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSTREE_")}
    env["PYTHONPATH"] = str(root / "src")
    out = subprocess.run([sys.executable, str(root / "examples" / "quest.py")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "(8 messages read back; day 1 ended with 8)" in out
    assert "quest-1: 10 messages, untouched by the fork: True" in out
    assert "calls buy(" in out
    with open_store(tmp_path / "sessions") as store:
        assert len(store.session("quest-2").messages()) == 14


def test_arun_records_without_holding_up_the_event_loop(
        server: FakeOpenAI, provider: OpenAIProvider, store: Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A store on a server answers each append in a round trip; under arun the recording
    # runs in a worker thread. Here the first write waits until a task on the loop has run:
    # were the write on the loop, that task could not run and the write would give up.
    import threading

    server.add(message("Ask the mayor."))
    loop_ran = threading.Event()
    saw_the_loop_run: list[bool] = []
    real_commit = store.backend.commit

    def slow_commit(*args: Any, **kwargs: Any) -> None:
        if not saw_the_loop_run:
            saw_the_loop_run.append(loop_ran.wait(timeout=5))
        real_commit(*args, **kwargs)

    monkeypatch.setattr(store.backend, "commit", slow_commit)
    agent = Agent(provider, store.session("q"), [])

    async def main() -> str:
        running = asyncio.ensure_future(agent.arun("Where is the key?"))
        await asyncio.sleep(0)
        loop_ran.set()
        return await running

    assert asyncio.run(main()) == "Ask the mayor."
    assert saw_the_loop_run == [True]
    assert [m["role"] for m in store.messages("q")] == ["user", "assistant"]


def test_a_turn_is_one_reflog_entry_sync_and_async(tmp_path: Path) -> None:
    for mode in ("sync", "async"):
        with FakeOpenAI() as fake, open_store(tmp_path / mode) as store:
            fake.add(*day1_script(), message("Go at dawn."))
            p = OpenAIProvider(fake.url, "scripted", backoff=0.01)
            agent = Agent(p, store.session("q"), quest_tools(Town()))
            if mode == "sync":
                agent.run(DAY1)
            else:
                asyncio.run(agent.arun(DAY1))
            after_day1 = agent.session.head
            agent.run("And then?\nTell me.")
            p.close()
            log = store.reflog("q")
            # 19 events, then 7: two entries, one a turn, named after its prompt.
            assert [e.reason for e in log] == [
                f"run: {DAY1[:57]}... (19 moves)", "run: And then?\\nTell me. (7 moves)"]
            assert (log[0].old, log[0].new, log[1].old) == (None, after_day1, after_day1)
            assert store.resolve("q@{1}") == after_day1
