"""The seed's own flow (a JSONL file per session, fork = copy the file) landing in a store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sesstree import InputError, Store, open_store
from sesstree.interop import export_session, import_files

QUEST = [
    {"role": "user", "content": "I need to get into the Cave of Echoes. Find out what it takes."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "talk_to", "arguments": "{\"npc\": \"mayor\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "The mayor: you need the Silver Key."},
    {"role": "assistant", "content": "You need the Silver Key."},
    {"role": "user", "content": "I got the Silver Key from the mayor’s daughter. What now?"},
    {"role": "assistant", "content": "Go to the cave at dawn. 🦇", "refusal": None},
]


@pytest.fixture
def store(every_backend_store: Store) -> Store:
    """The seed's flow runs on every backend, not only on this folder's SQLite store."""
    return every_backend_store


def seed_append(path: Path, message: dict[str, Any]) -> None:
    """Exactly what the seed's ``append`` does."""
    with path.open("a", encoding="utf-8") as log:
        log.write(json.dumps(message) + "\n")


def seed_load(path: Path) -> list[dict[str, Any]]:
    """Exactly what the seed's ``load`` does."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def write_quest(folder: Path, name: str, messages: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    for m in messages:
        seed_append(path, m)
    return path


def test_import_gives_n_nodes_and_log_of_n(store: Store, tmp_path: Path) -> None:
    path = write_quest(tmp_path / "sessions", "quest-1", QUEST)
    [res] = import_files(store, [path])
    assert (res.session, res.outcome, res.events, res.new_nodes) == ("quest-1", "created", 6, 6)
    assert store.backend.count_nodes() == 6
    assert len(store.log("quest-1")) == 6
    assert len(store.session("quest-1")) == 6
    assert store.session("quest-1").messages() == seed_load(path)
    assert store.sessions()[0].length == 6


def test_import_twice_adds_nothing(store: Store, tmp_path: Path) -> None:
    path = write_quest(tmp_path, "quest-1", QUEST)
    import_files(store, [path])
    before = (store.backend.count_nodes(), store.session_head("quest-1"), len(store.reflog()))
    [res] = import_files(store, [path])
    assert res.outcome == "up to date" and res.new_nodes == 0
    assert (store.backend.count_nodes(), store.session_head("quest-1"),
            len(store.reflog())) == before


def test_seed_fork_by_copy_shares_the_prefix(store: Store, tmp_path: Path) -> None:
    one = write_quest(tmp_path, "quest-1", QUEST)
    two = tmp_path / "quest-2.jsonl"
    shutil.copyfile(one, two)
    seed_append(two, {"role": "user", "content": "Suppose the key doesn’t fit?"})
    seed_append(two, {"role": "assistant", "content": "There is a back door."})
    import_files(store, [one, two])
    assert store.backend.count_nodes() == len(QUEST) + 2
    assert len(store.session("quest-2")) == len(QUEST) + 2
    d = store.diff("quest-1", "quest-2")
    assert d.base == store.session_head("quest-1")
    assert len(d.only_b) == 2
    assert store.messages("quest-2") == seed_load(two)


def test_grown_file_fast_forwards_only_new(store: Store, tmp_path: Path) -> None:
    path = write_quest(tmp_path, "quest-1", QUEST[:3])
    import_files(store, [path])
    old_head = store.session_head("quest-1")
    for m in QUEST[3:]:
        seed_append(path, m)
    [res] = import_files(store, [path])
    assert res.outcome == "fast-forward" and res.new_nodes == 3
    assert store.backend.count_nodes() == 6
    assert store.resolve("quest-1~3") == old_head
    assert store.messages("quest-1") == QUEST
    last = store.reflog("quest-1")[-1]
    assert (last.old, last.new) == (old_head, store.session_head("quest-1"))


def test_edited_file_new_path_old_head_in_reflog(store: Store, tmp_path: Path) -> None:
    path = write_quest(tmp_path, "quest-1", QUEST)
    import_files(store, [path])
    old_head = store.session_head("quest-1")
    edited = [*QUEST[:2], {**QUEST[2], "content": "The mayor: you need the Gold Key."}]
    path.write_text("".join(json.dumps(m) + "\n" for m in edited), encoding="utf-8")
    [res] = import_files(store, [path])
    assert res.outcome == "rewritten"
    assert store.messages("quest-1") == edited
    last = store.reflog("quest-1")[-1]
    assert last.old == old_head and last.new == store.session_head("quest-1")
    store.gc()
    # nothing is lost by an import: the old path is still whole
    restored = store.fork("restored", old_head)  # type: ignore[arg-type]
    assert restored.messages() == QUEST
    assert store.backend.count_nodes() == 6 + 1  # the two first messages are shared
    assert store.fsck() == []


def test_import_never_takes_over_another_session(store: Store, tmp_path: Path) -> None:
    q = store.session("quest-1")
    q.add_message({"role": "user", "content": "something else entirely"})
    path = write_quest(tmp_path, "quest-1", QUEST)
    [res] = import_files(store, [path])
    assert res.session != "quest-1"
    assert store.messages("quest-1") == [{"role": "user", "content": "something else entirely"}]
    assert store.messages(res.session) == QUEST
    # explicit, yet a hand-made session: refused unless forced, and the reflog says so
    with pytest.raises(InputError, match="'quest-1' was not imported from this file"):
        import_files(store, [path], name="quest-1")
    assert store.messages("quest-1") == [{"role": "user", "content": "something else entirely"}]
    [again] = import_files(store, [path], name="quest-1", force=True)
    assert again.outcome == "replaced" and store.messages("quest-1") == QUEST
    assert "replaced this session's history (--force)" in store.reflog("quest-1")[-1].reason


def test_import_as_name_and_meta(store: Store, tmp_path: Path) -> None:
    path = write_quest(tmp_path, "quest-1", QUEST)
    meta = {"id": "quest-1", "createdAt": "2024-05-01T10:00:00Z", "model": "llama3.1"}
    (tmp_path / "quest-1.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    [res] = import_files(store, [path], name="team/quest")
    assert res.session == "team/quest"
    origin = store.session_origin("team/quest")
    assert origin is not None and origin.source == str(path.resolve())
    assert store.get_session_meta("team/quest") == meta
    assert store.messages("team/quest") == QUEST


@pytest.mark.parametrize(
    "messages",
    [
        QUEST,
        [
            {"role": "critic", "content": "odd role", "score": 0.5},
            {"content": "no role", "tags": ["a", "b"]},
            {"role": "user", "content": [{"type": "text", "text": "parts"}], "name": None},
            {"role": "assistant", "content": "x", "z_last": 1, "a_first": {"nested": [1.25, -3]}},
            {"role": "tool", "tool_call_id": "dangling", "content": "orphan result kept"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "never", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "unicode ✓ \"quotes\" \\ back\ttab\x01"},
            {"role": "system", "content": "", "big": 12345678901234, "neg": -0.5, "t": True},
        ],
    ],
    ids=["quest", "odd"],
)
def test_export_round_trips_every_key(store: Store, tmp_path: Path,
                                      messages: list[dict[str, Any]]) -> None:
    src = write_quest(tmp_path / "in", "quest-1", messages)
    import_files(store, [src], format="seed")  # auto-detection wants a role on every line
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    jsonl, meta = export_session(store, "quest-1", out=out_dir / "quest-1.jsonl")
    assert seed_load(jsonl) == messages  # JSON value equality, every key, every role
    assert meta.exists()
    # and a re-import of the export is a no-op
    [res] = import_files(store, [jsonl], name="quest-1", format="seed")
    assert res.outcome == "up to date" and res.new_nodes == 0


def test_auto_detects_seed_files_with_unknown_roles(store: Store, tmp_path: Path) -> None:
    messages = [{"role": "critic", "content": "odd", "score": 1}, *QUEST]
    path = write_quest(tmp_path, "quest-1", messages)
    [res] = import_files(store, [path])
    assert res.outcome == "created"
    assert store.messages("quest-1") == messages


def test_day1_day2_fork_flow(store: Store, tmp_path: Path) -> None:
    """The seed's story through the API: save as you go, reload, fork."""
    day1 = store.session("quest-1")
    for m in QUEST[:4]:
        day1.add_message(m)
    day2 = store.session("quest-1")
    assert len(day2.messages()) == 4
    for m in QUEST[4:]:
        day2.add_message(m)
    west = day2.fork("quest-2")
    west.add_message({"role": "user", "content": "Suppose the key doesn’t fit?"})
    assert store.messages("quest-1") == QUEST
    assert store.messages("quest-2")[:-1] == QUEST
    assert store.backend.count_nodes() == len(QUEST) + 1


