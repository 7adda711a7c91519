"""Payload codecs under stress: a disk that fills while the dictionary is due, reads from many
threads, damaged codec columns (of loose rows and of packs) and dictionaries, and writers that
open, append and close. The tests of what loose rows hold keep every row loose (the
``loose_rows`` fixture); their packed counterparts pack the store with ``repack``. Format 5
keeps loose rows plain: the tests of a row's own frame read those format 4 wrote
(``format4_rows``)."""

from __future__ import annotations

import random
import re
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import zstandard
from codec_kit import (
    FORMAT4_READ,
    blob_codecs,
    codecs,
    db_at,
    digest,
    frames_on,
    packs,
    path_rows,
    repacked,
    text,
    traffic,
    trained,
)

from sesstree import Store, open_store
from sesstree.errors import StoreCorruptError, StoreFullError
from sesstree.store import codec as codec_module
from sesstree.store.codec import TRAIN_AFTER
from sesstree.store.packs import INLINE_MAX
from sesstree.store.postgres.codec import MAGIC


def _dicts(folder: Path) -> int:
    db = db_at(folder)
    try:
        return int(db.execute("SELECT count(*) FROM dicts").fetchone()[0])
    finally:
        db.close()


# -- a disk full while the dictionary is due -----------------------------------------------


def test_a_batch_past_train_after_trains_nothing_inside_its_transaction(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = traffic(TRAIN_AFTER + 50)
    with open_store(folder) as store:
        s = store.session("q")
        db = store.backend._db  # type: ignore[attr-defined]
        with store.batch():
            for m in msgs:
                s.add_message(m)
            # Not in the batch's transaction (its own connection would see it here)...
            assert db.execute("SELECT count(*) FROM dicts").fetchone() == (0,)
        assert _dicts(folder) == 1  # ...but once it committed
    with open_store(folder) as store:
        assert store.messages("q") == msgs
        assert store.fsck() == []


def test_a_disk_full_in_a_batch_past_train_after_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        store.session("q").add_message({"role": "user", "content": "before"})
    msgs = traffic(TRAIN_AFTER + 300)
    with open_store(folder) as store:
        db = store.backend._db  # type: ignore[attr-defined]
        s = store.session("q")
        with pytest.raises(StoreFullError), store.batch():
            for i, m in enumerate(msgs):
                if i == TRAIN_AFTER - 5:  # a few pages left: the disk fills past TRAIN_AFTER
                    pages = db.execute("PRAGMA page_count").fetchone()[0]
                    db.execute(f"PRAGMA max_page_count = {pages + 8}")
                s.add_message(m)
        assert not db.in_transaction
        db.execute("PRAGMA max_page_count = 1073741823")
    with open_store(folder) as store:
        # Nothing of the batch, and nothing acknowledged before it lost.
        assert store.messages("q") == [{"role": "user", "content": "before"}]
        assert store.fsck() == []
        assert len(store.reflog("q")) == 1


def test_a_disk_full_while_training_at_close_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = traffic(TRAIN_AFTER + 20)
    store = open_store(folder)
    try:
        s = store.session("q")
        for m in msgs:
            s.add_message(m)
        db = store.backend._db  # type: ignore[attr-defined]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        wal = folder / "store.db-wal"
        store.backend.checkpoint()  # type: ignore[attr-defined]
        assert not wal.exists() or wal.stat().st_size == 0
        db.execute(f"PRAGMA max_page_count = {pages + 2}")  # no room for a 64 KB dictionary
    finally:
        store.close()  # trains: the disk is full, the dictionary waits
    assert _dicts(folder) == 0
    with open_store(folder) as store:
        assert store.messages("q") == msgs
        assert store.fsck() == []
        more = traffic(5, seed=2)
        for m in more:
            store.session("q").add_message(m)
        assert store.messages("q") == msgs + more


# -- reads from many threads --------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        store = open_store(request.getfixturevalue("postgres_url"))
    else:
        store = open_store(tmp_path / "s")
    try:
        yield store
    finally:
        store.close()


def _framed_session(store: Store) -> None:
    """A session of frames with the dictionary (rows and payloads stored apart) and without."""
    s = store.session("q")
    with store.batch():
        for m in traffic(TRAIN_AFTER + 50):
            s.add_message(m)
    for i, m in enumerate(traffic(20, seed=8)):  # stored apart, before the dictionary
        s.add_message({"role": "tool", "tool_call_id": f"a{i}", "content": m["content"] * 20})
    pause = getattr(store.backend, "_checkpoint_idle", None)
    if pause is not None:
        pause()  # (SQLite trains at a writer's pause: one now, rather than waiting a second)
    for m in traffic(200, seed=9):
        s.add_message(m)
    for i, m in enumerate(traffic(100, seed=7)):
        s.add_message({"role": "tool", "tool_call_id": f"c{i}", "content": m["content"] * 20})


def test_reads_from_many_threads_see_no_false_damage(any_store: Store) -> None:
    _framed_session(any_store)
    want = any_store.messages("q")
    heads = [n.id for n in any_store.log("q", limit=400)]
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(12):
            try:
                if any_store.messages("q") != want:
                    errors.append("wrong messages")
                node = any_store.show(heads[(k * 37 + i * 11) % len(heads)])  # one node
                if node.id not in heads:
                    errors.append("another node")
            except Exception as exc:
                errors.append(repr(exc)[:160])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- damaged codec columns ------------------------------------------------------------------


def _set_codec(folder: Path, seq: int, value: str) -> None:
    db = db_at(folder)
    with db:
        db.execute(f"UPDATE nodes SET codec = {value} WHERE seq = ?", (seq,))
    db.close()


def test_a_frame_naming_a_missing_dictionary_names_its_node(format4_rows: Path) -> None:
    folder = format4_rows
    frames = frames_on(folder, "main")
    (seq, key, _), first = frames[0], frames[-1][1]
    assert first != key  # (the other frames, made with dictionary 1, read)
    _set_codec(folder, seq, "3")
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match=key.hex()[:12]):
            store.messages("main")
        assert any(key.hex()[:12] in f for f in store.fsck())


