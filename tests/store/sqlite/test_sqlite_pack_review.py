"""Packs of a format-5 SQLite store where a review found them wrong: an append whose inline
packing fails after its commit, and reads that a gc of another connection races (it rebuilds
a pack that lost rows under a number of its own)."""

from __future__ import annotations

import os
import random
import select
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sesstree import open_store
from sesstree.repo.store import Store
from sesstree.store.sqlite import packread

LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def test_an_append_whose_packing_fails_after_its_commit_is_not_reported_as_failed(
    tmp_path: Path,
) -> None:
    # The 256th append commits, then packs its tail in a transaction of its own; a disk too
    # full for the pack (its pages are new ones) must not make the committed append raise
    # "nothing was written": the caller would write it again.
    rng = random.Random(1)
    messages = [{"role": "user", "content": f"{i} " + "".join(rng.choices(LETTERS, k=500))}
                for i in range(256)]
    with open_store(tmp_path) as store:
        session = store.session("a")
        for m in messages[:255]:
            session.add_message(m)
        db = store.backend._db  # type: ignore[attr-defined]
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        db.execute(f"PRAGMA max_page_count={pages + 8}")  # room for an append, not a pack
        session.add_message(messages[255])
        db.execute("PRAGMA max_page_count=1073741823")
        assert store.messages("a") == messages
    with open_store(tmp_path, create=False) as store:
        assert store.messages("a") == messages
        assert store.fsck() == []


def _forked_inside_a_pack(folder: Path) -> list[dict[str, Any]]:
    """A store whose session ``f`` ends inside the first pack of a session ``a`` that is
    deleted with its log: the next gc removes the pack's last 56 nodes and rebuilds it."""
    messages = [{"role": "user", "content": f"m {i}"} for i in range(300)]
    with open_store(folder) as store:
        for m in messages:
            store.session("a").add_message(m)
        store.fork("f", "a~100")
        store.delete_session("a")
        store.expire_reflog("a")
    return messages[:200]


@pytest.fixture
def racing_gc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        tuple[Store, list[dict[str, Any]], Callable[[str], None]]]:
    """A reader of that store, what ``f`` holds, and ``race(method)``: the next call of that
    PackedReader method first lets a gc of another connection run (once)."""
    expected = _forked_inside_a_pack(tmp_path)
    with open_store(tmp_path, create=False) as reader, \
            open_store(tmp_path, create=False) as other:

        def race(method: str) -> None:
            original = getattr(packread.PackedReader, method)
            ran: list[bool] = []

            def racing(self: Any, *args: Any) -> Any:
                if not ran:
                    ran.append(True)
                    assert other.gc().removed == 100
                return original(self, *args)

            monkeypatch.setattr(packread.PackedReader, method, racing)

        yield reader, expected, race


def test_a_load_racing_a_gc_that_rebuilds_its_pack_reads_back_exactly(
    racing_gc: tuple[Store, list[dict[str, Any]], Callable[[str], None]],
) -> None:
    reader, expected, race = racing_gc
    race("_packs_from")  # between the head row's read and the read of its packs
    assert reader.messages("f") == expected


def test_a_node_read_racing_a_gc_that_rebuilds_its_pack_is_found(
    racing_gc: tuple[Store, list[dict[str, Any]], Callable[[str], None]],
) -> None:
    reader, _, race = racing_gc
    ids = reader.chain("f").ids
    reader.backend._state.paths.packed.forget()  # type: ignore[attr-defined]
    race("raw")  # between the node row's read and the read of its pack
    node = reader.backend.get(ids[5])
    assert node is not None and node.id == ids[5]


def test_every_node_listed_while_a_gc_rebuilds_a_pack_is_what_was_stored(
    racing_gc: tuple[Store, list[dict[str, Any]], Callable[[str], None]],
) -> None:
    # (Sync and export read through iter_nodes: a node listed empty would be sent as such.)
    reader, _, race = racing_gc
    kept = {i: reader.backend.get(i) for i in reader.chain("f").ids}
    reader.backend._state.paths.packed.forget()  # type: ignore[attr-defined]
    race("raw")  # between a slice of rows and the read of their packs
    listed = list(reader.backend.iter_nodes())
    assert [n for n in listed if n.type == ""] == []
    assert {n.id: n for n in listed if n.id in kept} == kept


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_after_a_load_loads_too(tmp_path: Path) -> None:
    # A load of several large packs inflates in a second thread; a child forked after one
    # (multiprocessing's default start on Linux) has no such thread, and waited for it forever.
    rng = random.Random(2)
    messages = [{"role": "user", "content": "".join(rng.choices("abcdefghijklmnop", k=300))}
                for _ in range(3000)]
    with open_store(tmp_path) as store:
        session = store.session("a")
        for m in messages:
            session.add_message(m)
        store.repack()
    with open_store(tmp_path, create=False) as store:
        assert store.messages("a") == messages  # (the inflating thread is started)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            with open_store(tmp_path, create=False) as store:
                ok = store.messages("a") == messages
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 120)  # (a bound for a hang, not a timing)
        assert ready and os.read(read, 1) == b"1", "the forked child did not load the session"
    finally:
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
