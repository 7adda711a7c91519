"""Payloads at rest (SQLite): a loose row's zstd frame, a dictionary trained on the store's
own payloads, packs compressed with it, format-3 stores read and upgraded, damage to a row's
frame, a pack or a dictionary named on read and by fsck, and a large append in one statement.

The tests of what a loose row holds keep every row loose (the ``loose_rows`` fixture: no
tail is packed, as a tail shorter than PACK_MIN is not); their packed counterparts pack the
same store with ``repack``."""

from __future__ import annotations

import json
import random
import re
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard
from codec_kit import ODD, codecs, db_at, packs, read_only_run, repacked, text, traffic, trained

from sesstree import open_store
from sesstree.errors import StoreCorruptError, StoreFormatError
from sesstree.store.codec import TRAIN_AFTER
from sesstree.store.sqlite import opening as sqlite_open
from sesstree.store.sqlite.packing import PENDING


def _read_exactly(folder: Path, want: list[dict[str, Any]]) -> None:
    with open_store(folder) as store:
        assert store.messages("q") == want
        for node in store.log("q", limit=len(ODD)):
            assert store.show(node.id).data == node.data
        assert store.fsck() == []


@pytest.mark.usefixtures("loose_rows")
def test_payloads_come_back_exactly_with_and_without_a_dictionary(tmp_path: Path) -> None:
    before = tmp_path / "before"
    with open_store(before) as store:
        s = store.session("q")
        for m in ODD:
            s.add_message(m)
    assert codecs(before) == {None: len(ODD)}  # no dictionary yet: rows stay plain
    db = db_at(before)
    assert {r[0] for r in db.execute("SELECT codec FROM blobs")} == {0}  # zstd, no dictionary
    db.close()
    after = tmp_path / "after"
    msgs = trained(after, ODD)
    found = codecs(after)
    assert found.get(1, 0) > 200  # the later rows are frames made with dictionary 1
    for folder, want in ((before, ODD), (after, msgs)):
        _read_exactly(folder, want)
    # Packed: zstd without a dictionary while the store has none, then with it (the huge
    # payload stays apart, the others go into the frame).
    assert {p[3] for p in repacked(before)} == {0}
    assert {p[3] for p in repacked(after)} == {1}
    for folder, want in ((before, ODD), (after, msgs)):
        _read_exactly(folder, want)


@pytest.mark.usefixtures("loose_rows")
def test_the_dictionary_makes_small_payloads_smaller(tmp_path: Path) -> None:
    trained(tmp_path / "s", traffic(300, seed=2))
    db = db_at(tmp_path / "s")
    (count,) = db.execute("SELECT count(*) FROM dicts").fetchone()
    plain, codec = db.execute("SELECT sum(length(data)), max(codec) FROM "
                              "(SELECT * FROM nodes ORDER BY seq LIMIT 300)").fetchone()
    framed, = db.execute("SELECT sum(length(data)) FROM "
                         "(SELECT * FROM nodes WHERE codec = 1 ORDER BY seq DESC LIMIT 300)").fetchone()
    db.close()
    assert count == 1 and codec is None
    # 300 rows of the same traffic each: the framed ones are well under half the size.
    assert framed < plain / 2


