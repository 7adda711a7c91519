"""The Agents SDK Session adapter, checked against the real openai-agents package."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sesstree import Store
from sesstree.interop.agents_sdk import SesstreeSession

agents = pytest.importorskip("agents")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_satisfies_the_protocol(store: Store) -> None:
    from agents.memory import Session

    assert isinstance(SesstreeSession("s", store), Session)


def test_round_trip_pop_and_clear(store: Store) -> None:
    s = SesstreeSession("chat", store)
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "it is 42"}]},
    ]
    run(s.add_items(items))
    assert run(s.get_items()) == items
    assert run(s.get_items(limit=2)) == items[2:]
    assert store.messages("chat")[-1] == {"role": "assistant", "content": "it is 42"}
    head = store.session_head("chat")
    assert run(s.pop_item()) == items[-1]
    assert run(s.get_items()) == items[:3]
    assert store.reflog("chat")[-1].old == head  # undoable
    run(s.clear_session())
    assert run(s.get_items()) == []
    assert not store.has_session("chat") and store.reflog("chat")[-1].new is None
    run(s.add_items(items[:1]))
    assert run(s.pop_item()) == items[0]
    assert run(s.pop_item()) is None


def test_with_sqlite_session_items(store: Store) -> None:
    """Items the SDK's own SQLiteSession stores come back equal from ours."""
    from agents import SQLiteSession

    items: list[Any] = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    theirs = SQLiteSession("t")
    run(theirs.add_items(items))
    ours = SesstreeSession("t", store)
    run(ours.add_items(run(theirs.get_items())))
    assert run(ours.get_items()) == run(theirs.get_items())


def test_store_work_never_blocks_the_event_loop(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # A store on a server answers in a round trip; the SDK's event loop must keep running
    # meanwhile. The store's read below waits until a task on the loop has run: if the read
    # ran on the loop itself, that task could not run and the read would give up waiting.
    import threading

    s = SesstreeSession("chat", store)
    run(s.add_items([{"role": "user", "content": "hi"}]))
    loop_ran = threading.Event()
    real_chain = store.backend.chain
    saw_the_loop_run: list[bool] = []

    def slow_chain(*args: Any, **kwargs: Any) -> Any:
        saw_the_loop_run.append(loop_ran.wait(timeout=5))
        return real_chain(*args, **kwargs)

    monkeypatch.setattr(store.backend, "chain", slow_chain)

    async def main() -> list[Any]:
        async def tick() -> None:
            loop_ran.set()

        reading = asyncio.ensure_future(s.get_items())
        await asyncio.sleep(0)  # the read starts
        await tick()
        return await reading

    assert run(main()) == [{"role": "user", "content": "hi"}]
    assert saw_the_loop_run == [True]
