"""Payloads at rest (SQLite): a loose row kept plain, a payload over 64 KiB stored apart in a
zstd frame, a dictionary trained on the store's own payloads, packs compressed with it,
format-3 stores read and upgraded, damage to a row's frame, a pack or a dictionary named on
read and by fsck, and a large append in one statement.

The tests of what a loose row holds keep every row loose (the ``loose_rows`` fixture: no
tail is packed, as a tail shorter than PACK_MIN is not); their packed counterparts pack the
same store with ``repack``. Format 5 writes no per-row frame: the tests of those read the
rows format 4 wrote (``format4_rows``, upgraded to format 5 and kept loose)."""

from __future__ import annotations

import json
import random
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from blake3 import blake3
from codec_kit import (
    ODD,
    blob_codecs,
    codecs,
    db_at,
    frames_on,
    packs,
    read_only_run,
    repacked,
    text,
    traffic,
    trained,
)

from sesstree import open_store
from sesstree.errors import StoreCorruptError, StoreFormatError
from sesstree.store.codec import LEVEL, TRAIN_AFTER
from sesstree.store.packs import INLINE_MAX, PACK_MIN
from sesstree.store.rows import row_data, split_row
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
    assert codecs(before) == {None: len(ODD)}  # loose rows are plain
    # Only the payload over 64 KiB is stored apart: a frame (zstd, no dictionary yet).
    assert blob_codecs(before) == {0: 1}
    after = tmp_path / "after"
    msgs = trained(after, ODD)
    # With a dictionary the loose rows stay plain (compressed when they are packed), and the
    # payload stored apart is a frame made with it.
    assert codecs(after) == {None: len(msgs)}
    assert blob_codecs(after) == {1: 1}
    for folder, want in ((before, ODD), (after, msgs)):
        _read_exactly(folder, want)
    # Packed: zstd without a dictionary while the store has none, then with it (the huge
    # payload stays apart, the others go into the frame).
    assert {p[3] for p in repacked(before)} == {0}
    assert {p[3] for p in repacked(after)} == {1}
    for folder, want in ((before, ODD), (after, msgs)):
        _read_exactly(folder, want)


