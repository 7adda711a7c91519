"""The limits of the write-ahead log, and what sesstree does about them.

A commit lives only in the WAL until a checkpoint copies it into the main file. SQLite reads
the WAL frame by frame while each frame's checksum holds, so one flipped bit ends the log
there: that commit and every later one are gone at the next open. sesstree checkpoints a
writer's commits when it pauses and when it closes (so little lives only in the WAL), and
fsck reports a damaged frame that hides later commits. What it cannot do is bring them back.
"""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import sys
from pathlib import Path

from core_testkit import HELPERS

from sesstree import open_store
from sesstree.store.sqlite import SqliteBackend
from sesstree.store.sqlite_wal import _read_in_child


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


def killed_writer(folder: Path, acks: int) -> int:
    """A writer killed after ``acks`` appends, its commits still only in the WAL."""
    child = subprocess.Popen([sys.executable, str(HELPERS / "append_loop.py"), str(folder), "q"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for _ in range(acks):
        child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    return acks + sum(1 for line in out.splitlines() if line.startswith("ACK"))


def test_a_flipped_bit_in_the_wal_is_reported_by_fsck(tmp_path: Path) -> None:
    """The residual risk, stated by a test: the commits after a damaged WAL frame are lost
    (the store shows an older, sound state), and fsck says so instead of staying silent."""
    folder = tmp_path / "s"
    acked = killed_writer(folder, 200)
    wal = folder / "store.db-wal"
    data = bytearray(wal.read_bytes())
    page = struct.unpack(">I", data[8:12])[0]
    frames = (len(data) - 32) // (24 + page)
    k = frames // 2
    data[32 + k * (24 + page) + 24 + random.Random(1).randrange(page)] ^= 0x10
    wal.write_bytes(bytes(data))
    with open_store(folder, create=False) as store:
        contents = [m["content"] for m in store.messages("q")]
        assert contents == [f"m:{i}" for i in range(len(contents))]  # a sound, older state
        assert len(contents) < acked  # what the damaged frame hid is gone
        faults = store.fsck()
        assert any("store.db-wal" in f and "damaged" in f for f in faults), faults


def test_a_torn_wal_tail_is_not_reported(tmp_path: Path) -> None:
    """A crash in the middle of writing a frame is not damage: nothing after it was
    acknowledged, and fsck stays quiet."""
    folder = tmp_path / "s"
    killed_writer(folder, 100)
    wal = folder / "store.db-wal"
    data = wal.read_bytes()
    page = struct.unpack(">I", data[8:12])[0]
    frames = (len(data) - 32) // (24 + page)
    wal.write_bytes(data[: 32 + frames * (24 + page) - page // 2])
    with open_store(folder, create=False) as store:
        assert store.fsck() == []
