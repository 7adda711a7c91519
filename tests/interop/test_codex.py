"""Codex rollouts."""

from __future__ import annotations

from pathlib import Path

from sesstree import Store
from sesstree.interop import detect_format, import_files


def test_rollout(store: Store, data: Path) -> None:
    path = data / "codex_rollout.jsonl"
    assert detect_format(path) == "codex"
    results = import_files(store, [path])
    assert [r.session for r in results] == ["thread-1"]
    assert any("codex_rollout.jsonl:11: malformed JSON" in p for p in results[0].problems)
    # the unanswered custom call is summarised away by the compaction: nothing to repair
    assert not any("call_2" in p for p in results[0].problems)
    types = store.chain("thread-1").types
    assert types.count("codex/response_item") == 6 and "codex/event_msg" in types
    assert "codex/turn_context" in types
    messages = store.messages("thread-1")
    # the base instructions outlive the compaction; the conversation is summarised
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert messages[1] == {"role": "user", "content": "<summary>\nlisted a and b\n</summary>"}
    assert messages[-1] == {"role": "assistant", "content": "done"}


def test_before_compaction(store: Store, data: Path, tmp_path: Path) -> None:
    lines = (data / "codex_rollout.jsonl").read_text().splitlines()[:8]
    path = tmp_path / "short.jsonl"
    path.write_text("\n".join(lines) + "\n")
    import_files(store, [path])
    messages = store.messages("thread-1")
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert messages[2]["tool_calls"][0]["function"]["name"] == "shell"
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "a\nb"}
    assert messages[4]["tool_calls"][0]["function"]["arguments"] == "*** Begin Patch"
    assert len(messages) == 5  # no output yet: nothing invented
    sent = store.derive("thread-1", sending=True)
    assert sent.messages[5]["tool_call_id"] == "call_2"  # answered only in the sending view
    assert [p.kind for p in sent.problems] == ["pending-call"]


def test_real_sample(store: Store, samples: Path) -> None:
    results = import_files(store, [samples / "codex"], recursive=True)
    # A UUIDv7 thread id: its last digits (random), not its first (a timestamp).
    assert [r.session for r in results] == ["codex-8d14117a"]
    assert results[0].events == 16 and results[0].problems == []
    roles = [m["role"] for m in store.messages(results[0].session)]
    assert roles == ["system", "developer", "user", "user", "assistant"]
