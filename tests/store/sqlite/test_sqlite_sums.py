"""Block digests (SQLite, sqlite_sums): a long load checks 256 nodes per blake3 call, damage
inside a block is still named, a wrong digest costs speed and never data, gc drops the
digests of the blocks it touches."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from codec_kit import traffic

from sesstree import make_node, open_store
from sesstree.errors import StoreCorruptError
from sesstree.store.sqlite import paths as sqlite_paths
from sesstree.store.sqlite.sums import BLOCK


@contextmanager
def counted_hashes() -> Iterator[list[int]]:
    """Count the blake3 calls the path reader makes."""
    real = sqlite_paths.blake3
    count = [0]

    def counting(data: Any = b"", **kw: Any) -> Any:
        count[0] += 1
        return real(data, **kw)

    sqlite_paths.blake3 = counting  # type: ignore[assignment]
    try:
        yield count
    finally:
        sqlite_paths.blake3 = real  # type: ignore[assignment]


def long_session(folder: Path, n: int) -> list[dict[str, Any]]:
    msgs = traffic(n, seed=5)
    with open_store(folder) as store:  # closing gives the complete blocks their digests
        s = store.session("q")
        with store.batch():
            for m in msgs:
                s.add_message(m)
    return msgs


def his(folder: Path) -> list[int]:
    db = sqlite3.connect(folder / "store.db")
    try:
        return [r[0] for r in db.execute("SELECT hi FROM sums ORDER BY hi")]
    finally:
        db.close()


def test_a_long_load_checks_whole_blocks_in_one_call_each(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = long_session(folder, 3 * BLOCK + 40)
    assert his(folder) == [BLOCK, 2 * BLOCK, 3 * BLOCK]
    with open_store(folder) as store:
        with counted_hashes() as count:
            assert store.messages("q") == msgs
        # 40 nodes one by one, three blocks at one call each (and the hash the digest
        # comparison makes of each block's bytes).
        assert count[0] <= 40 + 3
        with counted_hashes() as count:
            assert len(store.log("q", limit=100)) == 100  # no whole block: node by node
        assert count[0] >= 100


def test_a_changed_byte_inside_a_block_is_still_named(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    long_session(folder, 2 * BLOCK + 5)
    db = sqlite3.connect(folder / "store.db")
    key, data = db.execute("SELECT id, data FROM nodes WHERE seq = ?", (BLOCK + 17,)).fetchone()
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x02
    with db:
        db.execute("UPDATE nodes SET data = ? WHERE seq = ?", (bytes(changed), BLOCK + 17))
    db.close()
    with open_store(folder) as store:
        with pytest.raises(StoreCorruptError, match=key.hex()[:12]):
            store.messages("q")
        assert any(key.hex()[:12] in f for f in store.fsck())


def test_a_wrong_digest_costs_speed_never_data(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = long_session(folder, 2 * BLOCK + 5)
    db = sqlite3.connect(folder / "store.db")
    with db:
        db.execute("UPDATE sums SET digest = zeroblob(32) WHERE hi = ?", (BLOCK,))
    db.close()
    with open_store(folder) as store:
        with counted_hashes() as count:
            assert store.messages("q") == msgs
        assert count[0] >= BLOCK  # the first block was checked node by node
        assert store.fsck() == []


def test_gc_drops_the_digests_of_the_blocks_it_removes_rows_from(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = long_session(folder, BLOCK + 10)
    with open_store(folder) as store:
        parent = None
        garbage = []
        for m in traffic(2 * BLOCK, seed=6):  # rows BLOCK+11 .. 3*BLOCK+10: nothing names them
            node = make_node(parent, "user/message", m)
            garbage.append(node)
            parent = node.id
        store.write(garbage)
    assert his(folder) == [BLOCK, 2 * BLOCK, 3 * BLOCK]
    with open_store(folder) as store:
        store.gc()
        assert store.messages("q") == msgs
    assert his(folder) == [BLOCK]
