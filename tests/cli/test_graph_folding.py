"""``sess log --graph`` folds each agent turn's bookkeeping as ``sess log`` does (one row per
turn, the messages), with the same ``--all-events`` to unfold; its type column is aligned and
a summary does not repeat the type beside it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_kit import Sess, msg
from reading_kit import quest, streamed

from sesstree.repo.folding import CONVERSATION_TYPES

_LINE = re.compile(r"^(?P<lanes>[|* ]*?)\* (?P<id>[0-9a-f]{10})  (?P<type>\S+)( +)(?P<text>.*)$")


def _drawn(lines: list[str]) -> list[re.Match[str]]:
    """The node lines of a drawing (not its join lines), parsed."""
    out = []
    for line in lines:
        if "*" in line:
            m = _LINE.match(line)
            assert m is not None, line
            out.append(m)
    return out


def _log_ids(sess: Sess, *args: str) -> list[str]:
    return [line[:10] for line in sess.lines(*args)]


@pytest.fixture
def quest_store(tmp_path: Path, sess: Sess) -> str:
    return str(quest(tmp_path))


def test_the_quest_graph_shows_what_log_shows(sess: Sess, quest_store: str) -> None:
    s = ("--store", quest_store)
    env = {"COLUMNS": "120"}
    graph = sess.ok(*s, "log", "--graph", "--all", env=env).splitlines()
    drawn = _drawn(graph)
    # The rows of each session's log, each drawn once (the shared part once for both).
    rows = set(_log_ids(sess, *s, "log", "quest-1")) | set(_log_ids(sess, *s, "log", "quest-2"))
    assert [m["id"] for m in drawn] == sorted((m["id"] for m in drawn), key=[
        m["id"] for m in drawn].index)  # no node drawn twice
    assert {m["id"] for m in drawn} == rows
    assert len(graph) == len(rows) + 1  # and one join line, where quest-2 forks
    assert sum(line.startswith("|/") for line in graph) == 1
    types = {m["type"] for m in drawn}
    assert types <= CONVERSATION_TYPES | {"turn/end"}, types
    turns = [m for m in drawn if m["type"] == "turn/end"]
    assert len(turns) == 4 and all(m["text"].startswith("turn: answer (stop)") for m in turns)
    assert "(quest-2)" in turns[1]["text"] and "2 steps, 335 in/35 out tokens" in turns[1]["text"]
    # The type column is aligned: at one lane depth, every summary starts at one column.
    for depth in {len(m["lanes"]) for m in drawn}:
        starts = {m.start("text") for m in drawn if len(m["lanes"]) == depth}
        assert len(starts) == 1, (depth, starts)
    # --all-events draws every event, as `log --all-events` lists them.
    every = _drawn(sess.lines(*s, "log", "--graph", "--all", "--all-events"))
    events = set(_log_ids(sess, *s, "log", "--all-events", "quest-1")) | set(
        _log_ids(sess, *s, "log", "--all-events", "quest-2"))
    assert {m["id"] for m in every} == events and len(every) > 2 * len(drawn)
    for depth in {len(m["lanes"]) for m in every}:
        assert len({m.start("text") for m in every if len(m["lanes"]) == depth}) == 1
    for m in every:  # the summary beside the type column does not say the type again
        word = m["type"].split("/")[0]
        assert not m["text"].startswith((word + ":", word + " ")) or m["type"].endswith(
            "message") or m["type"] == "tool/result", m.group(0)


def test_a_streamed_session_is_one_line_per_message_and_turn(sess: Sess) -> None:
    streamed(sess.root / ".sess", turns=4)
    every = sess.lines("log", "--all-events")
    chunks = sum(" assistant/chunk " in line for line in every)
    assert chunks >= 60
    log = sess.lines("log")
    graph = sess.lines("log", "--graph")
    assert [line[2:12] for line in graph] == [line[:10] for line in log]
    assert len(graph) < len(every) // 5
    assert not any("assistant/chunk" in line or "step/" in line or " usage " in line
                   for line in graph)
    assert sum(" turn/end " in line for line in graph) == 4
    # One line per message and per turn: the prompts are all there, each once.
    users = [line for line in graph if " user/message " in line]
    assert len(users) == 4 and "Cave of Echoes" in users[-1]
    # -n counts the lines drawn, folded or not.
    assert sess.lines("log", "--graph", "-n", "3") == graph[:3]
    unfolded = sess.lines("log", "--graph", "--all-events")
    assert len(unfolded) == len(every)
    assert sum("assistant/chunk" in line for line in unfolded) == chunks


def test_a_fork_inside_a_turn_is_drawn_where_it_joins(sess: Sess) -> None:
    turn = [
        {"type": "turn/start", "data": {"trigger": {"kind": "user"}}},
        msg_data("user", "Who has the key?"),
        {"type": "step/start", "data": {"step": 1}},
        {"type": "usage", "data": {"model": "m", "usage": {"prompt_tokens": 20,
                                                             "completion_tokens": 3}}},
        msg_data("assistant", "The mayor."),
        {"type": "step/end", "data": {"step": 1, "finish_reason": "stop"}},
        {"type": "turn/end", "data": {"reason": {"kind": "answer"}}},
    ]
    sess.ok("append", "--jsonl", input="\n".join(json.dumps(e) for e in turn) + "\n")
    # A fork at the step/start (folded): the other side ends the turn its own way.
    sess.ok("branch", "main~4", "other")
    sess.ok("append", "other", "assistant/message", msg("assistant", "Nobody knows."))
    sess.ok("append", "other", "turn/end", json.dumps({"reason": {"kind": "answer"}}))
    lines = sess.lines("log", "--graph", "--all", "--oneline")
    assert [re.sub(r"^[|* ]*\* [0-9a-f]{10} ", "", line) for line in lines] == [
        "(other) turn: answer",
        "assistant: Nobody knows.",
        "(HEAD -> main) turn: answer (stop), 1 step, 20 in/3 out tokens",
        "assistant: The mayor.",
        "|/",
        "user: Who has the key?",
    ], lines


def msg_data(role: str, content: str) -> dict[str, object]:
    return {"role": role, "content": content}


def test_diff_folds_each_side_as_log_does(sess: Sess, quest_store: str) -> None:
    s = ("--store", quest_store)
    lines = sess.lines(*s, "diff", "quest-1", "quest-2")
    data = sess.json(*s, "diff", "quest-1", "quest-2")  # (--json: every event, as ever)
    rows = [line.split()[1] for line in lines if line.startswith("  ")]
    assert set(rows) <= CONVERSATION_TYPES | {"turn/end"} and rows.count("turn/end") == 2
    assert f"only in quest-2 ({len(data['b'])}):" in lines
    assert any("turn: answer (stop), 2 steps, 335 in/35 out tokens" in line for line in lines)
    every = sess.lines(*s, "diff", "quest-1", "quest-2", "--all-events")
    assert len([line for line in every if line.startswith("  ")]) == len(data["a"]) + len(
        data["b"]) > len(rows)
    assert not any(re.search(r"  usage +usage:", line) for line in every)


def test_unfinished_turns_are_drawn_as_log_shows_them(sess: Sess) -> None:
    events = [
        {"type": "turn/start", "data": {"trigger": {"kind": "user"}}},
        msg_data("user", "hi"),
        {"type": "step/start", "data": {"step": 1}},
        {"type": "usage", "data": {"model": "m", "usage": {"prompt_tokens": 5,
                                                             "completion_tokens": 1}}},
        {"type": "turn/start", "data": {"trigger": {"kind": "user"}}},  # the first never ended
        msg_data("user", "again"),
        {"type": "step/start", "data": {"step": 1}},
        {"type": "assistant/chunk", "data": {"content": "par"}},  # a stream cut off here
    ]
    sess.ok("append", "--jsonl", input="\n".join(json.dumps(e) for e in events) + "\n")
    log = sess.lines("log")
    graph = sess.lines("log", "--graph")
    # The head is drawn where its ref points (a chunk), then every line of the log.
    assert graph[0].startswith("* ") and "assistant/chunk" in graph[0] and "(HEAD -> main)" in graph[0]
    assert [line[2:12] for line in graph[1:]] == [line[:10] for line in log]
    assert [line.split("  ")[-1].strip() for line in graph if "turn/start" in line] == [
        "turn: unfinished", "turn: unfinished, 5 in/1 out tokens"]


def test_a_range_that_begins_inside_a_turn_keeps_its_row(sess: Sess, quest_store: str) -> None:
    s = ("--store", quest_store)
    ranged = sess.lines(*s, "log", "quest-1..quest-2")
    whole = sess.lines(*s, "log", "quest-2")
    assert [line[:10] for line in ranged] == [line[:10] for line in whole[:len(ranged)]]
    assert "turn: answer (stop), 2 steps, 335 in/35 out tokens" in ranged[0]


def test_the_graph_folds_malformed_turns_as_log_does(sess: Sess, tmp_path: Path) -> None:
    # Turn records that say nothing usable (not a dict, no reason, a second end with no
    # start): no failure, and the graph draws the rows the log shows, the tip's besides.
    from sesstree import open_store

    where = tmp_path / "s"
    with open_store(where) as store:
        s = store.session("m")
        s.append("turn/start", {"trigger": [1, 2]})
        s.add_message({"role": "user", "content": "hi"})
        s.append("usage", {"usage": {"prompt_tokens": "many"}})
        s.append("turn/end", "garbage")
        s.append("turn/end", {"reason": {"kind": "answer"}})  # ends no turn
        s.append("turn/start", None)
        s.append("turn/end", {"reason": "x"})
        s.append("turn/end", {"reason": {"kind": 5}})  # ends no turn either
        s.add_message({"role": "assistant", "content": "bye"})
        store.set_head_session("m")
    rows = _log_ids(sess, "--store", str(where), "log", "m")
    assert len(rows) == 4  # the two messages and the two turns that were begun
    for extra in ((), ("--oneline",), ("-n", "3")):
        lines = sess.lines("--store", str(where), "log", "--graph", "m", *extra)
        drawn = [re.search(r"\* ([0-9a-f]{10})", line) for line in lines]
        assert [m[1] for m in drawn if m] == rows[:len(lines)], (extra, lines)


def test_a_range_or_a_diff_inside_one_turn_lists_its_events(sess: Sess, tmp_path: Path) -> None:
    # Both sides of the fork go on streaming the same turn: what each added is chunks only,
    # which fold away. Listing nothing under "only in b (3)" would say nothing: every event.
    from sesstree import open_store

    where = tmp_path / "s"
    with open_store(where) as store:
        s = store.session("a")
        s.append("turn/start", {"trigger": {"kind": "user"}})
        s.add_message({"role": "user", "content": "write a story"})
        s.extend([("assistant/chunk", {"delta": f"word {i} "}) for i in range(5)])
        store.fork("b", "a")
        s.extend([("assistant/chunk", {"delta": "a-side "}) for _ in range(2)])
        store.session("b").extend([("assistant/chunk", {"delta": "b-side "}) for _ in range(3)])
        added_b = [n.id[:10] for n in store.log("b", 3)]
    st = ("--store", str(where))
    assert _log_ids(sess, *st, "log", "a~2..b") == added_b
    out = sess.ok(*st, "diff", "a", "b").splitlines()
    at = out.index("only in b (3):")
    assert [line.split()[0] for line in out[at + 1:]] == added_b[::-1]
    assert sum("assistant/chunk" in line for line in out) == 5
    assert len(_log_ids(sess, *st, "log", "b")) == 2  # a whole turn still folds
