"""Claude Code transcripts: trees, compaction, dangling parents, orphan calls, growth, dedup."""

from __future__ import annotations

import json
import os
import shutil
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from sesstree import Store
from sesstree.interop import claude, detect_format, export_session, import_files


def test_tree_branches_become_sessions(store: Store, data: Path) -> None:
    path = data / "claude_tree.jsonl"
    assert detect_format(path) == "claude"
    results = import_files(store, [path])
    names = [r.session for r in results]
    assert names[0] == "claude_tree"
    main = store.messages("claude_tree")
    # main line ends at the last main-line record: u1 a1 r1 a3 u2 (+ last-prompt spliced in)
    assert [m.get("content") for m in main] == [
        "hi", "let me look", "file a", "second answer", "thanks"]
    assert main[1]["tool_calls"][0]["function"] == {"name": "Read", "arguments": '{"path":"a"}'}
    assert main[2] == {"role": "tool", "tool_call_id": "t1", "content": "file a"}
    branches = {r.session: store.messages(r.session) for r in results[1:]}
    contents = sorted(str([m["content"] for m in ms]) for ms in branches.values())
    # the other answer, the orphaned entry, the sidechain, and the leading summary line
    assert any("first answer" in c for c in contents)
    assert any("orphaned" in c for c in contents)
    assert any("sub task" in c for c in contents)
    assert len(results) == 5
    assert any("parent nope is not in this file" in p for p in results[0].problems)


def test_every_record_is_kept_and_exports_back(store: Store, data: Path, tmp_path: Path) -> None:
    path = data / "claude_tree.jsonl"
    import_files(store, [path])
    types = store.chain("claude_tree").types
    assert types.count("claude/user") == 3 and "claude/last-prompt" in types
    raw = next(d for d in store.chain("claude_tree").datas if d.get("uuid") == "a1")
    assert "sessionId" not in raw and raw["uuid"] == "a1"
    assert raw["message"]["content"][0]["type"] == "thinking"  # not resent, not lost
    out = export_session(store, "claude_tree", out=tmp_path / "o.jsonl", format="claude")[0]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    source = {x["uuid"]: x for x in map(json.loads, path.read_text().splitlines()) if "uuid" in x}
    for line in lines:
        if "uuid" in line:
            assert line == source[line["uuid"]]


def test_compaction_links_roots_and_replaces_history(store: Store, data: Path) -> None:
    results = import_files(store, [data / "claude_compact.jsonl"])
    assert len(results) == 1  # the compaction root is linked, not a second session
    messages = store.messages("claude_compact")
    # Sent as the user message the tool itself sent, not wrapped in tags.
    assert messages[0] == {"role": "user", "content": "Summary of the long talk"}
    assert messages[-1]["content"] == "go on"
    types = store.chain("claude_compact").types
    assert "claude/brand-new-kind" in types and "claude/file-history-snapshot" in types
    # the unanswered call before the compaction is summarised away: nothing to repair
    assert results[0].problems == []


def test_orphan_tool_call_is_reported_not_fatal(store: Store, data: Path) -> None:
    path = data / "claude_compact.jsonl"
    first, call = path.read_text().splitlines()[:2]
    reply = json.loads(call)
    reply["message"]["stop_reason"] = "tool_use"  # a whole reply, its call still pending
    path.write_text(first + "\n" + json.dumps(reply) + "\n")
    result = import_files(store, [path])[0]
    assert result.outcome == "created"
    assert any("tool call with no result yet (the last in the file): t9" in p for p in result.problems)
    # the call comes back as stored, with no invented result; the sending view answers it
    assert store.messages("claude_compact")[-1]["tool_calls"][0]["id"] == "t9"
    assert store.derive("claude_compact", sending=True).messages[-1]["tool_call_id"] == "t9"