@pytest.mark.usefixtures("loose_rows")
def test_a_batch_rolled_back_takes_its_dictionary_with_it(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = traffic(TRAIN_AFTER + 50)
    with open_store(folder) as store:
        s = store.session("q")
        with pytest.raises(RuntimeError), store.batch():
            for m in msgs:
                s.add_message(m)
            raise RuntimeError("abort the import")
        # The dictionary went with the batch: what is written next names no missing one.
        for m in msgs[:20]:
            s.add_message(m)
        assert store.messages("q") == msgs[:20]
    db = db_at(folder)
    assert db.execute("SELECT count(*) FROM dicts").fetchone()[0] == 0
    db.close()
    assert codecs(folder) == {None: 20}


def _to_format_3(folder: Path) -> None:
    """Rewrite a store made without a dictionary (and with no pack) the way format 3 stored
    it: blobs zlib, no codec columns, no dictionaries' table, and none of format 4's digests
    or format 5's packs."""
    db = db_at(folder)
    with db:
        assert db.execute("SELECT count(*) FROM packs").fetchone() == (0,)
        db.execute("DROP TABLE packs")
        db.execute("ALTER TABLE nodes DROP COLUMN pack")
        db.execute("DROP TABLE sums")
        rows = db.execute("SELECT bid, data, codec FROM blobs").fetchall()
        for bid, data, codec in rows:
            assert codec == 0
            raw = zstandard.ZstdDecompressor().decompress(data)
            db.execute("UPDATE blobs SET data = ? WHERE bid = ?", (zlib.compress(raw, 6), bid))
        assert db.execute("SELECT count(*) FROM nodes WHERE codec IS NOT NULL").fetchone() == (0,)
        db.execute("ALTER TABLE nodes DROP COLUMN codec")
        db.execute("ALTER TABLE blobs DROP COLUMN codec")
        db.execute("DROP TABLE dicts")
        db.execute("UPDATE meta SET value = '3' WHERE key = 'format'")
    db.close()


@pytest.mark.usefixtures("loose_rows")
def test_a_format_3_store_reads_as_it_is_and_is_upgraded_on_write(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    old = ODD + traffic(30)
    with open_store(folder) as store:
        s = store.session("q")
        for m in old:
            s.add_message(m)
    _to_format_3(folder)
    assert json.loads(read_only_run(folder, _READ_ONLY)) == [old, []]
    db = db_at(folder)  # the read-only open changed nothing
    assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == ("3",)
    assert "codec" not in {r[1] for r in db.execute("PRAGMA table_info(nodes)")}
    db.close()
    more = traffic(TRAIN_AFTER + 100, seed=3)
    with open_store(folder) as store:
        db = store.backend._db  # type: ignore[attr-defined]
        # Upgraded to format 5 when opened; the history it had is packed afterwards.
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        assert meta["format"] == "5" and meta[PENDING] == "1"
        s = store.session("q")
        with store.batch():
            for m in more:
                s.add_message(m)
        assert store.messages("q") == old + more
        assert store.fsck() == []
        # (What sess repack runs: the old rows, plain and zlib blobs, are packed and checked.)
        counts = store.repack()
        assert counts is not None and counts.loose_nodes == 0
        assert db.execute("SELECT 1 FROM meta WHERE key = ?", (PENDING,)).fetchone() is None
        assert store.messages("q") == old + more
        assert store.fsck() == []
    # (The writer trained the dictionary when it closed: the next one compresses with it.)
    last = traffic(20, seed=4)
    with open_store(folder) as store:
        s = store.session("q")
        for m in last:
            s.add_message(m)
        assert store.messages("q") == old + more + last
    db = db_at(folder)
    assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == ("5",)
    # Of the two zlib blobs, the huge payload is still stored apart as format 3 stored it; the
    # other went into its pack.
    assert db.execute("SELECT count(*) FROM blobs WHERE codec IS NULL").fetchone() == (1,)
    db.close()
    assert codecs(folder).get(1, 0) == len(last)  # the loose rows after it: frames


_READ_ONLY = """
import json, sys
from sesstree import open_store
with open_store(sys.argv[1], create=False) as store:
    assert store.backend.read_only
    print(json.dumps([store.messages("q"), store.fsck()]))
"""


def test_an_older_sesstree_refuses_a_format_5_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        store.session("q").add_message({"role": "user", "content": "hi"})
        store.repack()  # (a store with a pack in it)
    assert len(packs(folder)) == 1
    before = (folder / "store.db").read_bytes()
    monkeypatch.setattr(sqlite_open, "FORMAT_VERSION", 4)  # what the previous release reads
    with pytest.raises(StoreFormatError, match="has store format 5; this sesstree reads up to 4"):
        open_store(folder)
    assert (folder / "store.db").read_bytes() == before


def _damage(folder: Path, sql: str) -> None:
    db = db_at(folder)
    with db:
        db.execute(sql)
    db.close()


@pytest.mark.usefixtures("loose_rows")
def test_a_changed_byte_in_a_frame_is_named_on_read_and_by_fsck(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    trained(folder)
    db = db_at(folder)
    seq, key, data = db.execute(
        "SELECT seq, id, data FROM nodes WHERE codec = 1 ORDER BY seq DESC LIMIT 1 OFFSET 5"
    ).fetchone()
    db.close()
    for at in (len(data) // 2, len(data) - 1, 0):  # within the frame, its end, its magic
        changed = bytearray(data)
        changed[at] ^= 0x21
        db = db_at(folder)
        with db:
            db.execute("UPDATE nodes SET data = ? WHERE seq = ?", (bytes(changed), seq))
        db.close()
        with open_store(folder) as store:
            for read in (lambda: store.messages("q"), lambda: store.show(key.hex()),
                         lambda: store.log("q", limit=10)):
                with pytest.raises(StoreCorruptError, match=key.hex()[:12]) as err:
                    read()
                assert "\n" not in str(err.value)
            assert any(key.hex()[:12] in f for f in store.fsck())


@pytest.mark.usefixtures("loose_rows")
def test_a_changed_byte_in_a_pack_is_named_on_read_and_by_fsck(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    trained(folder)
    pid, depth, count, codec = repacked(folder)[-1]  # the newest nodes' pack
    assert codec == 1
    db = db_at(folder)
    (data,) = db.execute("SELECT data FROM packs WHERE pid = ?", (pid,)).fetchone()
    (key,) = db.execute("SELECT id FROM nodes WHERE pack = ? ORDER BY depth DESC LIMIT 1 OFFSET 5",
                        (pid,)).fetchone()
    db.close()
    where = re.escape(f"pack {pid} (depths {depth}..{depth + count - 1}")
    for at in (len(data) // 2, len(data) - 1, 0):  # within the frame, its end, its magic
        changed = bytearray(data)
        changed[at] ^= 0x21
        _damage_pack(folder, pid, bytes(changed))
        with open_store(folder) as store:
            for read in (lambda: store.messages("q"), lambda: store.show(key.hex()),
                         lambda: store.log("q", limit=10)):
                with pytest.raises(StoreCorruptError, match=where) as err:
                    read()
                assert "\n" not in str(err.value)
            assert any(re.match(where, f) for f in store.fsck())


def _damage_pack(folder: Path, pid: int, data: bytes) -> None:
    db = db_at(folder)
    with db:
        db.execute("UPDATE packs SET data = ? WHERE pid = ?", (data, pid))
    db.close()


@pytest.mark.usefixtures("loose_rows")
@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_damaged_dictionary_is_named(tmp_path: Path, packed: bool) -> None:
    folder = tmp_path / "s"
    trained(folder)
    made = repacked(folder) if packed else []
    assert {p[3] for p in made} <= {1}
    db = db_at(folder)
    (data,) = db.execute("SELECT data FROM dicts WHERE id = 1").fetchone()
    with db:
        changed = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        db.execute("UPDATE dicts SET data = ? WHERE id = 1", (changed,))
    db.close()
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match="compression dictionary 1 does not match") as err:
            store.messages("q")
        faults = store.fsck()
    assert "compression dictionary 1 does not match its hash" in faults
    # The read names what it was reading: the loose node, or the pack.
    named = r"pack \d+ \(depths \d+\.\.\d+\) cannot be inflated" if packed \
        else r"node [0-9a-f]{12}: its payload cannot be inflated"
    assert re.search(named, str(err.value))
    for pid, *_ in made:  # and fsck each pack made with it
        assert any(f.startswith(f"pack {pid} (") and "dictionary 1 does not match" in f
                   for f in faults)


@pytest.mark.usefixtures("loose_rows")
def test_a_frame_naming_a_missing_dictionary_is_an_error_not_data(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    trained(folder)
    _damage(folder, "UPDATE nodes SET codec = 7 WHERE seq = (SELECT max(seq) FROM nodes)")
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match="dictionary 7 is missing"):
            store.messages("q")
        assert any("does not hash" in f for f in store.fsck())


@pytest.mark.usefixtures("loose_rows")
def test_a_pack_whose_dictionary_is_missing_is_an_error_not_data(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    trained(folder)
    made = repacked(folder)
    assert {p[3] for p in made} == {1}
    _damage(folder, "DELETE FROM dicts")
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match=r"pack \d+ \(depths .*dictionary 1 is missing"):
            store.messages("q")
        faults = store.fsck()
    for pid, *_ in made:
        assert any(f.startswith(f"pack {pid} (") and "dictionary 1 is missing" in f
                   for f in faults)


def test_an_append_is_one_statement_whatever_the_payload_size(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        s = store.session("q")
        s.add_message({"role": "user", "content": "start"})
        db = store.backend._db  # type: ignore[attr-defined]
        for content in ("small", "x" * 3000, "y" * 200_000):
            seen: list[str] = []
            db.set_trace_callback(seen.append)
            try:
                s.add_message({"role": "tool", "tool_call_id": "c", "content": content})
            finally:
                db.set_trace_callback(None)
            # One statement (each program of its trigger is traced under the same text): blob,
            # node and ref move in one implicit transaction, with no BEGIN, COMMIT or lookup.
            assert len(set(seen)) == 1 and "INSERT INTO temp.append_one" in seen[0], seen
        # The same large payload again is stored once.
        s.add_message({"role": "tool", "tool_call_id": "c", "content": "x" * 3000})
        assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 2
        assert [m.get("content") for m in store.messages("q")][-2:] == ["y" * 200_000, "x" * 3000]


@pytest.mark.usefixtures("loose_rows")
def test_single_appends_leave_training_to_the_writers_pause(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = traffic(TRAIN_AFTER + 10)
    with open_store(folder) as store:
        s = store.session("q")
        for m in msgs:
            s.add_message(m)
        db = db_at(folder)
        # No append waited for a dictionary (unless the writer paused a second meanwhile).
        before = db.execute("SELECT count(*) FROM dicts").fetchone()[0]
        db.close()
        store.backend._checkpoint_idle()  # type: ignore[attr-defined]  # what a pause runs
        s.add_message({"role": "user", "content": "after the pause " + text(random.Random(3), 40)})
        assert store.messages("q")[-1]["content"].startswith("after the pause")
    db = db_at(folder)
    assert before in (0, 1)
    assert db.execute("SELECT count(*) FROM dicts").fetchone()[0] == 1
    assert db.execute("SELECT codec FROM nodes ORDER BY seq DESC LIMIT 1").fetchone() == (1,)
    db.close()
