"""The durability settings do what docs/storage.md says.

Power loss cannot be staged here; what can break is the setting itself: a durable store whose
connection does not sync each commit would pass every kill test and still lose data on power
loss. So this checks the synchronisation level SQLite was actually given, on every connection a
store opens, including a reopened one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sesstree import open_store
from sesstree.store.sqlite.backend import SqliteBackend

# SQLite's PRAGMA synchronous values.
NORMAL, FULL = 1, 2


def _sync_level(path: Path, durability: str) -> int:
    with open_store(path, durability=durability) as store:  # type: ignore[arg-type]
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        store.session("a").add_message({"role": "user", "content": "x"})
        level = backend._db.execute("PRAGMA synchronous").fetchone()[0]
        mode = backend._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    return int(level)


@pytest.mark.parametrize(("durability", "level"), [("default", NORMAL), ("durable", FULL)])
def test_each_connection_gets_the_sync_level(tmp_path: Path, durability: str, level: int) -> None:
    assert _sync_level(tmp_path / "s", durability) == level
    # Reopening an existing store applies the setting of the new handle, not the old one.
    other = "durable" if durability == "default" else "default"
    assert _sync_level(tmp_path / "s", other) == (FULL if other == "durable" else NORMAL)


def test_a_durable_store_gives_its_wal_its_size_up_front(tmp_path: Path) -> None:
    """Durable commits overwrite WAL blocks that exist (no file growth to sync); the zeros
    past the last frame read as the end of the log, before and after a checkpoint."""
    from sesstree.store.sqlite.backend import DURABLE_WAL_PAGES

    with open_store(tmp_path / "s", durability="durable") as store:
        wal = tmp_path / "s" / "store.db-wal"
        size = wal.stat().st_size
        assert size >= 32 + DURABLE_WAL_PAGES * (24 + 2048)
        q = store.session("q")
        for i in range(DURABLE_WAL_PAGES):  # enough to checkpoint and start the WAL over
            q.add_message({"role": "user", "content": f"m{i}"})
        assert wal.stat().st_size == size  # reused, never grown
        assert store.fsck() == []
    with open_store(tmp_path / "s") as store:
        assert [m["content"] for m in store.messages("q")] == [f"m{i}" for i in range(DURABLE_WAL_PAGES)]


def test_a_durable_writer_packs_inline_so_nothing_holds_its_wal(tmp_path: Path) -> None:
    """A durable writer has no background packing thread: that thread's reads held a place
    in the WAL while the writer's checkpoint wanted to start the log over, so on a busy
    machine the log grew past the size it was given (the flaky run of the test above). Its
    tail is packed in the append that makes it due."""
    from sesstree.store.packs import PACK_AT

    with open_store(tmp_path / "s", durability="durable") as store:
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        q = store.session("q")
        for i in range(PACK_AT):
            q.add_message({"role": "user", "content": f"m{i}"})
        # No wait for any thread: the pack is there when the append returns.
        packed = backend._db.execute(
            "SELECT count(*) FROM nodes WHERE pack IS NOT NULL").fetchone()[0]
        assert packed == PACK_AT
        assert backend._background is None
        assert [m["content"] for m in q.messages()] == [f"m{i}" for i in range(PACK_AT)]


def test_opening_durable_while_another_process_writes_loses_nothing(tmp_path: Path) -> None:
    """The WAL is extended under the write lock: a writer in another process never has a
    frame overwritten by the zeros."""
    import subprocess
    import sys

    folder = tmp_path / "s"
    open_store(folder).close()
    script = Path(__file__).resolve().parents[1] / "helpers" / "append_loop.py"
    child = subprocess.Popen(
        [sys.executable, str(script), str(folder), "a", "--count", "400", "--tag", "w"],
        stdout=subprocess.PIPE, text=True,
    )
    for i in range(6):
        with open_store(folder, durability="durable") as store:
            store.session("b").add_message({"role": "user", "content": f"b{i}"})
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0
    acked = sum(1 for line in out.splitlines() if line.startswith("ACK"))
    with open_store(folder) as store:
        assert [m["content"] for m in store.messages("a")] == [f"w:{i}" for i in range(acked)]
        assert [m["content"] for m in store.messages("b")] == [f"b{i}" for i in range(6)]
        assert store.fsck() == []


def test_opening_durable_while_the_lock_is_held_still_opens(tmp_path: Path) -> None:
    """Giving the WAL its size waits for no one: with another writer holding the lock, the
    store opens at once and works, its WAL growing as it would anyway."""
    import sqlite3

    folder = tmp_path / "s"
    open_store(folder).close()
    holder = sqlite3.connect(folder / "store.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with open_store(folder, durability="durable", timeout=0.2) as store:
            assert store.session("q").messages() == []
        holder.execute("ROLLBACK")
    finally:
        holder.close()


def test_a_long_writer_gets_its_wal_sized_too(tmp_path: Path) -> None:
    """After SIZE_WAL_AFTER appends a connection's WAL is given its size once (not synced:
    the default mode does not promise power-loss safety); nothing written is touched."""
    from sesstree.store.sqlite.backend import SIZE_WAL_AFTER, WAL_PAGES

    with open_store(tmp_path / "s") as store:
        q = store.session("q")
        for i in range(SIZE_WAL_AFTER + 10):
            q.add_message({"role": "user", "content": f"m{i}"})
        wal = tmp_path / "s" / "store.db-wal"
        assert wal.stat().st_size >= 32 + WAL_PAGES * (24 + 2048)
        with open_store(tmp_path / "s") as other:  # another connection reads it all
            assert len(other.messages("q")) == SIZE_WAL_AFTER + 10
        assert store.fsck() == []
