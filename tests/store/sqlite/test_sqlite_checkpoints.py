"""A writer's commits reach the main file when it pauses and when it closes, so little lives
only in the write-ahead log (where one damaged frame would hide every later commit: see
test_sqlite_wal.py)."""

from __future__ import annotations

import struct
from pathlib import Path

from sesstree import open_store
from sesstree.store.sqlite.backend import SqliteBackend
from sesstree.store.sqlite.wal import _read_in_child


def backfilled(folder: Path) -> tuple[int, int]:
    """(frames in the WAL, frames already copied into the main file), from the WAL index,
    read by another process (closing a file of it here would drop SQLite's locks on it)."""
    index = _read_in_child(folder / "store.db-shm", 100)
    return struct.unpack("=I", index[16:20])[0], struct.unpack("=I", index[96:100])[0]


def test_closing_a_writer_checkpoints_what_it_wrote(tmp_path: Path) -> None:
    """Even while another connection keeps the store open (so SQLite's own checkpoint at
    the last close does not run), a writer's commits reach the main file when it closes."""
    folder = tmp_path / "s"
    with open_store(folder) as reader:
        reader.messages("q") if reader.has_session("q") else None
        writer = open_store(folder)
        q = writer.session("q")
        for i in range(50):
            q.add_message({"role": "user", "content": f"m{i}"})
        frames, copied = backfilled(folder)
        assert frames > 0
        writer.close()
        frames, copied = backfilled(folder)
        assert frames == copied, (frames, copied)
        assert len(reader.messages("q")) == 50


def test_a_writer_that_pauses_is_checkpointed(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as reader, open_store(folder) as writer:
        backend = writer.backend
        assert isinstance(backend, SqliteBackend)
        backend._idle.idle = 0.05  # a short pause, so the test does not wait a second
        q = writer.session("q")
        for i in range(50):
            q.add_message({"role": "user", "content": f"m{i}"})
        # Wait (liveness only, not speed) for the pause to be noticed.
        assert backend._idle.done.wait(60)
        frames, copied = backfilled(folder)
        assert frames == copied > 0
        assert len(reader.messages("q")) == 50
