"""Kill a real process running the agent (SIGKILL), then continue the session in another."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Reply, call, chunk, message

from sesstree import (
    Agent,
    MaxTurnsExceeded,
    Node,
    OpenAIProvider,
    SesstreeError,
    Store,
    open_store,
    tool,
)
from sesstree.agent.loop import INTERRUPTED_RESULT

HERE = Path(__file__).parent


@tool
def dig(depth: int) -> str:
    """Dig down."""
    return f"dug {depth} m"


def _run_child(store_dir: Path, server: FakeOpenAI, mode: str,
               ready: Callable[[list[Node]], bool]) -> list[Node]:
    """Start the child, wait until the store shows `ready`, SIGKILL it, return its events."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1] / "src")}
    child = subprocess.Popen([sys.executable, str(HERE / "crash_child.py"), str(store_dir),
                              server.url, mode], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "the child never reached the crash point"
            try:
                with open_store(store_dir, create=False) as store:
                    events = store.session("quest-1").events()
            except SesstreeError:
                events = []  # the child has not created the store (or its tables) yet
            if ready(events):
                break
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stderr:
            child.stderr.close()
    return events


def test_killed_between_tool_call_and_result(tmp_path: Path, server: FakeOpenAI) -> None:
    store_dir = tmp_path / "sessions"
    server.add(message(tool_calls=[call("dig", '{"depth": 3}', id="d1")]))
    seen = _run_child(store_dir, server, "tool",
                      lambda events: bool(events) and events[-1].type == "tool/call")
    assert [n.type for n in seen] == ["turn/start", "user/message", "step/start",
                                      "assistant/message", "usage", "tool/call"]
    # The next run, in this process, sees everything and carries on.
    server.add(message("The digging was interrupted; shall I try again?"))
    with open_store(store_dir) as store:
        provider = OpenAIProvider(server.url, "scripted")
        agent = Agent(provider, store.session("quest-1"), [dig])
        assert agent.session.events() == seen  # nothing acknowledged was lost
        assert agent.run("Where are we?") == "The digging was interrupted; shall I try again?"
        events = agent.session.events()
        provider.close()
    new = events[len(seen):]
    assert [n.type for n in new] == [
        "tool/result", "error", "turn/end",        # settling what the crash left open
        "turn/start", "user/message", "step/start", "assistant/message", "usage", "step/end",
        "turn/end"]
    # It may have dug already: it is not run twice, the model is told.
    assert new[0].data == {"role": "tool", "tool_call_id": "d1", "content": INTERRUPTED_RESULT}
    assert new[2].data == {"reason": {"kind": "interrupted"}}
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]


def test_killed_mid_stream_keeps_the_chunks(tmp_path: Path, server: FakeOpenAI) -> None:
    store_dir = tmp_path / "sessions"
    pieces = ["The cave ", "is north ", "of the "]
    server.add(Reply(events=[chunk({"role": "assistant", "content": p}) for p in pieces],
                     stall_after=len(pieces)))
    seen = _run_child(store_dir, server, "stream",
                      lambda events: sum(n.type == "assistant/chunk" for n in events) == 3)
    assert "".join(n.data["content"] for n in seen if n.type == "assistant/chunk") == \
        "The cave is north of the "
    server.release.set()
    server.add(message("The cave is north of the mill."))
    with open_store(store_dir) as store:
        provider = OpenAIProvider(server.url, "scripted")
        agent = Agent(provider, store.session("quest-1"))
        assert agent.resume() == "The cave is north of the mill."
        provider.close()
        events = agent.session.events()
    assert events[: len(seen)] == seen
    assert [n.type for n in events[len(seen):]][:2] == ["turn/end", "turn/start"]
    assert events[len(seen) + 1].data == {"trigger": {"kind": "resume"}}
    # The partial reply was a record, never a message: the model was sent the prompt only.
    assert server.requests[-1]["messages"] == [{"role": "user", "content": "Dig to the cave."}]


def test_call_that_never_started_is_run_on_resume(server: FakeOpenAI, store: Store,
                                                  provider: OpenAIProvider) -> None:
    # A crash after the assistant message was recorded but before its tool/call: it never ran.
    session = store.session("s")
    session.append("turn/start", {"trigger": {"kind": "user"}})
    session.add_message({"role": "user", "content": "dig"})
    session.add_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": "d9", "type": "function", "function": {"name": "dig", "arguments": '{"depth": 2}'}}
    ]})
    server.add(message("Dug."))
    agent = Agent(provider, session, [dig])
    assert agent.run("and?") == "Dug."
    types = [n.type for n in session.events()]
    assert types[3:7] == ["tool/call", "tool/result", "turn/end", "turn/start"]
    assert session.events()[4].data["content"] == "dug 2 m"
    assert session.derive().problems == []


def test_max_turns(server: FakeOpenAI, provider: OpenAIProvider, store: Store) -> None:
    server.add(*[message(tool_calls=[call("dig", f'{{"depth": {i}}}', id=f"d{i}")])
                 for i in range(3)])
    agent = Agent(provider, store.session("s"), [dig], max_turns=5)
    with pytest.raises(MaxTurnsExceeded, match="no answer after 3 model calls"):
        agent.run("dig forever", max_turns=3)
    last = agent.session.events()[-1]
    assert last.type == "turn/end"
    assert last.data == {"reason": {"kind": "max_turns", "max_turns": 3}}
    assert sum(n.type == "step/start" for n in agent.session.events()) == 3
    # The session stays usable: the next run continues it.
    server.add(message("I stopped digging."))
    assert agent.run("stop") == "I stopped digging."


def test_keyboard_interrupt_is_recorded_as_cancelled(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    @tool
    def ctrl_c() -> str:
        """Press ctrl-c."""
        raise KeyboardInterrupt

    server.add(message(tool_calls=[call("ctrl_c", "")]))
    agent = Agent(provider, store.session("s"), [ctrl_c])
    with pytest.raises(KeyboardInterrupt):
        agent.run("go")
    assert agent.session.events()[-1].data == {
        "reason": {"kind": "cancelled", "by": "KeyboardInterrupt"}}