# (1.0 is not among them: the column's integer affinity stores it as 1.)
@pytest.mark.parametrize("value", ["'1x'", "1.5", "x'01'", "-1"])
def test_a_codec_that_is_not_a_known_integer_is_damage_naming_the_node(
    format4_rows: Path, value: str
) -> None:
    folder = format4_rows
    seq, key, _ = frames_on(folder, "main")[3]
    _set_codec(folder, seq, value)
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match=key.hex()[:12]):
            store.messages("main")
        with pytest.raises(StoreCorruptError, match=key.hex()[:12]):
            store.show(key.hex())
        assert any(key.hex()[:12] in f for f in store.fsck())


# A pack's codec is under its checksum: any other value, known or not, fails it.
@pytest.mark.usefixtures("loose_rows")
@pytest.mark.parametrize("value", ["'1x'", "1.5", "x'01'", "-1", "0", "2"])
def test_a_pack_codec_that_is_not_its_own_is_damage_naming_the_pack(
    tmp_path: Path, value: str
) -> None:
    folder = tmp_path / "s"
    trained(folder)
    pid, depth, count, codec = repacked(folder)[-1]
    assert codec == 1
    db = db_at(folder)
    (key,) = db.execute("SELECT id FROM nodes WHERE pack = ? ORDER BY depth DESC LIMIT 1 OFFSET 3",
                        (pid,)).fetchone()
    with db:
        db.execute(f"UPDATE packs SET codec = {value} WHERE pid = ?", (pid,))
    db.close()
    where = re.escape(f"pack {pid} (depths {depth}..{depth + count - 1})")
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match=where):
            store.messages("q")
        with pytest.raises(StoreCorruptError, match=where):
            store.show(key.hex())
        assert any(re.match(where, f) for f in store.fsck())


# -- a damaged dictionary ---------------------------------------------------------------------


def _damage_sqlite_dict(folder: Path) -> set[str]:
    db = db_at(folder)
    framed = {r[0].hex()[:12] for r in db.execute("SELECT id FROM nodes WHERE codec = 1")}
    data = bytearray(db.execute("SELECT data FROM dicts").fetchone()[0])
    data[100] ^= 0xFF
    with db:
        db.execute("UPDATE dicts SET data = ?", (bytes(data),))
    db.close()
    return framed


