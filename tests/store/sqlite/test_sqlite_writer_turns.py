"""Writers get fair turns: back-to-back short write transactions do not starve a writer.

Four processes hammer the store with write transactions back to back (gc in a loop; writes
of unnamed nodes that gc removes again; tiny transactions; transactions that hold the lock
5 ms and let go for a moment) while a fifth appends with a short lock timeout: every
one of its appends must land, none may time out with StoreLockedError.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import open_store

CHILD = HELPERS / "store_child.py"


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def appender_among_gc_loops(folder: Path, appends: int, timeout: float) -> None:
    with open_store(folder) as store:
        base = store.session("base")
        with store.batch():
            for i in range(3000):
                base.add_message({"role": "user", "content": f"base {i}"})
    hammers = [child(job, str(folder)) for job in ("gc", "churn", "tight", "hold")]
    try:
        for h in hammers:  # both are at work before the appender starts
            assert h.stdout is not None and h.stdout.readline().strip() == "GC"
        writer = child("write", str(folder), "w", str(appends), str(timeout))
        out, err = writer.communicate(timeout=300)
    finally:
        for h in hammers:
            h.kill()
            h.communicate(timeout=30)
    assert writer.returncode == 0, err[-1500:]
    assert out.split() == [x for i in range(appends) for x in ("ACK", str(i))]
    with open_store(folder) as store:
        assert [m["content"] for m in store.messages("w")] == [f"w:{i}" for i in range(appends)]
        assert len(store.messages("base")) == 3000
        assert store.fsck() == []


def test_gc_in_a_loop_does_not_starve_a_writer(tmp_path: Path) -> None:
    appender_among_gc_loops(tmp_path / "s", appends=60, timeout=1.0)


@pytest.mark.stress
def test_gc_in_a_loop_does_not_starve_a_writer_long(tmp_path: Path) -> None:
    appender_among_gc_loops(tmp_path / "s", appends=3000, timeout=1.0)


def test_gc_keeps_what_a_concurrent_write_reaches_again(tmp_path: Path) -> None:
    """A node gc found unreachable, then reached again by a write before its chunk is
    deleted (a child appended to it, a ref pointed at it), is kept with its ancestors."""
    from sesstree import make_node
    from sesstree.node import session_ref
    from sesstree.store.base import RefUpdate
    from sesstree.store.sqlite import gc as sqlite_gc

    folder = tmp_path / "s"
    with open_store(folder) as store, open_store(folder) as other:
        root = make_node(None, "user/message", {"role": "user", "content": "r"})
        mid = make_node(root.id, "tool/result", {"role": "tool", "tool_call_id": "c",
                                                 "content": "x" * 3000})
        junk = make_node(None, "user/message", {"role": "user", "content": "junk"})
        store.write([root, mid, junk])  # nothing names them
        real = sqlite_gc._Plan.__init__

        def plan_then_write(plan: sqlite_gc._Plan, db: object) -> None:
            real(plan, db)  # type: ignore[arg-type]
            # After the snapshot, before the first delete: another connection writes.
            leaf = make_node(mid.id, "user/message", {"role": "user", "content": "leaf"})
            other.write([leaf], [RefUpdate(session_ref("late"), None, leaf.id, "late")])

        sqlite_gc._Plan.__init__ = plan_then_write  # type: ignore[method-assign]
        try:
            result = store.gc()
        finally:
            sqlite_gc._Plan.__init__ = real  # type: ignore[method-assign]
        assert result.unreachable == [junk.id] and result.removed == 1
        assert [m["content"] for m in store.messages("late")][-1] == "leaf"
        assert len(store.messages("late")) == 3
        assert store.fsck() == []


def test_gc_reads_no_payload(tmp_path: Path) -> None:
    """gc finds reachability from ids and parents alone: SQLite's authorizer sees every
    column a statement reads, and no payload column is among them."""
    import sqlite3

    from sesstree import make_node
    from sesstree.store.sqlite.backend import SqliteBackend

    with open_store(tmp_path / "s") as store:
        q = store.session("q")
        for i in range(50):
            q.add_message({"role": "user", "content": f"m{i}" + "x" * (2000 if i % 5 else 0)})
        junk = make_node(None, "tool/result", {"role": "tool", "tool_call_id": "c",
                                               "content": "y" * 5000})
        store.write([junk])
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        read: set[tuple[str, str]] = set()

        def watch(action: int, table: str | None, column: str | None, *_: object) -> int:
            if action == sqlite3.SQLITE_READ and table and column:
                read.add((table, column))
            return sqlite3.SQLITE_OK

        backend._db.set_authorizer(watch)
        try:
            result = store.gc()
        finally:
            backend._db.set_authorizer(None)
        assert result.unreachable == [junk.id] and result.removed == 1
        assert ("nodes", "parent") in read
        assert ("nodes", "data") not in read and ("blobs", "data") not in read
        assert len(store.messages("q")) == 50 and store.fsck() == []
