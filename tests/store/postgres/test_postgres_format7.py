"""Format 7 on PostgreSQL: the text index. A format-6 store is upgraded when opened with the
schema only (the index is back-filled afterwards by the catch-up, resumably: killed midway,
the next search goes on and finds everything); a sesstree reading up to format 6 refuses a
format-7 store; a writer killed mid-run leaves index and nodes agreeing; hostile patterns
reach the server only as quoted lexemes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from sesstree import StoreFormatError, open_store
from sesstree.store.base import SearchQuery
from sesstree.store.postgres import schema as postgres_schema
from sesstree.testing import grow

SRC = Path(__file__).resolve().parents[3] / "src"


def _keys(store: object, pattern: str, mode: str = "words") -> list[int]:
    hits = store.backend.search_nodes(SearchQuery(pattern, mode=mode), 10_000)  # type: ignore[attr-defined]
    return [h.key for h in hits]


def _to_format_6(url: str) -> None:
    """Take a format-7 store back to what format 6 had: no index, no trigger."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("DROP TRIGGER nodes_index ON nodes")
        conn.execute("DROP FUNCTION sesstree_index_pending()")
        for table in ("search_docs", "search_terms", "search_pending"):
            conn.execute(f"DROP TABLE {table}")  # type: ignore[arg-type]
        conn.execute("DROP INDEX nodes_parent")
        conn.execute("DROP INDEX refs_target")
        conn.execute("DELETE FROM meta WHERE key = 'index_backfill'")
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'format'")


def test_a_format_6_store_upgrades_at_once_and_back_fills_when_searched(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        old = grow(store, "q", 120)
    _to_format_6(postgres_url)
    with open_store(postgres_url) as store:
        assert store.backend.store_format().version == 7
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            # The upgrade indexed nothing: every row is before the back-fill mark.
            assert conn.execute("SELECT count(*) FROM search_docs").fetchone() == (0,)
        new = store.session("q").add_message({"role": "user", "content": "q-new"}).id
        assert len(_keys(store, "q")) == 121
        counts = store.backend.index_counts()  # type: ignore[attr-defined]
        assert (counts.entries, counts.pending) == (121, 0)
        assert store.fsck() == []
        assert {h.id for h in store.backend.search_nodes(SearchQuery("new"), 5)} == {new}  # type: ignore[attr-defined]
        assert len(old) == 120


_KILLED_BACKFILL = """
import os, signal, sys
from sesstree import open_store
from sesstree.store.postgres import textindex
textindex.SLICE = 10
with open_store(sys.argv[1]) as store:
    def progress(done, total):
        if done >= 30:
            os.kill(os.getpid(), signal.SIGKILL)
    store.backend._text.catch_up(progress)
"""


def test_a_back_fill_killed_midway_goes_on_at_the_next_search(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        grow(store, "q", 100)
        want = _keys(store, "q")
    _to_format_6(postgres_url)
    proc = subprocess.run([sys.executable, "-c", _KILLED_BACKFILL, postgres_url],
                          env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        done = conn.execute("SELECT count(*) FROM search_docs").fetchone()
        mark = conn.execute("SELECT value FROM meta WHERE key = 'index_backfill'").fetchone()
    assert done == (30,) and mark is not None and int(mark[0]) > 0  # three slices committed
    with open_store(postgres_url) as store:
        assert _keys(store, "q") == want
        assert store.backend.index_counts().pending == 0  # type: ignore[attr-defined]
        assert store.fsck() == []


_WRITER = """
import sys
from sesstree import open_store
with open_store(sys.argv[1]) as store:
    s = store.session("w")
    for i in range(100_000):
        s.add_message({"role": "user", "content": f"written {i}"})
        print(i, flush=True)
"""


def test_a_writer_killed_mid_run_leaves_index_and_nodes_agreeing(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        grow(store, "q", 5)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, postgres_url], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(SRC)}, text=True)
    assert proc.stdout is not None
    acked = -1
    with open_store(postgres_url) as reader:
        for line in proc.stdout:
            acked = int(line)
            if acked == 40:
                _keys(reader, "written")  # a catch-up while the writer goes on
            if acked >= 80:
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with open_store(postgres_url) as store:
        stored = len(store.messages("w"))
        assert stored >= acked + 1
        assert len(_keys(store, "written")) == stored
        assert store.backend.index_faults() == []  # type: ignore[attr-defined]
        assert store.fsck() == []


def test_a_sesstree_reading_up_to_format_6_refuses_format_7(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(postgres_url) as store:
        grow(store, "q", 2)
    monkeypatch.setattr(postgres_schema, "FORMAT_VERSION", 6)
    with pytest.raises(StoreFormatError, match="has store format 7; this sesstree reads up to 6"):
        open_store(postgres_url)


@pytest.mark.parametrize("pattern", ["a'b", "a\\b", "'", "\\'", "x:*", "a & !b", "_", "a_%"])
def test_quotes_and_operators_reach_the_server_as_lexemes(postgres_url: str, pattern: str) -> None:
    with open_store(postgres_url) as store:
        s = store.session("q")
        s.add_message({"role": "user", "content": f"hold {pattern} here"})
        s.add_message({"role": "user", "content": "nothing"})
        for mode in ("substring", "words"):
            query = SearchQuery(pattern, mode=mode)  # type: ignore[arg-type]
            try:
                hits = store.backend.search_nodes(query, 10)  # type: ignore[attr-defined]
            except Exception as exc:
                assert type(exc).__name__ == "SearchQueryError", exc
                continue
            texts = [store.show(h.id).data["content"] for h in hits]
            assert texts == [f"hold {pattern} here"], (mode, texts)


def test_refs_reaching_walks_down_and_equals_the_walk_up_from_every_session(postgres_url: str) -> None:
    from sesstree.repo import search as repo_search

    class Up:  # the backend without refs_reaching: the generic walk up from every session
        def __init__(self, backend: object) -> None:
            self.list_refs = backend.list_refs  # type: ignore[attr-defined]
            self.chain = backend.chain  # type: ignore[attr-defined]

    with open_store(postgres_url) as store:
        ids = grow(store, "q", 12)
        store.fork("f", "q~6")
        ids += grow(store, "f", 4)
        store.fork("g", "f~1")
        ids += grow(store, "g", 2)
        down = store.backend.refs_reaching(ids, "sessions/", 10_000)  # type: ignore[attr-defined]
        up = repo_search._reaching(Up(store.backend), ids)  # type: ignore[arg-type]
        assert {i: [(r.name, d) for r, d in v.refs] for i, v in down.items()} == \
            {i: [(r.name, d) for r, d in v.refs] for i, v in up.items()}
        assert all(v.complete for v in down.values())
        assert not store.backend.refs_reaching(ids[:1], "sessions/", 3)[ids[0]].complete  # type: ignore[attr-defined]
