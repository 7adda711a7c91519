"""Format 6 on SQLite: each node's recorded time (``nodes.t``). A format-5 store (format 6's
tables without the column) is upgraded when opened for writing, in place: its nodes keep no
time (the reflog dates them, as before), what is written after keeps one, everything reads
back exactly; on read-only media it is read as it is; a sesstree reading up to format 5
refuses a format-6 store with its one line and leaves it as it is."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from small_disk import read_only_view

from sesstree import StoreFormatError, open_store
from sesstree.cli.select import node_times
from sesstree.store.sqlite import opening
from sesstree.testing import grow, user


def as_format_5(folder: Path) -> None:
    """The store as the sesstree of format 5 left it: no recorded times, format 5."""
    with closing(sqlite3.connect(folder / "store.db")) as db:
        db.execute("ALTER TABLE nodes DROP COLUMN t")
        db.execute("UPDATE meta SET value = '5' WHERE key = 'format'")
        db.commit()


def format_of(folder: Path) -> str:
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        return str(db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0])


def test_a_format_5_store_upgrades_in_place_and_dates_old_nodes_by_the_reflog(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        old = grow(store, "q", 300)  # packed (256) and a loose tail
        store.fork("w", "q~10")
        before = {name: store.messages(name) for name in ("q", "w")}
    as_format_5(folder)
    with open_store(folder, create=False) as store:
        assert store.backend.store_format().version == 7  # (then 7: the text index)
        assert {name: store.messages(name) for name in ("q", "w")} == before
        assert store.fsck() == []
        assert store.backend.recorded(old) == {}  # written before the store kept times
        new = store.session("q").add_message(user("after")).id
        assert set(store.backend.recorded([*old, new])) == {new}
        chain = store.session("q").events()[::-1]
        times = node_times(store, "q", chain)
        assert set(times) == {n.id for n in chain}  # the old ones from the reflog
        assert times[new] == store.backend.recorded([new])[new]
    assert format_of(folder) == "7"


def test_a_format_5_store_reads_as_it_is_on_read_only_media(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        grow(store, "q", 40)
        expected = store.messages("q")
    as_format_5(folder)
    with read_only_view(tmp_path, tmp_path.parent / f"{tmp_path.name}-ro") as view:
        with open_store(view / "s", create=False) as store:
            assert store.messages("q") == expected
            assert store.backend.recorded(store.chain("q").ids) == {}
            assert store.fsck() == []
    assert format_of(folder) == "5"


def test_a_sesstree_reading_up_to_format_5_refuses_a_format_6_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        grow(store, "q", 3)
    before = (folder / "store.db").read_bytes()
    monkeypatch.setattr(opening, "FORMAT_VERSION", 5)
    with pytest.raises(StoreFormatError, match="has store format 7; this sesstree reads up to 5"):
        open_store(folder, create=False)
    assert (folder / "store.db").read_bytes() == before
