"""Bad input gives one clear error and changes nothing: files, names, revisions, store files."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from sesstree import (
    AmbiguousPrefixError,
    InputError,
    InvalidRefNameError,
    Store,
    StoreCorruptError,
    StoreFormatError,
    StoreLockedError,
    StoreNotFoundError,
    UnknownRevisionError,
    make_node,
    open_store,
)
from sesstree.interop import import_files

GOOD = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]


def lines(*items: str) -> str:
    return "".join(item + "\n" for item in items)


def nothing_written(store: Store) -> None:
    assert store.backend.count_nodes() == 0
    assert store.sessions() == []
    assert store.reflog() == []


# -- JSONL input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bad_line"),
    [
        (lines(json.dumps(GOOD[0]), '{"role": "user", "content": oops}'), 2),
        (lines(json.dumps(GOOD[0]), "", json.dumps(GOOD[1]), "{not json"), 4),
        (lines("[1, 2]", json.dumps(GOOD[0])), 1),
        (lines(json.dumps(GOOD[0]), '"just a string"'), 2),
        (lines(json.dumps(GOOD[0]), "null"), 2),
        (lines(json.dumps(GOOD[0]), json.dumps(GOOD[1])) + '{"role": "user", "cont', 3),
        (lines(json.dumps(GOOD[0]), '{"role": "user"} trailing'), 2),
        (lines(json.dumps(GOOD[0]), '{"a": 1,}'), 2),
    ],
    ids=["garbage", "after-blank", "array", "string", "null", "truncated", "trailing", "comma"],
)
def test_malformed_jsonl_names_file_and_line(store: Store, tmp_path: Path, text: str,
                                             bad_line: int) -> None:
    path = tmp_path / "quest-1.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        import_files(store, [path])
    assert info.value.line == bad_line
    assert info.value.path is not None and Path(info.value.path).name == "quest-1.jsonl"
    assert f"quest-1.jsonl:{bad_line}:" in str(info.value)
    assert "\n" not in str(info.value)
    nothing_written(store)


def test_truncated_last_line_says_so(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    full = json.dumps({"role": "user", "content": "a long message that was cut"})
    path.write_text(lines(json.dumps(GOOD[0])) + full[:20], encoding="utf-8")
    with pytest.raises(InputError, match=r"q\.jsonl:2: .*truncated"):
        import_files(store, [path])
    nothing_written(store)


def test_invalid_utf8_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(json.dumps(GOOD[0]).encode() + b'\n{"role": "user", "content": "\xff\xfe"}\n')
    with pytest.raises(InputError) as info:
        import_files(store, [path])
    assert info.value.line == 2
    nothing_written(store)


def test_malformed_meta_json(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(lines(json.dumps(GOOD[0])), encoding="utf-8")
    (tmp_path / "q.meta.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(InputError, match=r"q\.meta\.json"):
        import_files(store, [path])
    nothing_written(store)


def test_missing_file_and_folder(store: Store, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.jsonl"):
        import_files(store, [tmp_path / "nope.jsonl"])
    with pytest.raises(InputError):
        import_files(store, [tmp_path])  # a folder without recursive
    nothing_written(store)


def test_import_with_bad_session_name(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(lines(json.dumps(GOOD[0])), encoding="utf-8")
    with pytest.raises(InvalidRefNameError):
        import_files(store, [path], name="../escape")
    bad_file = tmp_path / "-dash.jsonl"
    bad_file.write_text(lines(json.dumps(GOOD[0])), encoding="utf-8")
    with pytest.raises(InvalidRefNameError):
        import_files(store, [bad_file])
    nothing_written(store)


def test_a_message_that_is_not_json_is_refused_whole(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(lines(*(json.dumps(m) for m in GOOD), '{"role": "user", "n": 1e999}',
                          '{"role": "user", "n": 99999999999999999999999}'), encoding="utf-8")
    try:
        import_files(store, [path])
    except InputError:
        nothing_written(store)
    else:  # accepted: then every value must have come back exactly
        assert len(store.messages("q")) == 4


# -- names and revisions ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../x", "-x", "", "a..b", "x.lock", "a b", "HEAD", "a\x01"])
def test_bad_ref_names_write_nothing(store: Store, name: str) -> None:
    with pytest.raises(InvalidRefNameError):
        store.session(name)
    with pytest.raises(InvalidRefNameError):
        store.set_head_session(name)
    store.session("ok").add_message(GOOD[0])
    before = (store.reflog(), store.sessions(), store.head())
    with pytest.raises(InvalidRefNameError):
        store.fork(name, "ok")
    with pytest.raises(InvalidRefNameError):
        store.tag(name, "ok")
    with pytest.raises(InvalidRefNameError):
        store.rename_session("ok", name)
    with pytest.raises(InvalidRefNameError):
        store.session("ok").fork(name)
    assert (store.reflog(), store.sessions(), store.head()) == before
    assert store.tags() == []


def test_unknown_and_ambiguous_revisions(store: Store) -> None:
    seen: dict[str, str] = {}
    i = 0
    while True:
        node = make_node(None, "usage", {"n": i})
        if node.id[:4] in seen:
            break
        seen[node.id[:4]] = node.id
        i += 1
    store.write([make_node(None, "usage", {"n": j}) for j in range(i + 1)])
    prefix = node.id[:4]
    store.session("q").add_message(GOOD[0])
    for call in (lambda r: store.fork("new", r), lambda r: store.reset("q", r),
                 lambda r: store.tag("t", r), store.checkout, store.show, store.messages):
        with pytest.raises(AmbiguousPrefixError):
            call(prefix)
        with pytest.raises(UnknownRevisionError):
            call("no-such-session")
        with pytest.raises(UnknownRevisionError):
            call("q~5")
    assert not store.has_session("new") and store.tags() == []
    assert len(store.reflog()) == 1


# -- damaged, foreign, newer and locked store files ----------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_real_store(folder: Path, n: int = 200) -> Path:
    with open_store(folder) as store:
        q = store.session("q")
        with store.batch():
            for i in range(n):
                q.add_message({"role": "user", "content": f"message {i} " + "x" * 200})
    db = folder / "store.db"
    assert not (folder / "store.db-wal").exists() or (folder / "store.db-wal").stat().st_size == 0
    return db


def assert_refused_unchanged(folder: Path, error: type[Exception]) -> None:
    db = folder / "store.db"
    before = digest(db)
    with pytest.raises(error):
        store = open_store(folder)
        try:  # a damage that only shows on reading must show then, not later
            store.messages("q")
            faults = store.fsck()
        finally:
            store.close()
        if faults:
            raise StoreCorruptError("; ".join(faults))
    assert digest(db) == before
    with pytest.raises(error):  # and again: the failed open did not make it worse
        with open_store(folder) as store:
            store.messages("q")
            if store.fsck():
                raise StoreCorruptError("faults")
    assert digest(db) == before


def test_random_bytes_store_file(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "store.db").write_bytes(os.urandom(8192))
    assert_refused_unchanged(folder, StoreCorruptError)


def test_text_file_as_store(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "store.db").write_text("hello, I am not a database\n" * 100)
    assert_refused_unchanged(folder, StoreCorruptError)


def test_truncated_store_file(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    db = make_real_store(folder)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    assert_refused_unchanged(folder, StoreCorruptError)


def test_store_with_damaged_pages(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    db = make_real_store(folder)
    data = bytearray(db.read_bytes())
    page = 4096
    for k in range(page * 2, len(data) - page, page * 3):  # smash a few b-tree pages
        data[k:k + 64] = os.urandom(64)
    db.write_bytes(bytes(data))
    assert_refused_unchanged(folder, StoreCorruptError)


def test_foreign_sqlite_file(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    with sqlite3.connect(folder / "store.db") as db:
        db.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers(name) VALUES ('alice')")
    db.close()
    assert_refused_unchanged(folder, StoreCorruptError)


def test_newer_format_version(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    db_path = make_real_store(folder, n=3)
    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE meta SET value = '999' WHERE key = 'format'")
    db.close()
    assert_refused_unchanged(folder, StoreFormatError)
    with pytest.raises(StoreFormatError, match="999"):
        open_store(folder)


def test_missing_store_not_created(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        open_store(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()


def test_locked_store(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    make_real_store(folder, n=2)
    locker = sqlite3.connect(folder / "store.db", isolation_level=None)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreLockedError):
            store = open_store(folder, timeout=0.05)
            try:
                store.session("q").add_message({"role": "user", "content": "blocked"})
            finally:
                store.close()
        locker.execute("ROLLBACK")
    finally:
        locker.close()
    with open_store(folder) as store:  # once released, the store works and lost nothing
        assert len(store.session("q")) == 2
        store.session("q").add_message({"role": "user", "content": "now"})
        assert store.fsck() == []
