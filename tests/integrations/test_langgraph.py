"""A real LangGraph agent on SesstreeSaver, offline: a StateGraph with a messages channel and
a tool node runs turns, is time-travelled and forked with update_state, is resumed in a new
process from the same store folder, and keeps each message once; ``sess log`` reads its
thread without LangGraph."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph_graph import build, texts

from sesstree import open_store
from sesstree.integrations.langgraph import AsyncSesstreeSaver, SesstreeSaver
from sesstree.integrations.langgraph_history import CHECKPOINT, ITEM

HERE = Path(__file__).parent
SRC = str(Path(__file__).parents[2] / "src")
CFG: Any = {"configurable": {"thread_id": "t1"}}
TURN1 = ["human:what is 2+3?", "ai:", "tool:5", "ai:the answer is 5"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(HERE)])}


def _run_turns(folder: Path) -> None:
    with SesstreeSaver(folder) as saver:
        graph = build(saver)
        for q in ("what is 2+3?", "and 10+4?", "and 7+8?"):
            graph.invoke({"messages": [("user", q)]}, CFG)


def test_turns_time_travel_fork_and_resume_in_a_new_process(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    _run_turns(folder)
    with SesstreeSaver(folder) as saver:
        graph = build(saver)
        state = graph.get_state(CFG)
        assert texts(state)[:4] == TURN1 and texts(state)[-1] == "ai:the answer is 15"
        history = list(graph.get_state_history(CFG))
        # Each checkpoint's parent is the one before it: the history is one line.
        assert [h.parent_config["configurable"]["checkpoint_id"] for h in history[:-1]
                if h.parent_config] == [h.config["configurable"]["checkpoint_id"]
                                        for h in history[1:]]
        after_turn1 = next(h for h in history if len(h.values["messages"]) == 4 and not h.next)

        # Time travel: a new question on the state after the first turn is a fork.
        graph.invoke({"messages": [("user", "what is 20+22?")]}, after_turn1.config)
        assert texts(graph.get_state(CFG)) == [*TURN1, "human:what is 20+22?", "ai:", "tool:42",
                                               "ai:the answer is 42"]
        names = {s.name for s in saver.store.sessions()}
        assert names == {"langgraph/t1", "langgraph/t1/branch-2"}
        # The first line is still there, whole.
        assert any(texts(h)[-1] == "ai:the answer is 15" for h in graph.get_state_history(CFG))

        # update_state on an old checkpoint: the last answer edited (same id: replaced).
        old = next(h for h in graph.get_state_history(CFG) if len(h.values["messages"]) == 8
                   and texts(h)[-1] == "ai:the answer is 14")
        last = old.values["messages"][-1]
        items_before = sum(n.type == ITEM for n in saver.store.backend.iter_nodes())
        edited = graph.update_state(old.config, {"messages": [AIMessage("fourteen", id=last.id)]})
        # The edited list keeps its first seven messages where they are: one item is new.
        assert sum(n.type == ITEM for n in saver.store.backend.iter_nodes()) == items_before + 1
        assert texts(graph.get_state(edited))[-2:] == ["tool:14", "ai:fourteen"]
        assert graph.get_state(edited).parent_config["configurable"]["checkpoint_id"] == \
            old.config["configurable"]["checkpoint_id"]
        assert len({s.name for s in saver.store.sessions()}) == 3
        edited_id = edited["configurable"]["checkpoint_id"]

    # A new process resumes the edited fork from the store folder and runs a turn on it.
    script = (
        "import json, sys\n"
        "from langgraph_graph import build, texts\n"
        "from sesstree.integrations.langgraph import SesstreeSaver\n"
        "with SesstreeSaver(sys.argv[1]) as saver:\n"
        "    graph = build(saver)\n"
        "    cfg = {'configurable': {'thread_id': 't1', 'checkpoint_id': sys.argv[2]}}\n"
        "    before = texts(graph.get_state(cfg))\n"
        "    graph.invoke({'messages': [('user', 'and 1+1?')]}, cfg)\n"
        "    print(json.dumps([before, texts(graph.get_state({'configurable': {'thread_id': 't1'}}))]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(folder), edited_id], env=_env(),
                         capture_output=True, text=True, check=True, timeout=120)
    before, after = json.loads(out.stdout)
    assert before[-1] == "ai:fourteen" and len(before) == 8
    assert after == [*before, "human:and 1+1?", "ai:", "tool:2", "ai:the answer is 2"]
    with SesstreeSaver(folder) as saver:
        assert texts(build(saver).get_state(CFG)) == after


def _message_items(folder: Path) -> tuple[int, int, set[bytes]]:
    """(items, checkpoints, distinct item payloads) in the store."""
    with open_store(folder) as store:
        nodes = list(store.backend.iter_nodes())
    items = [n for n in nodes if n.type == ITEM]
    payloads = {n.encoded for n in items}
    return len(items), sum(n.type == CHECKPOINT for n in nodes), payloads


def test_each_message_is_stored_once_across_checkpoints_and_forks(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    _run_turns(folder)
    with SesstreeSaver(folder) as saver:
        graph = build(saver)
        history = list(graph.get_state_history(CFG))
        # Three forks from the state after the first turn, each with a turn of its own.
        start = next(h for h in history if len(h.values["messages"]) == 4 and not h.next)
        for q in ("what is 1+2?", "what is 3+4?", "what is 5+6?"):
            graph.invoke({"messages": [("user", q)]}, start.config)
        copies = sum(len(h.values["messages"]) for h in graph.get_state_history(CFG))
        distinct = {saver.serde.dumps_typed(m)[1] for h in graph.get_state_history(CFG)
                    for m in h.values["messages"]}
        saver.copy_thread("t1", "t2")
    items, checkpoints, payloads = _message_items(folder)
    assert len(distinct) == 12 + 3 * 4 and copies > 7 * len(distinct)
    # One item per message (the forks share the first turn's); the copy added none.
    assert items == len(payloads) == len(distinct)
    assert checkpoints == 15 + 3 * 5


def test_sess_log_reads_a_thread_without_langgraph(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    _run_turns(folder)
    block = ("import sys\n"
             "sys.modules.update({m: None for m in ('langgraph', 'langchain_core')})\n"
             "from sesstree.cli import main\n"
             "sys.argv = ['sess', '--store', sys.argv[1], 'log', 'langgraph/t1']\n"
             "main()\n")
    out = subprocess.run([sys.executable, "-c", block, str(folder)], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("langgraph/checkpoint") == 15
    assert "langgraph/item" in out.stdout


def test_async_graph_and_the_users_serde(tmp_path: Path) -> None:
    class Counting(JsonPlusSerializer):
        calls = 0

        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            Counting.calls += 1
            return super().dumps_typed(obj)

    async def run() -> list[str]:
        saver = AsyncSesstreeSaver(tmp_path / "store", serde=Counting())
        graph = build(saver)
        await graph.ainvoke({"messages": [("user", "what is 2+3?")]}, CFG)
        state = await graph.aget_state(CFG)
        saver.close()
        return texts(state)

    assert asyncio.run(run()) == TURN1
    assert Counting.calls > 0
