"""A writer's background thread (store/sqlite/background.py): the tails its appends make
PACK_AT long are packed there, on a connection of its own, and committed on the backend's;
every CHECKPOINT_EVERY commits it checkpoints the WAL.

Kills while it packs are in test_sqlite_pack_crash.py (the child's packs are made by this
thread). Here: close waits for the pack under way and leaves no thread; reads while a pack is
built but not committed read back exactly; a pack another writer made meanwhile makes this one
write nothing; a forked child has its own thread; durable writers keep SQLite's checkpoints.
"""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from sesstree import open_store
from sesstree.store.packs import PACK_AT, PACK_MIN
from sesstree.store.sqlite import background, packing


def message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"m:{i} " + "word " * (i % 23)}


def fill(store: Any, name: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    session = store.session(name)
    out = [message(start + i) for i in range(n)]
    for m in out:
        session.add_message(m)
    return out


def rows(folder: Path) -> tuple[int, int]:
    """Packs, and loose node rows, read with a connection of its own."""
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        packs = db.execute("SELECT count(*) FROM packs").fetchone()[0]
        loose = db.execute("SELECT count(*) FROM nodes WHERE pack IS NULL").fetchone()[0]
    return int(packs), int(loose)


def threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sesstree-background"]


@contextmanager
def held_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event,
                                                                    threading.Event]]:
    """The first pack commit waits: ``built`` is set when a pack is built and about to be
    committed, and it goes on once ``go`` is set."""
    built, go = threading.Event(), threading.Event()
    commit = packing.Packer._commit

    def waiting(self: packing.Packer, run: Any) -> int:
        if not built.is_set():
            built.set()
            assert go.wait(60)
        return commit(self, run)

    monkeypatch.setattr(packing.Packer, "_commit", waiting)
    try:
        yield built, go
    finally:
        go.set()


def test_appends_are_packed_by_the_background_thread_and_read_back(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        sent = fill(store, "q", 2 * PACK_AT + 5)
        assert threads(), "no background thread was started"
        counts = store.backend.pack_counts()  # (waits for the packing queued)
        assert (counts.packs, counts.loose_nodes) == (2, 5)
        assert store.messages("q") == sent
    assert rows(tmp_path) == (2, 5)  # (a tail shorter than PACK_MIN stays loose at close)


def test_close_waits_for_the_pack_under_way_and_ends_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with held_commit(monkeypatch) as (built, go):
        store = open_store(tmp_path)
        sent = fill(store, "q", PACK_AT + PACK_MIN)
        assert built.wait(60)
        closer = threading.Thread(target=store.close)
        closer.start()
        closer.join(0.2)
        assert closer.is_alive(), "close did not wait for the pack being made"
        go.set()
        closer.join(60)
        assert not closer.is_alive()
    assert not threads()
    packs, loose = rows(tmp_path)
    assert loose == 0 and packs >= 2  # the pack under way, then the closing pause's
    with open_store(tmp_path, create=False) as store:
        assert store.messages("q") == sent
        assert store.fsck() == []


def test_reads_while_a_pack_is_built_and_not_committed_read_back_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with held_commit(monkeypatch) as (built, go), open_store(tmp_path) as store:
        sent = fill(store, "q", PACK_AT)
        assert built.wait(60)
        assert store.messages("q") == sent  # all loose still
        more = fill(store, "q", 10, start=PACK_AT)  # appends go on meanwhile
        with open_store(tmp_path, create=False) as other:
            assert other.messages("q") == sent + more
        go.set()
        assert store.backend.pack_counts().packs == 1
        assert store.messages("q") == sent + more
        assert store.fsck() == []


def test_a_pack_another_writer_made_meanwhile_makes_this_one_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with held_commit(monkeypatch) as (built, go), open_store(tmp_path) as store:
        sent = fill(store, "q", PACK_AT)
        assert built.wait(60)
        with open_store(tmp_path, create=False) as other:
            other.backend.repack()  # packs the same rows first (its commit is the second)
        go.set()
        counts = store.backend.pack_counts()
        assert (counts.packs, counts.loose_nodes) == (1, 0)
        assert store.messages("q") == sent
        assert store.fsck() == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_the_parent_packs_has_a_thread_of_its_own(tmp_path: Path) -> None:
    parent = open_store(tmp_path)
    try:
        sent = fill(parent, "p", PACK_AT)  # the parent's thread is at work, or was
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            ok = b"0"
            try:
                inherited = parent.backend._background  # type: ignore[attr-defined]
                fresh = inherited._thread is None and inherited._own is None
                with open_store(tmp_path, create=False) as store:
                    mine = fill(store, "c", PACK_AT + 3, start=10_000)
                    packed = store.backend.pack_counts().packs >= 1
                    ok = b"1" if fresh and packed and store.messages("c") == mine else b"0"
            finally:
                os.write(write, ok)
                os._exit(0)
        os.close(write)
        ready: list[int] = []
        try:
            ready, _, _ = select.select([read], [], [], 120)  # (a bound for a hang)
            assert ready and os.read(read, 1) == b"1", "the forked child could not pack"
        finally:
            if not ready:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
        more = fill(parent, "p", PACK_AT, start=PACK_AT)  # the parent goes on packing
        assert parent.backend.pack_counts().packs >= 3
        assert parent.messages("p") == sent + more
        assert parent.messages("c")[:3] == [message(10_000 + i) for i in range(3)]
        assert parent.fsck() == []
    finally:
        parent.close()


def test_a_writer_checkpoints_in_the_background_every_so_many_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []
    real = background.Background.checkpoint
    def checkpoint(self: background.Background) -> None:
        asked.append(True)
        real(self)

    monkeypatch.setattr(background.Background, "checkpoint", checkpoint)
    with open_store(tmp_path) as store:
        fill(store, "q", 2 * background.CHECKPOINT_EVERY)
        assert len(asked) == 2
    with open_store(tmp_path, durability="durable") as store:
        fill(store, "d", background.CHECKPOINT_EVERY)  # (its WAL is sized for SQLite's own)
        assert len(asked) == 2


def test_pack_counts_inside_a_snapshot_does_not_wait_for_a_commit_that_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with held_commit(monkeypatch) as (built, go), open_store(tmp_path) as store:
        sent = fill(store, "q", PACK_AT)
        assert built.wait(60)
        with store.backend.snapshot():  # holds the backend's lock, which the commit needs
            go.set()
            assert store.backend.pack_counts().packs == 0  # (returns: it does not wait)
        assert store.backend.pack_counts().packs == 1
        assert store.messages("q") == sent