# Guards a past bug: U+2028/U+2029/U+0085 were written raw and str.splitlines split there.
def test_export_line_separators_load_with_the_seed_loader(store: Store, tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "a\u2028b\u2029c\x85d"}]
    src = write_quest(tmp_path / "in", "quest-1", messages)
    import_files(store, [src])
    jsonl, _ = export_session(store, "quest-1", out=tmp_path / "quest-1.jsonl")
    assert seed_load(jsonl) == messages


def test_a_grouped_session_name_survives_export_and_import(store: Store, tmp_path: Path) -> None:
    q = store.session("team/quest")
    q.add_message({"role": "user", "content": "hi"})
    jsonl, _ = export_session(store, "team/quest", out=tmp_path / "team_quest.jsonl")
    other = open_store(":memory:")
    try:
        result = import_files(other, [jsonl])[0]
        assert result.session == "team/quest"
        assert other.messages("team/quest") == [{"role": "user", "content": "hi"}]
    finally:
        other.close()


def test_a_decomposed_file_name_names_the_composed_session(store: Store, tmp_path: Path) -> None:
    # macOS writes file names decomposed (NFD); session names are NFC, so the file still imports
    # and lands on the name a user types.
    path = tmp_path / "cafe\u0301.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "un café"}) + "\n")
    result = import_files(store, [path])[0]
    assert result.session == "café" and store.has_session("café")