def test_a_damaged_dictionary_sqlite(format4_rows: Path) -> None:
    folder = format4_rows  # (its rows framed with dictionary 1, as format 4 wrote them)
    framed = _damage_sqlite_dict(folder)
    assert framed
    small = {"role": "user", "content": "a new message, long enough to compress " * 5}
    large = {"role": "tool", "tool_call_id": "c", "content": text(random.Random(2), INLINE_MAX)}
    with open_store(folder) as store:
        s = store.session("fresh")
        s.add_message(small)
        s.add_message(large)  # stored apart: compressed, but not with the damaged dictionary
        with store.batch():
            s.add_message(small)
        assert store.messages("fresh") == [small, large, small]
        with pytest.raises(StoreCorruptError, match="dictionary 1 does not match") as err:
            store.messages("main")
        assert any(f"node {k}" in str(err.value) for k in framed)
        assert any("compression dictionary 1" in f for f in store.fsck())
    db = db_at(folder)
    newest = db.execute("SELECT codec FROM loose ORDER BY seq DESC LIMIT 3").fetchall()
    assert newest == [(None,)] * 3
    db.close()
    # Format 4's blob (made with the dictionary while it was whole), and the new one, without.
    assert blob_codecs(folder) == {1: 1, 0: 1}
    assert _dicts(folder) == 1  # no second one made over it


@pytest.mark.usefixtures("loose_rows")
@pytest.mark.parametrize("rows", ["format 5", "format 4"])
def test_a_damaged_dictionary_is_not_packed_with_sqlite(
    request: pytest.FixtureRequest, tmp_path: Path, rows: str
) -> None:
    if rows == "format 5":
        folder, name = tmp_path / "s", "q"
        trained(folder)
    else:  # rows framed with it, as format 4 wrote them
        folder, name = request.getfixturevalue("format4_rows"), "main"
    framed = _damage_sqlite_dict(folder)
    fresh = traffic(40, seed=3)
    with open_store(folder) as store:
        s = store.session("fresh")
        for m in fresh:
            s.add_message(m)
        store.repack()
        # The packs are made without the dictionary, and read back.
        assert store.messages("fresh") == fresh
        if rows == "format 5":  # (plain rows: every one was checked, and packed)
            assert len(store.messages(name)) == TRAIN_AFTER + 200
            assert store.fsck() == ["compression dictionary 1 does not match its hash"]
        else:
            with pytest.raises(StoreCorruptError, match="dictionary 1 does not match"):
                store.messages(name)
    made = packs(folder)
    assert len(made) >= 2 and {p[3] for p in made} == {0}
    # The rows framed with it (format 4's) could not be checked, so were not packed: they are
    # as they were, and a read still names what is damaged.
    assert codecs(folder).get(1, 0) == len(framed) and (rows == "format 5") == (not framed)


