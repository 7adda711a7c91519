"""Gemini CLI's files: its JSONL recording (messages appended again as they change, ``$set``,
``$rewindTo``), its earlier whole-document sessions (a real one among the samples), a
checkpoint's ``Content[]`` and the prompt log."""

from __future__ import annotations

import json
from pathlib import Path

from agent_writers import gemini_document, session_lines, session_path

from sesstree import Store
from sesstree.interop import detect_format, import_files


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_the_real_whole_document_session(store: Store, samples: Path) -> None:
    [path] = (samples / "gemini").glob("*.json")
    assert detect_format(path) == "gemini"
    [r] = import_files(store, [path])
    assert (r.session, r.outcome) == ("gemini-dcbe78d3", "created")
    assert store.messages(r.session) == [
        {"role": "user", "content": "[REDACTED_PROMPT]"},
        {"role": "assistant", "content": "[REDACTED_ASSISTANT_TEXT]"},
    ]
    types = [n.type for n in store.log(r.session)][::-1]
    assert types == ["gemini/message", "user/message", "gemini/message", "assistant/message"]
    meta = store.get_session_meta(r.session)
    assert meta is not None and meta["document"]["kind"] == "main"
    assert "messages" not in meta["document"]
    [again] = import_files(store, [path])
    assert again.outcome == "up to date"


def test_jsonl_session_every_record_kept_and_tool_calls_paired(store: Store,
                                                               tmp_path: Path) -> None:
    path = _write(session_path(tmp_path, "gemini", "j"), session_lines("gemini", "j", 2))
    assert detect_format(path) == "gemini"
    [r] = import_files(store, [path])
    records = len(session_lines("gemini", "j", 2)) - 1  # the first line is the metadata
    raw = [n for n in store.log(r.session) if n.type.startswith("gemini/")]
    assert len(raw) == records
    messages = store.messages(r.session)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant",
                                             "user", "assistant", "tool"]
    call = messages[1]["tool_calls"][0]
    assert call["function"] == {"name": "run_shell_command", "arguments": '{"command":"ls 0"}'}
    assert messages[2] == {"role": "tool", "tool_call_id": call["id"], "content": "out 0"}
    # The newest model message may still be changing: raw only, said so.
    assert any("may still be being written" in p for p in r.problems)
    meta = store.get_session_meta(r.session)
    assert meta is not None and meta["header"]["projectHash"] == "ab" * 32


def test_a_growing_jsonl_session_only_fast_forwards(store: Store, tmp_path: Path) -> None:
    lines = session_lines("gemini", "f", 3)
    path = session_path(tmp_path, "gemini", "f")
    outcomes = []
    for n in range(2, len(lines) + 1):
        _write(path, lines[:n])
        outcomes += [r.outcome for r in import_files(store, [path])]
    assert set(outcomes) <= {"empty", "created", "fast-forward", "up to date"}


def test_a_rewind_is_a_branch(store: Store, tmp_path: Path) -> None:
    lines = session_lines("gemini", "r", 2)
    second_prompt = next(json.loads(line)["id"] for line in lines
                         if '"prompt 1"' in line)
    retry = {"id": "retry-1", "timestamp": "2026-11-30T11:00:00.000Z", "type": "user",
             "content": [{"text": "prompt again"}]}
    path = _write(session_path(tmp_path, "gemini", "r"),
                  [*lines, json.dumps({"$rewindTo": second_prompt}), json.dumps(retry)])
    results = import_files(store, [path])
    assert [r.session for r in results] == ["gemini-" + results[0].session[7:],
                                            results[0].session + "/branch-2"]
    main = store.messages(results[0].session)
    assert [m.get("content") for m in main if m["role"] == "user"] == ["prompt 0",
                                                                         "prompt again"]
    old = store.messages(results[1].session)
    assert [m.get("content") for m in old if m["role"] == "user"] == ["prompt 0", "prompt 1"]


def test_a_history_replaced_by_set_messages_is_a_compaction(store: Store,
                                                            tmp_path: Path) -> None:
    lines = session_lines("gemini", "c", 2)
    summary = {"id": "sum-1", "timestamp": "2026-11-30T11:00:00.000Z", "type": "user",
               "content": [{"text": "summary of the work so far"}]}
    path = _write(session_path(tmp_path, "gemini", "c"),
                  [*lines, json.dumps({"$set": {"messages": [summary], "summary": "t"}})])
    [r] = import_files(store, [path])
    sent = store.derive(r.session, sending=True).messages
    assert [m.get("content") for m in sent if m["role"] == "user"][-1] == \
        "summary of the work so far"
    assert "prompt 0" not in json.dumps(sent)
    meta = store.get_session_meta(r.session)
    assert meta is not None and meta["title"] == "t"


