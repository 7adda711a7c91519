"""OpenAI messages (JSON array and JSONL), detection, folders, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sesstree import InputError, Store
from sesstree.interop import FORMATS, detect_format, export_session, import_files


def test_json_array_keeps_everything(store: Store, data: Path, tmp_path: Path) -> None:
    path = data / "messages.json"
    assert detect_format(path) == "openai"
    result = import_files(store, [path])[0]
    assert result.session == "messages"
    source = json.loads(path.read_text())
    assert store.messages("messages") == source
    assert store.chain("messages").types[-1] == "message"  # the unknown role
    out = export_session(store, "messages", out=tmp_path / "o.json", format="openai")[0]
    assert json.loads(out.read_text()) == source
    out = export_session(store, "messages", out=tmp_path / "o.jsonl", format="openai")[0]
    assert [json.loads(x) for x in out.read_text().splitlines()] == source


def test_trajectory_object(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"info": {"cost": 1}, "messages": [{"role": "user",
                                                                   "content": "x"}]}))
    result = import_files(store, [path])[0]
    assert result.session == "run"
    meta = store.get_session_meta("run")
    assert meta is not None and meta["document"] == {"info": {"cost": 1}}


def test_forced_format_and_unknown(store: Store, data: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"a": 1}\n')
    with pytest.raises(InputError, match="format not recognised"):
        import_files(store, [junk])
    with pytest.raises(InputError, match="unknown format"):
        import_files(store, [junk], format="nope")
    assert "claude" in FORMATS
    # forcing the pi format on a Claude file still imports every record
    results = import_files(store, [data / "claude_compact.jsonl"], format="pi", name="forced")
    assert results[0].session == "forced"


def test_recursive_folder_skips_unknown_and_reports_failures(store: Store, data: Path) -> None:
    (data / "notes.json").write_text('{"not": "messages"}')
    (data / "x.meta.json").write_text("{}")
    (data / "bad.jsonl").write_text('{"role": "user", "content": "a"}\n{"role": \n')
    results = import_files(store, [data], recursive=True)
    failed = [r for r in results if r.outcome == "failed"]
    assert len(failed) == 1 and "bad.jsonl:2" in failed[0].problems[0]
    sessions = {r.session for r in results}
    assert {"claude_tree", "pi-abc", "pi-v1", "thread-1", "messages"} <= sessions
    again = import_files(store, [data], recursive=True)
    assert sum(r.new_nodes for r in again) == 0
    with pytest.raises(InputError, match="use --recursive"):
        import_files(store, [data])


def test_seed_stays_strict(store: Store, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "a"}\n{"role": \n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2"):
        import_files(store, [bad])


def test_real_samples(store: Store, samples: Path) -> None:
    jsonl = next((samples / "openai-messages").glob("*.jsonl"))
    result = import_files(store, [jsonl])[0]
    source = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert store.chain(result.session).datas == source  # stored as they are
    # the last tool call is never answered (the run exits): derivation repairs and reports it
    assert [p.kind for p in store.derive(result.session).problems] == ["orphan-call"]
    traj = next((samples / "mini-swe-agent").glob("*.json"))
    result = import_files(store, [traj])[0]
    assert store.messages(result.session) == json.loads(traj.read_text())


def test_reading_a_file_as_another_format_never_replaces_its_session(
        store: Store, tmp_path: Path) -> None:
    """A wrong --format lands beside the first import; the session it made stays as it was."""
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in (
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})))
    first = import_files(store, [path])
    assert first[0].outcome == "created"
    head = store.session_head("s")
    again = import_files(store, [path], format="claude")
    assert again[0].session != "s"
    assert store.session_head("s") == head
    assert store.messages("s")[-1] == {"role": "assistant", "content": "hello"}


def test_openai_export_is_the_sending_view(store: Store, tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    stored = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
              {"role": "assistant", "content": None, "tool_calls": [call]}]
    q = store.session("q")
    for m in stored:
        q.add_message(m)
    out = export_session(store, "q", out=tmp_path / "q.json", format="openai")[0]
    sent = json.loads(out.read_text())
    assert sent[0] == {"role": "user", "content": "a\n\nb"}
    assert sent[2]["role"] == "tool" and sent[2]["tool_call_id"] == "c1"
    seed = export_session(store, "q", out=tmp_path / "q.jsonl", format="seed")[0]
    assert [json.loads(x) for x in seed.read_text().splitlines()] == stored  # exact
