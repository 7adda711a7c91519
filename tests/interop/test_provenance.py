"""Import provenance: a re-import finds its earlier import wherever it landed, and only there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sesstree import InputError, InvalidEventError, Store, open_store
from sesstree.interop import import_files
from sesstree.interop.jsonl import session_base
from sesstree.interop.provenance import PROVENANCE_KEY
from sesstree.store.base import ImportOrigin, SessionMeta


def test_session_meta_is_typed_and_read_in_one_call_on_every_backend(
    tmp_path: Path, postgres_url: str
) -> None:
    for store in (open_store(":memory:"), open_store(tmp_path / "s"), open_store(postgres_url)):
        with store:
            b = store.backend
            origin = ImportOrigin("seed", "/x/a.jsonl", main=False)
            b.set_session_meta("a", SessionMeta({"title": "A"}, origin))
            b.set_session_meta("b_%", SessionMeta({"n": 2}))
            b.set_session_meta("gone", SessionMeta({"n": 3}))
            b.set_session_meta("gone", None)
            b.set_session_meta("empty", SessionMeta())  # nothing to keep: nothing kept
            b.set_head("ref: sessions/a")
            assert b.list_session_meta() == {
                "a": SessionMeta({"title": "A"}, origin), "b_%": SessionMeta({"n": 2})}
            assert b.get_session_meta("a") == SessionMeta({"title": "A"}, origin)
            assert b.get_session_meta("b") is None
            assert b.get_head() == "ref: sessions/a"
            assert b.store_format().ids == "blake3-msgpack-v1"
            assert store.session_origin("a") == origin
            assert store.get_session_meta("a") == {"title": "A"}  # provenance kept apart


def test_provenance_key_is_sesstrees_own(store: Store) -> None:
    with pytest.raises(InvalidEventError, match="sesstree's own"):
        store.set_session_meta("q", {PROVENANCE_KEY: {"format": "seed", "source": "/a"}})
    assert store.get_session_meta("q") is None


def _legacy(store: Store, name: str, value: str | None) -> None:
    """Write (or drop) provenance the way stores of earlier versions kept it."""
    db = store.backend._db  # type: ignore[attr-defined]
    if value is None:
        db.execute("DELETE FROM meta WHERE key = ?", ("import-source:" + name,))
    else:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("import-source:" + name, value))


QUEST = [{"role": "user", "content": "I need to get into the Cave of Echoes."},
         {"role": "assistant", "content": "Go west past the old mill."}]


def _seed(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def _hand_made(store: Store, name: str, text: str = "made by hand") -> None:
    store.session(name).add_message({"role": "user", "content": text})


def _names(store: Store) -> list[str]:
    return [s.name for s in store.sessions()]


# Guards a past bug: every re-import of a file whose name a hand-made session holds grew a
# new NAME-3, NAME-4, ...
def test_reimport_finds_name_2_and_never_grows_name_3(store: Store, tmp_path: Path) -> None:
    _hand_made(store, "quest-1")
    path = _seed(tmp_path / "quest-1.jsonl", QUEST)
    assert import_files(store, [path])[0].session == "quest-1-2"
    again = import_files(store, [path])
    assert [(r.session, r.outcome) for r in again] == [("quest-1-2", "up to date")]
    _seed(path, [*QUEST, {"role": "user", "content": "I go west."}])
    assert [(r.session, r.outcome) for r in import_files(store, [path])] == [
        ("quest-1-2", "fast-forward")]
    _seed(path, [QUEST[0], {"role": "assistant", "content": "Go east."}])
    assert [(r.session, r.outcome) for r in import_files(store, [path])] == [
        ("quest-1-2", "rewritten")]
    assert _names(store) == ["quest-1", "quest-1-2"]
    assert store.messages("quest-1") == [{"role": "user", "content": "made by hand"}]


def test_nightly_recursive_import_of_real_samples_is_stable(store: Store, samples: Path) -> None:
    # hand-made sessions hold the names the samples would take
    _hand_made(store, "claude-9b92ce83")
    _hand_made(store, "SWE-agent__mini-swe-agent__tests-test_data__github_issue")
    first = import_files(store, [samples], recursive=True)
    names = _names(store)
    heads = {s.name: s.head for s in store.sessions()}
    assert "claude-9b92ce83-2" in names
    for _ in range(2):
        again = import_files(store, [samples], recursive=True)
        assert {r.outcome for r in again} == {"up to date"}, again
        assert [r.session for r in again] == [r.session for r in first]
        assert _names(store) == names
        assert {s.name: s.head for s in store.sessions()} == heads


# Guards a past bug: provenance stayed with the old name on `branch -m`.
def test_reimport_finds_a_renamed_session(store: Store, tmp_path: Path) -> None:
    path = _seed(tmp_path / "quest-1.jsonl", QUEST)
    import_files(store, [path])
    store.rename_session("quest-1", "adventure")
    assert [(r.session, r.outcome) for r in import_files(store, [path])] == [
        ("adventure", "up to date")]
    _seed(path, [*QUEST, {"role": "user", "content": "I go west."}])
    assert [(r.session, r.outcome) for r in import_files(store, [path])] == [
        ("adventure", "fast-forward")]
    assert _names(store) == ["adventure"]


# Guards a past bug: provenance survived `branch -d`, and a later unrelated session of the
# same name was "rewritten" by the next re-import.
def test_a_deleted_sessions_provenance_goes_with_it(store: Store, tmp_path: Path) -> None:
    path = _seed(tmp_path / "quest-1.jsonl", QUEST)
    import_files(store, [path])
    store.delete_session("quest-1")
    _hand_made(store, "quest-1", "another story")
    [result] = import_files(store, [path])
    assert (result.session, result.outcome) == ("quest-1-2", "created")
    assert store.messages("quest-1") == [{"role": "user", "content": "another story"}]
    assert not any("import" in e.reason for e in store.reflog("quest-1")[-1:])


# Guards a past bug: --as took over another file's session and logged "was edited".
def test_as_name_never_takes_over_another_files_session(store: Store, tmp_path: Path) -> None:
    a = _seed(tmp_path / "a.jsonl", QUEST)
    b = _seed(tmp_path / "b.jsonl", [{"role": "user", "content": "something else"}])
    import_files(store, [a], name="quest")
    head = store.session_head("quest")
    with pytest.raises(InputError, match=r"'quest' holds the import of .*a\.jsonl.*--force"):
        import_files(store, [b], name="quest")
    assert store.session_head("quest") == head and _names(store) == ["quest"]
    [forced] = import_files(store, [b], name="quest", force=True)
    assert forced.outcome == "replaced"
    last = store.reflog("quest")[-1]
    assert last.old == head and "replaced this session's history (--force)" in last.reason
    assert not any("was edited" in e.reason for e in store.reflog("quest"))
    # the session is b's now: b's re-import finds it, a's lands beside it
    assert import_files(store, [b])[0].session == "quest"
    assert import_files(store, [a])[0].session == "a"


def test_as_name_on_a_session_this_file_extends(store: Store, tmp_path: Path) -> None:
    store.session("quest").add_message(QUEST[0])
    path = _seed(tmp_path / "a.jsonl", QUEST)
    [result] = import_files(store, [path], name="quest")  # nothing lost: allowed
    assert result.outcome == "fast-forward"
    assert import_files(store, [path])[0].session == "quest"  # and it is this file's now


def test_legacy_key_trusted_only_while_the_reflog_shows_the_import(store: Store,
                                                                   tmp_path: Path) -> None:
    path = _seed(tmp_path / "quest-1.jsonl", QUEST)
    source = str(path.resolve())
    import_files(store, [path])
    store.set_session_origin("quest-1", None)
    _legacy(store, "quest-1", "seed:" + source)
    assert store.backend.get_session_meta("quest-1") == SessionMeta(
        legacy_origin="seed:" + source)
    _seed(path, [*QUEST, {"role": "user", "content": "I go west."}])
    assert [(r.session, r.outcome) for r in import_files(store, [path])] == [
        ("quest-1", "fast-forward")]
    meta = store.backend.get_session_meta("quest-1")  # migrated
    assert meta is not None and meta.legacy_origin is None
    assert meta.origin is not None and meta.origin.source == source
    # a legacy key left behind by a delete does not make a new session of that name the file's
    store.set_session_origin("quest-1", None)
    _legacy(store, "quest-1", "seed:" + source)
    store.delete_session("quest-1")
    _hand_made(store, "quest-1", "another story")
    _seed(path, [QUEST[0], {"role": "assistant", "content": "Go east."}])
    assert import_files(store, [path])[0].session == "quest-1-2"
    assert store.messages("quest-1") == [{"role": "user", "content": "another story"}]


def test_metadata_someone_else_wrote_is_no_provenance(store: Store, tmp_path: Path) -> None:
    path = _seed(tmp_path / "quest-1.jsonl", QUEST)
    _hand_made(store, "quest-1")
    for odd in ({PROVENANCE_KEY: {"format": 5}}, {PROVENANCE_KEY: "x"}, {"other": 1}):
        store.backend._db.execute(  # type: ignore[attr-defined] - as someone else wrote it
            "INSERT OR REPLACE INTO meta VALUES ('session:quest-1', ?)", (json.dumps(odd),))
        [result] = import_files(store, [path])
        assert result.session == "quest-1-2"  # never the hand-made one
    assert store.messages("quest-1") == [{"role": "user", "content": "made by hand"}]


def test_a_copy_of_an_imported_file_lands_nowhere_new(store: Store, tmp_path: Path) -> None:
    path = _seed(tmp_path / "a" / "quest-1.jsonl", QUEST)
    import_files(store, [path])
    copy = _seed(tmp_path / "b" / "quest-1.jsonl", QUEST)  # an export, a backup, a copy
    assert [(r.session, r.outcome) for r in import_files(store, [copy])] == [
        ("quest-1", "up to date")]
    _seed(copy, [*QUEST, {"role": "user", "content": "I go west."}])  # the copy goes on
    assert [(r.session, r.outcome) for r in import_files(store, [copy])] == [
        ("quest-1-2", "created")]  # the original's session is not moved by another file
    assert store.messages("quest-1") == QUEST
    assert import_files(store, [copy])[0].session == "quest-1-2"
    assert _names(store) == ["quest-1", "quest-1-2"]


@pytest.mark.parametrize(("fmt", "ident", "file", "name"), [
    ("claude", "069508a5-1193-487c-a9b5-a6f5f3ae4f98", "x.jsonl", "claude-069508a5"),
    ("claude", None, "proj__9B92CE83-1981-4cdc-9f5d-7f66c4b10389.jsonl", "claude-9b92ce83"),
    ("codex", "019e9625-802f-7e91-840a-cfe88d14117a", "rollout.jsonl", "codex-8d14117a"),
    ("codex", "019e9625-8030-7e91-840a-aa0000000001", "rollout.jsonl", "codex-00000001"),
    ("pi", "notes of tuesday", "n.jsonl", "notes-of-tuesday"),
    ("pi", None, "plain.jsonl", "plain"),
])
def test_import_names_are_short_and_the_same_everywhere(fmt: str, ident: str | None,
                                                        file: str, name: str) -> None:
    assert session_base(fmt, ident, Path("/any") / file) == name
    assert session_base(fmt, ident, Path("/elsewhere") / file) == name