@pytest.mark.usefixtures("loose_rows")
def test_a_loose_row_is_plain_and_the_dictionary_makes_packs_smaller(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = trained(folder, traffic(300, seed=2))
    db = db_at(folder)
    (count,) = db.execute("SELECT count(*) FROM dicts").fetchone()
    rows = db.execute("SELECT l.data, l.codec, n.data FROM nodes n JOIN loose l ON l.seq = n.seq "
                      "ORDER BY n.seq DESC LIMIT 300").fetchall()
    db.close()
    assert count == 1
    # Written after the dictionary, each row is still its type and payload's msgpack, as is:
    # nothing to inflate on a read of the tail, and its node row holds nothing.
    assert {(r[1], r[2]) for r in rows} == {(None, b"")}
    assert [msgspec.msgpack.decode(split_row(r[0])[1]) for r in reversed(rows)] == msgs[-300:]
    repacked(folder)
    with open_store(folder) as store:  # and a short tail, as a pause packs it
        s = store.session("q")
        for m in traffic(PACK_MIN, seed=3):
            s.add_message(m)
    made = repacked(folder)
    assert {p[3] for p in made} == {1} and made[-1][2] == PACK_MIN
    db = db_at(folder)
    (dictionary,) = db.execute("SELECT data FROM dicts WHERE id = 1").fetchone()
    stored = [r[0] for r in db.execute("SELECT data FROM packs ORDER BY pid")]
    db.close()
    with_it = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dictionary))
    saved = []
    for data in stored:
        # Each pack, compressed with the dictionary, against its frame compressed without it.
        frame = with_it.decompress(data)
        alone = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False).compress(frame)
        saved.append(len(data) / len(alone))
    # Smaller every time; most for a short pack, whose frame has little to learn from.
    assert max(saved) < 1 and saved[-1] < 0.95, saved


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
    it: each payload in its node row, those over 1 KB apart in zlib blobs, no codec columns,
    no dictionaries' table, and none of format 4's digests or format 5's packs and loose
    rows."""
    db = db_at(folder)
    with db:
        assert db.execute("SELECT count(*) FROM packs").fetchone() == (0,)
        for seq, data, codec, bid in db.execute(
            "SELECT l.seq, l.data, l.codec, n.bid FROM loose l JOIN nodes n ON n.seq = l.seq"
        ).fetchall():
            assert codec is None
            kind, payload = split_row(data)
            if bid is None and len(payload) > _FORMAT_3_BLOB_MIN:  # (made zlib below)
                bid = db.execute("INSERT INTO blobs(hash, data, codec) VALUES (?, ?, 0)",
                                 (blake3(payload).digest(), zstandard.compress(payload))).lastrowid
                data = row_data(kind, None)
            db.execute("UPDATE nodes SET data = ?, bid = ? WHERE seq = ?", (data, bid, seq))
        db.execute("DROP TABLE loose")
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


#: Format 3 kept a payload over this apart (in blobs, zlib).
_FORMAT_3_BLOB_MIN = 1024


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
    assert db.execute("SELECT count(*) FROM blobs").fetchone() == (2,)  # (ODD's two over 1 KB)
    db.close()
    more = traffic(TRAIN_AFTER + 100, seed=3)
    with open_store(folder) as store:
        db = store.backend._db  # type: ignore[attr-defined]
        # Upgraded to format 5 when opened; the history it had is packed afterwards.
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        assert meta["format"] == "7" and meta[PENDING] == "1"
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
    # (The writer trained the dictionary when it closed: what the next one compresses, it
    # compresses with it.)
    last = traffic(20, seed=4)
    with open_store(folder) as store:
        s = store.session("q")
        for m in last:
            s.add_message(m)
        assert store.messages("q") == old + more + last
    db = db_at(folder)
    assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == ("7",)
    # Of the two zlib blobs, the huge payload is still stored apart as format 3 stored it; the
    # other went into its pack.
    assert db.execute("SELECT count(*) FROM blobs WHERE codec IS NULL").fetchone() == (1,)
    db.close()
    assert codecs(folder) == {None: len(last)}  # the loose rows after it: plain
    made = repacked(folder)  # and their pack: made with it
    assert made[-1][2:] == (len(last), 1)


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
    monkeypatch.setattr(sqlite_open, "FORMAT_VERSION", 4)  # what the release before reads
    with pytest.raises(StoreFormatError, match="has store format 7; this sesstree reads up to 4"):
        open_store(folder)
    assert (folder / "store.db").read_bytes() == before


def _damage(folder: Path, sql: str) -> None:
    db = db_at(folder)
    with db:
        db.execute(sql)
    db.close()


def test_a_changed_byte_in_a_frame_is_named_on_read_and_by_fsck(format4_rows: Path) -> None:
    folder = format4_rows
    seq, key, data = frames_on(folder, "main")[0]  # (among the session's newest 10 rows)
    for at in (len(data) // 2, len(data) - 1, 0):  # within the frame, its end, its magic
        changed = bytearray(data)
        changed[at] ^= 0x21
        _damage(folder, f"UPDATE nodes SET data = x'{changed.hex()}' WHERE seq = {seq}")
        with open_store(folder) as store:
            for read in (lambda: store.messages("main"), lambda: store.show(key.hex()),
                         lambda: store.log("main", limit=10)):
                with pytest.raises(StoreCorruptError, match=key.hex()[:12]) as err:
                    read()
                assert "\n" not in str(err.value)
            assert any(key.hex()[:12] in f for f in store.fsck())
    assert frames_on(folder, "main")[0][0] == seq  # (read as format 4 wrote it: still loose)


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


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_damaged_dictionary_is_named(request: pytest.FixtureRequest, tmp_path: Path,
                                       packed: bool) -> None:
    made: list[tuple[int, int, int, int]] = []
    if packed:
        request.getfixturevalue("loose_rows")
        folder, name = tmp_path / "s", "q"
        trained(folder)
        made = repacked(folder)
        assert {p[3] for p in made} == {1}
    else:  # the frames format 4 wrote in its rows
        folder, name = request.getfixturevalue("format4_rows"), "main"
    db = db_at(folder)
    (data,) = db.execute("SELECT data FROM dicts WHERE id = 1").fetchone()
    with db:
        changed = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        db.execute("UPDATE dicts SET data = ? WHERE id = 1", (changed,))
    db.close()
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match="compression dictionary 1 does not match") as err:
            store.messages(name)
        faults = store.fsck()
    assert "compression dictionary 1 does not match its hash" in faults
    # The read names what it was reading: the loose node, or the pack.
    named = r"pack \d+ \(depths \d+\.\.\d+\) cannot be inflated" if packed \
        else r"node [0-9a-f]{12}: its payload cannot be inflated"
    assert re.search(named, str(err.value))
    for pid, *_ in made:  # and fsck each pack made with it
        assert any(f.startswith(f"pack {pid} (") and "dictionary 1 does not match" in f
                   for f in faults)


def test_a_frame_naming_a_missing_dictionary_is_an_error_not_data(format4_rows: Path) -> None:
    folder = format4_rows
    seq, key, _ = frames_on(folder, "main")[0]
    _damage(folder, f"UPDATE nodes SET codec = 7 WHERE seq = {seq}")
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match=f"{key.hex()[:12]}.*dictionary 7 is missing"):
            store.messages("main")
        assert any(key.hex()[:12] in f for f in store.fsck())


@pytest.mark.usefixtures("loose_rows")
def test_a_plain_loose_row_whose_codec_names_a_dictionary_is_an_error_not_data(
    tmp_path: Path,
) -> None:
    # Format 5 writes its loose rows plain (codec NULL): a codec there is damage.
    folder = tmp_path / "s"
    trained(folder)
    _damage(folder, "UPDATE loose SET codec = 7 WHERE seq = (SELECT max(seq) FROM loose)")
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
        # Small; kept in the loose row up to 64 KiB; stored apart (a blob) just over it, and far.
        for content in ("small", "x" * 3000, "z" * INLINE_MAX, "y" * 200_000):
            seen: list[str] = []
            db.set_trace_callback(seen.append)
            try:
                s.add_message({"role": "tool", "tool_call_id": "c", "content": content})
            finally:
                db.set_trace_callback(None)
            # One statement (each program of its trigger is traced under the same text): blob,
            # node and ref move in one implicit transaction, with no BEGIN, COMMIT or lookup.
            # (The handle's later appends fold into its run's entry: the same, folding.)
            assert len(set(seen)) == 1 and "INSERT INTO temp.append_fold" in seen[0], seen
        # The same large payload again is stored once.
        s.add_message({"role": "tool", "tool_call_id": "c", "content": "z" * INLINE_MAX})
        assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 2
        rows = db.execute("SELECT n.bid IS NOT NULL, l.codec, length(l.data) FROM nodes n "
                          "JOIN loose l ON l.seq = n.seq ORDER BY n.seq").fetchall()
        assert [r[0] for r in rows] == [0, 0, 0, 1, 1, 1]  # (bid: stored apart)
        assert {r[1] for r in rows} == {None} and rows[2][2] > 3000  # plain, the 3,000 in it
        contents = [m.get("content") for m in store.messages("q")]
        assert contents[-4:] == ["x" * 3000, "z" * INLINE_MAX, "y" * 200_000, "z" * INLINE_MAX]


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
        assert codecs(folder) == {None: len(msgs) + 1}  # (plain, with a dictionary or not)
        store.repack()  # (what sess repack runs, on this writer)
    db = db_at(folder)
    assert before in (0, 1)
    assert db.execute("SELECT count(*) FROM dicts").fetchone()[0] == 1
    db.close()
    # This writer packs with the dictionary its pause trained.
    assert {p[3] for p in packs(folder)} == {1}
