"""Free pages go back to the file system (sqlite/freepages.py): a writer that packed many
loose rows at its close (a tree of short forks) leaves no freelist the size they were, and the
store reads back exactly. A store made before format 6 (no incremental auto-vacuum) keeps
its freelist, as SQLite does."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from sesstree import open_store
from sesstree.testing import user


def free_pages(folder: Path) -> tuple[int, int]:
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        return (int(db.execute("PRAGMA freelist_count").fetchone()[0]),
                int(db.execute("PRAGMA page_count").fetchone()[0]))


def forest(folder: Path) -> dict[str, list[object]]:
    with open_store(folder) as store:
        base = store.session("base")
        for i in range(300):
            base.add_message(user(f"base {i} " + "x" * 400))
        for f in range(40):
            fork = base.fork(f"fork-{f}")
            for i in range(20):
                fork.add_message(user(f"fork {f} {i} " + "y" * 400))
        return {s.name: store.messages(s.name) for s in store.sessions()}


def test_a_writers_close_gives_the_pages_packing_freed_back(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    expected = forest(folder)
    free, pages = free_pages(folder)
    assert free <= 64, (free, pages)  # (the 800 loose rows packed at the close took ~400)
    with open_store(folder, create=False) as store:
        assert {s.name: store.messages(s.name) for s in store.sessions()} == expected
        assert store.fsck() == []
        assert store.backend.pack_counts().loose_nodes == 0


def test_a_store_without_incremental_auto_vacuum_keeps_its_freelist(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        store.session("q").add_message(user("first"))
    with closing(sqlite3.connect(folder / "store.db", isolation_level=None)) as db:
        db.execute("PRAGMA auto_vacuum=NONE")
        db.execute("VACUUM")  # as a store made before format 6
    expected = forest(folder)
    free, _ = free_pages(folder)
    assert free > 64
    with open_store(folder, create=False) as store:
        assert {s.name: store.messages(s.name) for s in store.sessions()} == expected
        assert store.fsck() == []
