"""Block digests (SQLite ``sums``, format 4): format 5 keeps none (its upgrade deletes them; a
pack has a checksum, and a loose tail is short), and a format-4 store opened read-only is still
read with them: a long load checks 256 nodes per blake3 call, damage inside a block is still
named, a wrong digest costs speed and never data.

The format-4 store is ``data/format4_blocks.db``, written by the sesstree of format 4 (see
``data/make_format4_blocks.py``): a store of format 5 cannot be made to have digests."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from codec_kit import read_only_run, traffic
from core_testkit import load_script

from sesstree import open_store
from sesstree.store.sqlite.packing import PENDING
from sesstree.store.sqlite.sums import BLOCK

DATA = Path(__file__).parent / "data"



#: What the format-4 store holds: one session "q" of these messages, rows 1..2 * BLOCK + 40.
MESSAGES: list[dict[str, Any]] = load_script(DATA / "make_format4_blocks.py").MESSAGES


def format_4_store(tmp_path: Path) -> Path:
    folder = tmp_path / "s"
    folder.mkdir()
    shutil.copyfile(DATA / "format4_blocks.db", folder / "store.db")
    return folder


def his(folder: Path) -> list[int]:
    db = sqlite3.connect(folder / "store.db")
    try:
        return [r[0] for r in db.execute("SELECT hi FROM sums ORDER BY hi")]
    finally:
        db.close()


def _change(folder: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(folder / "store.db")
    with db:
        db.execute(sql, args)
    db.close()


# What a process that cannot write the store reads: the messages (or the error), how many
# blake3 calls the path reader made for the load and for the newest 100 nodes, and fsck.
_READ = """
import json, sys
from sesstree import open_store
from sesstree.errors import StoreCorruptError
from sesstree.store.sqlite import paths

real, calls = paths.blake3, [0]
def counting(data=b"", **kw):
    calls[0] += 1
    return real(data, **kw)
paths.blake3 = counting

out = {}
with open_store(sys.argv[1], create=False) as store:
    assert store.backend.read_only
    try:
        out["messages"] = store.messages("q")
    except StoreCorruptError as exc:
        out["error"] = str(exc)
    out["load"], calls[0] = calls[0], 0
    try:
        out["log"] = len(store.log("q", limit=100))
    except StoreCorruptError as exc:
        out["log_error"] = str(exc)
    out["log_calls"] = calls[0]
    out["fsck"] = store.fsck()
print(json.dumps(out))
"""


def read_only(folder: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(read_only_run(folder, _READ))
    return found


# -- format 5 keeps none -----------------------------------------------------------------------


@pytest.mark.usefixtures("loose_rows")
def test_a_format_5_store_gives_its_rows_no_digests(tmp_path: Path) -> None:
    # Rows left loose, as format 4's digested rows were: a closing writer and a pause (each
    # gave whole blocks their digests in format 4) give them none.
    folder = tmp_path / "s"
    msgs = traffic(3 * BLOCK + 40, seed=5)
    with open_store(folder) as store:
        s = store.session("q")
        with store.batch():
            for m in msgs:
                s.add_message(m)
    with open_store(folder) as store:
        s = store.session("q")
        s.add_message(msgs[0])
        store.backend._checkpoint_idle()  # type: ignore[attr-defined]  # what a pause runs
        assert store.messages("q") == msgs + msgs[:1]
    assert his(folder) == []


def test_the_upgrade_to_format_5_deletes_the_digests(tmp_path: Path) -> None:
    folder = format_4_store(tmp_path)
    assert his(folder) == [BLOCK, 2 * BLOCK]
    with open_store(folder) as store:
        db = store.backend._db  # type: ignore[attr-defined]
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        assert meta["format"] == "7" and meta[PENDING] == "1"
        assert his(folder) == []  # (in the migration's transaction: the old rows are as they were)
        assert store.messages("q") == MESSAGES
        counts = store.repack()
        assert counts is not None and counts.loose_nodes == 0
        assert store.messages("q") == MESSAGES
        assert store.fsck() == []
    assert his(folder) == []


# -- a format-4 store opened read-only still reads them -----------------------------------------


def test_a_long_load_of_a_format_4_store_checks_whole_blocks_in_one_call_each(
    tmp_path: Path,
) -> None:
    folder = format_4_store(tmp_path)
    got = read_only(folder)
    assert got["messages"] == MESSAGES and got["fsck"] == []
    # The 40 nodes after the blocks one by one, each of the two blocks at one call at most.
    assert got["load"] <= 40 + 2
    assert got["log"] == 100 and got["log_calls"] >= 100  # no whole block: node by node
    assert his(folder) == [BLOCK, 2 * BLOCK]  # read as it is: still format 4
    db = sqlite3.connect(folder / "store.db")
    assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == ("4",)
    db.close()


def test_a_changed_byte_inside_a_block_of_a_format_4_store_is_still_named(tmp_path: Path) -> None:
    folder = format_4_store(tmp_path)
    db = sqlite3.connect(folder / "store.db")
    key, data = db.execute("SELECT id, data FROM nodes WHERE seq = ?", (BLOCK + 17,)).fetchone()
    db.close()
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x02
    _change(folder, "UPDATE nodes SET data = ? WHERE seq = ?", bytes(changed), BLOCK + 17)
    got = read_only(folder)
    assert "messages" not in got and key.hex()[:12] in got["error"]
    assert any(key.hex()[:12] in f for f in got["fsck"])


def test_a_wrong_digest_of_a_format_4_store_costs_speed_never_data(tmp_path: Path) -> None:
    folder = format_4_store(tmp_path)
    _change(folder, "UPDATE sums SET digest = zeroblob(32) WHERE hi = ?", BLOCK)
    got = read_only(folder)
    assert got["messages"] == MESSAGES and got["fsck"] == []
    assert got["load"] >= BLOCK  # the first block was checked node by node