def test_reimport_writes_nothing_and_growth_appends(store: Store, data: Path) -> None:
    path = data / "claude_compact.jsonl"
    first = import_files(store, [path])
    again = import_files(store, [path])
    assert [r.outcome for r in again] == ["up to date"] and again[0].new_nodes == 0
    with path.open("a") as f:
        f.write(json.dumps({"parentUuid": "u2", "isSidechain": False, "sessionId": "c1",
                            "type": "assistant", "uuid": "a9", "timestamp": "t",
                            "message": {"role": "assistant", "content": "ok",
                                        "stop_reason": "end_turn"}}) + "\n")
    grown = import_files(store, [path])
    assert grown[0].outcome == "fast-forward"
    assert grown[0].new_nodes == 2  # the raw record and its message
    assert store.session_head("claude_compact") != first[0].head


def test_resumed_copy_collapses_onto_original(store: Store, data: Path, tmp_path: Path) -> None:
    original = data / "claude_compact.jsonl"
    copy = tmp_path / "resumed.jsonl"
    lines = [json.loads(x) for x in original.read_text().splitlines()]
    # a resume copies the entries under a new session id and goes on from there
    copied = [{**x, "sessionId": "c2"} if "uuid" in x else x for x in lines]
    copied.append({"parentUuid": "u2", "isSidechain": False, "sessionId": "c2", "type": "user",
                   "uuid": "n1", "timestamp": "t", "message": {"role": "user", "content": "new"}})
    copy.write_text("".join(json.dumps(x) + "\n" for x in copied))
    import_files(store, [original])
    before = store.backend.count_nodes()
    result = import_files(store, [copy])[0]
    assert result.new_nodes == 2 and store.backend.count_nodes() == before + 2


def test_name_collision_never_overwrites(store: Store, data: Path, tmp_path: Path) -> None:
    import_files(store, [data / "claude_compact.jsonl"])
    other = tmp_path / "other" / "claude_compact.jsonl"
    other.parent.mkdir()
    other.write_text((data / "claude_tree.jsonl").read_text())
    result = import_files(store, [other])[0]
    assert result.session == "claude_compact-2"
    assert store.messages("claude_compact")[-1]["content"] == "go on"


def test_real_samples(store: Store, samples: Path) -> None:
    folder = samples / "claude-code"
    results = import_files(store, [folder], recursive=True)
    by_file: dict[str, list[str]] = {}
    for r in results:
        by_file.setdefault(Path(r.source).name[37:45], []).append(r.session)
    assert len(by_file["9b92ce83"]) == 2  # the in-file branch
    f67 = next(r for r in results if "f67ab274" in r.session)
    # 3 roots, one path; 169 replies are split over several entries and derive as one message;
    # the last reply has no stop_reason: it may still be being written, so not a message yet
    assert f67.events == 1283 and len(by_file["f67ab274"]) == 1
    assert any(":727: the last reply may still be being written" in p for p in f67.problems)
    chain = store.chain(f67.session)
    assert chain.types.count("compaction/marker") == 2
    f61 = next(r for r in results if "f6108699" in r.session)
    assert any("tool call with no result" in p for p in f61.problems)
    assert all(store.messages(r.session) is not None for r in results)
    for r in results:  # a split reply never shows as assistant messages back to back
        messages = store.messages(r.session)
        assert not any(a["role"] == b["role"] == "assistant" for a, b in pairwise(messages))
    parallel = store.messages(next(r for r in results if "069508a5" in r.session).session)
    i = next(i for i, m in enumerate(parallel) if len(m.get("tool_calls", [])) == 3)
    assert [m["role"] for m in parallel[i + 1 : i + 4]] == ["tool"] * 3