def test_whole_document_rewritten_with_more_messages(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "chats" / "session-2026-11-30T10-00-abcdef01.json"
    path.parent.mkdir(parents=True)
    path.write_text(gemini_document("d", 1))
    [first] = import_files(store, [path])
    path.write_text(gemini_document("d", 2))
    [second] = import_files(store, [path])
    assert (first.session, second.session) == (second.session, first.session)
    assert second.outcome == "fast-forward"
    assert [m["role"] for m in store.messages(second.session)].count("user") == 2


def test_checkpoint_contents_without_call_ids(store: Store, tmp_path: Path) -> None:
    history = [
        {"role": "user", "parts": [{"text": "what is here?"}]},
        {"role": "model", "parts": [{"text": "looking", "thought": True},
                                    {"functionCall": {"name": "ls", "args": {"dir": "."}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls",
                                                         "response": {"output": "a b"}}}]},
        {"role": "model", "parts": [{"text": "a and b"}]},
    ]
    for name, doc in (("checkpoint-x.json", history),
                      ("checkpoint-y.json", {"history": history, "authType": "gemini-api-key"})):
        path = tmp_path / name
        path.write_text(json.dumps(doc, indent=2))
        assert detect_format(path) == "gemini"
        [r] = import_files(store, [path])
        assert r.session == f"gemini-{name.removesuffix('.json')}"
        messages = store.messages(r.session)
        call = messages[1]["tool_calls"][0]
        assert messages == [
            {"role": "user", "content": "what is here?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "a b"},
            {"role": "assistant", "content": "a and b"},
        ]


def test_prompt_log_one_chain_per_session(store: Store, tmp_path: Path) -> None:
    log = [{"sessionId": sid, "messageId": i, "timestamp": "2026-11-30T10:00:00.000Z",
            "type": "user", "message": f"{sid} {i}"}
           for i, sid in enumerate(["s1", "s2", "s1", "s2", "s1"])]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(log, indent=2))
    assert detect_format(path) == "gemini"
    results = import_files(store, [path])
    assert [r.session for r in results] == ["gemini-log-s1", "gemini-log-s1/branch-2"]
    assert [m["content"] for m in store.messages("gemini-log-s1")] == ["s1 0", "s1 2", "s1 4"]
    assert [m["content"] for m in store.messages("gemini-log-s1/branch-2")] == ["s2 1", "s2 3"]


def test_openai_arrays_are_still_openai(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert detect_format(path) == "openai"


def test_a_document_rewritten_without_some_messages_keeps_them_as_a_branch(
    store: Store, tmp_path: Path
) -> None:
    # Gemini CLI's rewind, in the whole-document versions, rewrote the document without the
    # messages it dropped: that line is kept as a branch. A rewrite that only changes the
    # newest message (its tokens, its tool results) is no fork: it stays in the reflog.
    path = tmp_path / "chats" / "session-2026-11-30T10-00-abcdef01.json"
    path.parent.mkdir(parents=True)
    full = json.loads(gemini_document("k", 3))
    path.write_text(json.dumps(full, indent=2))
    [first] = import_files(store, [path])
    changed = json.loads(json.dumps(full))
    changed["messages"][-1]["tokens"]["total"] += 1
    path.write_text(json.dumps(changed, indent=2))
    assert [r.outcome for r in import_files(store, [path])] == ["rewritten"]
    rewound = {**changed, "messages": [*changed["messages"][:4], {
        "id": "again", "timestamp": "2026-11-30T12:00:00.000Z", "type": "user",
        "content": [{"text": "prompt again"}]}]}
    path.write_text(json.dumps(rewound, indent=2))
    results = import_files(store, [path])
    assert [(r.session, r.outcome) for r in results] == [
        (first.session, "rewritten"), (first.session + "/branch-2", "created")]
    old = store.messages(first.session + "/branch-2")
    assert [m["content"] for m in old if m["role"] == "user"] == ["prompt 0", "prompt 1",
                                                                   "prompt 2"]
    assert [r.outcome for r in import_files(store, [path])] == ["up to date"]
    assert store.session_origin(first.session + "/branch-2") is not None
