"""Packs are compressed again once settled, with the store's dictionary at a higher level,
when a writer pauses or closes (sqlite/plainpacks.py): those made before the store had a
dictionary too; smaller, read back exactly, fsck clean, each compressed again once."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from sesstree import open_store
from sesstree.store.sqlite.plainpacks import CURSOR
from sesstree.testing import user


def packs(folder: Path) -> list[tuple[int, int, int]]:
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        return [tuple(r) for r in db.execute("SELECT pid, codec, length(data) FROM packs")]


def test_packs_made_before_the_dictionary_are_compressed_with_it(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    msgs = [user(f"message {i}: " + "the quick brown fox jumps over the lazy dog " * (i % 7 + 1))
            for i in range(1600)]
    with open_store(folder) as store:
        q = store.session("q")
        for m in msgs:  # no pause: the packs made inline have no dictionary
            q.add_message(m)
        made = {pid: size for pid, how, size in packs(folder)}
        assert made and all(how == 0 for _, how, _ in packs(folder))
    after = packs(folder)
    assert {how for _, how, _ in after} == {1}  # (trained at the close, then used for all)
    assert all(size < made[pid] for pid, _, size in after if pid in made)
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        assert db.execute("SELECT value FROM meta WHERE key = ?", (CURSOR,)).fetchone() == (
            str(max(pid for pid, _, _ in after)),)
    with open_store(folder, create=False) as store:
        assert store.messages("q") == msgs
        assert store.fsck() == []