def test_a_damaged_dictionary_postgres(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        s = store.session("q")
        with store.batch():
            for m in traffic(TRAIN_AFTER + 50):
                s.add_message(m)
        for m in traffic(50, seed=5):
            s.add_message(m)
    with psycopg.connect(postgres_url, autocommit=True) as c:
        data = bytearray(c.execute("SELECT data FROM dicts").fetchone()[0])
        data[100] ^= 0xFF
        c.execute("UPDATE dicts SET data = %s", (bytes(data),))
    fresh = {"role": "user", "content": "a new message, long enough to compress " * 5}
    with open_store(postgres_url) as store:
        s = store.session("fresh")
        s.add_message(fresh)
        with store.batch():
            s.add_message(fresh)
        for m in traffic(TRAIN_AFTER + 5, seed=6):  # due again: no second dictionary either
            s.add_message(m)
        with pytest.raises(StoreCorruptError, match=r"node [0-9a-f]{12}.*dictionary 1"):
            store.messages("q")
        assert any("compression dictionary 1" in f for f in store.fsck())
    with psycopg.connect(postgres_url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM dicts").fetchone()[0] == 1
        rows = c.execute(
            "SELECT data FROM nodes ORDER BY seq DESC LIMIT %s", (TRAIN_AFTER + 7,)
        ).fetchall()
    assert not any(bytes(r[0]).startswith(MAGIC) for r in rows)


# -- writers that open, append and close ----------------------------------------------------


def _one_write_each(open_it: Any, msgs: list[dict[str, Any]]) -> None:
    for m in msgs:
        with open_it() as store:  # `sess append`, `sess run`: one process per write
            store.session("q").add_message(m)


@pytest.mark.usefixtures("loose_rows")
def test_short_lived_writers_train_the_dictionary_sqlite(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = traffic(TRAIN_AFTER + 30)
    with open_store(folder) as store:
        s = store.session("q")
        with store.batch():
            for m in msgs[: TRAIN_AFTER - 20]:
                s.add_message(m)
    assert _dicts(folder) == 0  # not due yet
    _one_write_each(lambda: open_store(folder), msgs[TRAIN_AFTER - 20 :])
    assert _dicts(folder) == 1
    assert codecs(folder) == {None: len(msgs)}  # (loose rows are plain, with it or not)
    # The writers after it compress with it: a payload stored apart, and (below) packs.
    big = {"role": "tool", "tool_call_id": "c", "content": text(random.Random(5), INLINE_MAX)}
    _one_write_each(lambda: open_store(folder), [big])
    msgs.append(big)
    assert blob_codecs(folder) == {1: 1}
    with open_store(folder) as store:
        assert store.messages("q") == msgs
        assert store.fsck() == []
    assert {p[3] for p in repacked(folder)} == {1}  # and so do the packs made now
    with open_store(folder) as store:
        assert store.messages("q") == msgs


def test_short_lived_writers_train_the_dictionary_postgres(postgres_url: str) -> None:
    msgs = traffic(TRAIN_AFTER + 20)
    with open_store(postgres_url) as store:
        s = store.session("q")
        with store.batch():
            for m in msgs[: TRAIN_AFTER - 10]:
                s.add_message(m)
    _one_write_each(lambda: open_store(postgres_url), msgs[TRAIN_AFTER - 10 :])
    with psycopg.connect(postgres_url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM dicts").fetchone()[0] == 1
        rows = c.execute("SELECT data FROM nodes ORDER BY seq DESC LIMIT 5").fetchall()
    assert all(bytes(r[0]).startswith(MAGIC) for r in rows)
    with open_store(postgres_url) as store:
        assert store.messages("q") == msgs


@pytest.mark.usefixtures("loose_rows")
def test_a_long_lived_writer_uses_a_dictionary_another_trained(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as writer:
        s = writer.session("long")
        s.add_message({"role": "user", "content": "first"})  # has looked: no dictionary
        with open_store(folder) as other:
            o = other.session("other")
            with other.batch():
                for m in traffic(TRAIN_AFTER + 50):
                    o.add_message(m)
        assert _dicts(folder) == 1
        for m in traffic(TRAIN_AFTER + 10, seed=4):
            s.add_message(m)
        # It found the dictionary (it looks every TRAIN_AFTER plain rows): what it compresses,
        # a payload stored apart and its packs, it compresses with it.
        s.add_message({"role": "tool", "tool_call_id": "c",
                       "content": text(random.Random(6), INLINE_MAX)})
        assert blob_codecs(folder) == {1: 1}
        writer.repack()
        assert {p[3] for p in packs(folder)} == {1}


def test_reads_without_multi_decompress_to_buffer(
    format4_rows: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # zstandard's CFFI backend has no multi_decompress_to_buffer: frames are inflated one by one.
    folder = format4_rows  # (frames in their rows, as format 4 wrote them)
    frames = len(frames_on(folder, "main"))
    calls: list[int] = []

    class NoMulti:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._d = zstandard.ZstdDecompressor(*args, **kwargs)

        def decompress(self, data: bytes) -> bytes:
            calls.append(1)
            out: bytes = self._d.decompress(data)
            return out

        def multi_decompress_to_buffer(self, frames: Any) -> Any:
            raise NotImplementedError

    proxy = types.SimpleNamespace(
        **{k: getattr(zstandard, k) for k in dir(zstandard) if not k.startswith("_")}
    )
    proxy.ZstdDecompressor = NoMulti
    monkeypatch.setattr(codec_module, "_zstd", lambda: proxy)
    want = FORMAT4_READ["main"]["messages_digest"]
    with open_store(folder) as store:
        assert digest(store.messages("main")) == want
    assert len(calls) == frames > 50  # each row framed with the dictionary, one call each
    with open_store(folder) as store:
        store.repack()
    on_path = {r[4] for r in path_rows(folder, "main")}
    assert None not in on_path
    calls.clear()
    with open_store(folder) as store:
        assert digest(store.messages("main")) == want
    assert len(calls) == len(on_path) > 1  # packed: one call per pack
