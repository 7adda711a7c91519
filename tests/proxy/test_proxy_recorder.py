"""The recorder against other writers, step by step: two recorders on one store file, each
with its own connection and its own index, as two proxy processes would be; the bound of
the memo of message keys."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from sesstree import open_store
from sesstree.proxy import Exchange, Recorder, ReplyBuilder, parse_request
from sesstree.proxy.paths import MEMO_ENTRY_BYTES, PathIndex
from sesstree.proxy.protocols import CHAT

SYSTEM = {"role": "system", "content": "be brief"}


def call(history: list[dict[str, Any]], answer: str) -> Exchange:
    parsed = parse_request(CHAT, {"model": "m", "messages": history})
    assert parsed is not None
    reply = ReplyBuilder(CHAT)
    reply.feed_json({"model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                     "choices": [{"message": {"role": "assistant", "content": answer},
                                  "finish_reason": "stop"}]})
    return Exchange(parsed, reply.result(), 200)


def turn(n: int) -> list[dict[str, Any]]:
    history = [SYSTEM]
    for i in range(n):
        history += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return [*history, {"role": "user", "content": f"q{n}"}]


def test_a_writer_with_a_stale_index_fast_forwards_instead_of_forking(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as a, open_store(tmp_path / "s") as b:
        ra, rb = Recorder(a), Recorder(b)
        assert ra.record(call(turn(0), "a0")).kind == "new"
        rb.index.refresh()  # b has seen turn 0
        assert ra.record(call(turn(1), "a1")).kind == "fast-forward"  # b has not seen this
        outcome = rb.record(call(turn(2), "a2"))
        assert (outcome.kind, outcome.session) == ("fast-forward", "q0")
        assert [s.name for s in a.sessions()] == ["q0"]
        assert [m["content"] for m in a.messages("q0")][-2:] == ["q2", "a2"]


def test_a_compare_and_set_conflict_is_retried_and_never_moves_back(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as a, open_store(tmp_path / "s") as b:
        ra, rb = Recorder(a), Recorder(b)
        ra.record(call(turn(0), "a0"))
        rb.index.refresh()
        ra.record(call(turn(1), "a1"))
        head = a.session_head("q0")
        # b believes q0 ends after turn 0 and records another answer to turn 1
        outcome = rb.record(call(turn(1), "another a1"))
        assert rb.stats.snapshot()["ref_conflicts"] == 1
        assert (outcome.kind, outcome.session) == ("fork", "q0-fork-1")
        assert a.session_head("q0") == head
        assert a.messages("q0-fork-1")[-1]["content"] == "another a1"


def test_a_late_recording_of_a_stored_reply_writes_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as a, open_store(tmp_path / "s") as b:
        ra, rb = Recorder(a), Recorder(b)
        ra.record(call(turn(0), "a0"))
        # b got the next request, which re-sends a1, before a recorded the call that made a1
        rb.record(call(turn(2), "a2"))
        nodes = a.stats().nodes
        outcome = ra.record(call(turn(1), "a1"))
        assert outcome.kind == "stored" and outcome.session == "q0"
        assert a.stats().nodes == nodes
        assert [s.name for s in a.sessions()] == ["q0"]
        assert ra.stats.snapshot()["already_stored"] == 1


def test_remembered_message_keys_match_as_fresh_ones_and_stay_bounded(tmp_path: Path) -> None:
    from sesstree.proxy.canonical import EMPTY_KEY, chain_key
    from sesstree.proxy.paths import ROOT, PathIndex

    with open_store(tmp_path / "s") as s:
        history = turn(60)
        parsed = parse_request(CHAT, {"model": "m", "messages": history})
        assert parsed is not None
        types = [t for t, _ in parsed.events]
        datas = [d for _, d in parsed.events]
        expected, key = [], EMPTY_KEY
        for t, d in parsed.events:
            key = chain_key(key, t, d)
            expected.append(key)
        index = PathIndex(s, memo_bytes=2000)  # a few messages' worth: generations turn over
        for _ in range(3):  # first computed, then remembered (or recomputed once dropped)
            assert index.match(ROOT, types, datas)[2] == expected
            newer, older = index.memo_size()
            assert 0 < newer + older < 2 * 2000 // 120
        # a message re-sent with its keys in another order is the same message
        reordered = [{k: m[k] for k in reversed(list(m))} for m in history]
        again = parse_request(CHAT, {"model": "m", "messages": reordered})
        assert again is not None
        assert index.match(ROOT, types, [d for _, d in again.events])[2] == expected


@pytest.mark.parametrize("text", ["m", "message number", "a long message " * 100])
def test_the_key_memo_holds_no_more_than_its_bound(text: str) -> None:
    """What the memo holds, measured by tracemalloc with both generations full, stays within
    the bound documented (``MEMO_BYTES`` a generation, two generations)."""
    budget = 1 << 20
    index = PathIndex(store=None, memo_bytes=budget)  # type: ignore[arg-type]
    entries = 3 * budget // (len(text) + 30 + MEMO_ENTRY_BYTES)  # fills both generations
    tracemalloc.start()
    try:
        key = b""
        for i in range(entries):
            key = index._chain_key(key if i % 50 else b"", "user/message",
                                   {"role": "user", "content": f"{text} {i}"})
        _, held = tracemalloc.get_traced_memory()  # the peak: both generations full
    finally:
        tracemalloc.stop()
    newer, older = index.memo_size()
    assert newer and older  # the older generation was kept, full
    # a little slack for the dictionaries' own growth in steps
    assert held <= 2 * budget * 1.05, f"{held} bytes held for a bound of {2 * budget}"
    # and the count is not so generous that the memo holds much less than it may
    assert held >= 1.2 * budget, f"only {held} bytes held for a bound of {2 * budget}"