def test_a_reply_split_over_entries_is_one_message(store: Store, tmp_path: Path) -> None:
    """Entries sharing message.id (one per content block) are the one reply the model gave."""
    def entry(uuid: str, parent: str | None, kind: str, message: dict[str, Any]) -> str:
        return json.dumps({"type": kind, "uuid": uuid, "parentUuid": parent,
                           "sessionId": "s1", "message": message}) + "\n"
    reply = {"id": "msg_1", "role": "assistant"}
    path = tmp_path / "s1.jsonl"
    path.write_text(
        entry("u1", None, "user", {"role": "user", "content": "look around"})
        + entry("a1", "u1", "assistant", {**reply, "content": [{"type": "text", "text": "Sure."}]})
        + entry("a2", "a1", "assistant", {**reply, "content": [
            {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}}]})
        + entry("a3", "a2", "assistant", {**reply, "content": [
            {"type": "tool_use", "id": "t2", "name": "cat", "input": {"path": "x"}}]})
        + entry("r1", "a3", "user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "x"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "hello"}]})
    )
    result = import_files(store, [path], format="claude")[0]
    messages = store.messages(result.session)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1]["content"] == "Sure."
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["t1", "t2"]
    assert store.derive(result.session).problems == []
    # every entry is still kept as its raw record
    assert store.chain(result.session).types.count("claude/assistant") == 3


def _entries(*spec: tuple[str, str | None, str, str]) -> str:
    return "".join(json.dumps({
        "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "r1",
        "message": {"role": kind, "content": text,
                    **({"stop_reason": "end_turn"} if kind == "assistant" else {})}}) + "\n"
        for uuid, parent, kind, text in spec)


def test_a_rewind_in_the_tool_moves_the_session_and_keeps_the_old_line(
        store: Store, tmp_path: Path) -> None:
    path = tmp_path / "r1.jsonl"
    side = json.dumps({"type": "user", "uuid": "s1", "parentUuid": None, "isSidechain": True,
                       "sessionId": "r1", "message": {"role": "user", "content": "sub task"}})
    first = _entries(("u1", None, "user", "hi"), ("a1", "u1", "assistant", "hello"),
                     ("u2", "a1", "user", "go left"), ("a2", "u2", "assistant", "went left"),
                     ) + side + "\n"
    path.write_text(first)
    results = import_files(store, [path])
    assert [r.session for r in results] == ["r1", "r1/branch-2"]  # the sidechain
    old_head = results[0].head
    # the user rewound to a1 and asked again: the file only grew
    path.write_text(first + _entries(("u3", "a1", "user", "go right"),
                                     ("a3", "u3", "assistant", "went right")))
    results = import_files(store, [path])
    # the old main line sorts before the sidechain now, yet the sidechain keeps its session
    assert {(r.session, r.outcome) for r in results} == {
        ("r1", "moved"), ("r1/branch-2", "up to date"), ("r1/branch-3", "created")}
    assert store.session_head("r1/branch-3") == old_head  # the old line is a session still
    assert "went on from an earlier point" in store.reflog("r1")[-1].reason
    assert not any("edited" in e.reason for e in store.reflog())
    assert {r.outcome for r in import_files(store, [path])} == {"up to date"}


def test_the_last_reply_of_a_finished_file_is_a_message(
        store: Store, samples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The newest reply of a file written to minutes ago may still be streaming; one of a file
    # untouched for longer is finished, and its last reply must read back as a message.
    monkeypatch.setattr(claude, "LIVE_WINDOW", 600.0)
    name = next(p.name for p in (samples / "claude-code").iterdir() if "f67ab274" in p.name)
    old = tmp_path / name
    shutil.copyfile(samples / "claude-code" / name, old)
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    result = import_files(store, [old])[0]
    assert not any("may still be being written" in p for p in result.problems)
    last = json.loads(old.read_text().splitlines()[-1])
    assert store.messages(result.session)[-1]["role"] == "assistant"
    assert store.chain(result.session).types[-1] == "assistant/message"
    assert last["type"] == "assistant"
    os.utime(old)  # written again just now: the same file is taken as possibly live
    again = import_files(store, [old])[0]
    assert again.outcome == "ahead" and again.session == result.session
    assert store.chain(result.session).types[-1] == "assistant/message"  # nothing lost
