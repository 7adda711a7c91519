"""The SQLite text index (format 7) against real damage: a writer SIGKILLed while it appends
and catches the index up, a format-6 store upgraded and indexed online (resumably), a store
on read-only media searched without writing, fsck naming a damaged entry."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from small_disk import read_only_view

from sesstree import open_store
from sesstree.store.base import SearchQuery
from sesstree.store.sqlite.textindex import MARK
from sesstree.testing import grow, user
from sesstree.testing.contract.search import scan

# Appends, and searches every few appends (each search catches the index up in its own
# write transaction), acknowledging each append once it returned.
_CHILD = """
import sys
from sesstree import open_store
store = open_store(sys.argv[1])
s = store.session("q")
i = 0
while True:
    s.add_message({"role": "user", "content": f"needle number{i} of the writer"})
    print("ACK", i, flush=True)
    if i % 3 == 0:
        store.search("needle", limit=1)
    i += 1
"""


def _mark(folder: Path) -> int:
    with closing(sqlite3.connect(folder / "store.db")) as db:
        return int(db.execute("SELECT value FROM meta WHERE key = ?", (MARK,)).fetchone()[0])


def test_a_killed_writer_leaves_index_and_nodes_agreeing(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    open_store(folder).close()
    for round in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(folder)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        acked = []
        for line in proc.stdout:
            acked.append(int(line.split()[1]))
            if len(acked) >= 40 + 17 * round:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()
        with open_store(folder) as store:
            assert store.fsck() == []
            query = SearchQuery("needle")
            found = {h.id for h in store.search("needle", limit=10_000).hits}
            assert found == scan(store, query)
            # Every acknowledged append is found by its own word.
            for i in acked[-5:]:
                assert len(store.search(f"number{i}").hits) == 1


def test_a_format_6_store_is_upgraded_and_indexed_online_resumably(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        ids = grow(store, "q", 2_500)  # packed and loose
        store.session("w").add_message(user("a word only here"))
    with closing(sqlite3.connect(folder / "store.db")) as db:  # as format 6 left it
        for table in ("search_words", "search_grams", "search_terms"):
            db.execute(f"DROP TABLE {table}")
        db.execute("DROP INDEX nodes_parent")
        db.execute("DELETE FROM meta WHERE key LIKE 'index_%'")
        db.execute("UPDATE meta SET value = '6' WHERE key = 'format'")
        db.commit()
    with open_store(folder) as store:
        assert store.backend.store_format().version == 7
        index = store.backend._text  # type: ignore[attr-defined]
        # One slice indexed, then the process stops (as a kill between two slices would).
        assert index._slice(0, 1, None) > 0
    assert 0 < _mark(folder) < 2_501
    with open_store(folder) as store:
        assert [h.id for h in store.search("q-2499").hits] == [ids[-1]]
        assert [h.match for h in store.search("only").hits] == ["only"]
        assert store.fsck() == []
        counts = store.backend.index_counts()  # type: ignore[attr-defined]
        assert counts.entries == 2_501 and counts.pending == 0
        assert 0 < counts.index_bytes
    assert _mark(folder) == 2_501


def test_a_store_on_read_only_media_is_searched_without_writing(tmp_path: Path) -> None:
    folder = tmp_path / "src" / "s"
    with open_store(folder) as store:
        grow(store, "q", 20)
        store.search("q")  # indexed up to here
        grow(store, "w", 5)  # not indexed yet
    before = (folder / "store.db").read_bytes()
    with read_only_view(tmp_path / "src", tmp_path / "ro") as view, open_store(view / "s") as store:
        assert len(store.search("w-3").hits) == 1  # read after the mark, on its text
        assert len(store.search("q-3").hits) == 1  # through the index
        assert len(store.search("w", mode="substring", limit=100).hits) == 5
    assert (folder / "store.db").read_bytes() == before


def test_fsck_names_a_damaged_or_missing_entry_and_the_rebuild_restores_it(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        one, two = grow(store, "q", 2)
        store.search("q")
    with closing(sqlite3.connect(folder / "store.db")) as db:
        seq = db.execute("SELECT max(seq) FROM nodes").fetchone()[0]
        db.execute("INSERT INTO search_words(search_words, rowid, t) VALUES ('delete', ?, 'q 1')", (seq,))
        db.execute("DELETE FROM search_terms WHERE term = 'q'")
        db.commit()
    with open_store(folder) as store:
        faults = store.fsck()
        assert any(two[:12] in f and "no entry" in f for f in faults), faults
        assert any("vocabulary" in f for f in faults), faults
        store.backend.rebuild_index()  # type: ignore[attr-defined]
        assert store.fsck() == []
        assert [h.id for h in store.search("q", mode="substring", limit=5).hits] == [two, one]
