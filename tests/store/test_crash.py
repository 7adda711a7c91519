"""Kill a writer with SIGKILL at random moments: every acknowledged append must be there.

A child process (``tests/helpers/append_loop.py``) appends in a loop and prints ``ACK i`` after
each append returns. The test kills it at a random point, reopens the store and checks that
message ``i`` is in the session for every acknowledged ``i``, that the session is an unbroken
sequence, and that fsck finds nothing.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import open_store
from sesstree.store.sqlite.wal import frame_checksum, log_order, walk_log

SCRIPT = HELPERS / "append_loop.py"


def spawn(store: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(store), "quest", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def kill_after(proc: subprocess.Popen[str], acks: int, rng: random.Random,
               starved: bool = False) -> list[int]:
    """Let the child acknowledge ``acks`` appends, wait a random moment, SIGKILL it.

    Returns every index it acknowledged, including lines still in the pipe and lines already
    read ahead into the pipe's buffer. ``starved`` plays a loaded machine: after its first
    acknowledgement the child runs a moment unread, then gets no more CPU until it is killed,
    so every acknowledgement it made is already waiting when the test reads.
    """
    assert proc.stdout is not None and proc.stderr is not None
    acked: list[int] = []
    for line in proc.stdout:
        acked.append(int(line.split()[1]))
        if starved and len(acked) == 1:
            time.sleep(0.05)
            proc.send_signal(signal.SIGSTOP)
        if len(acked) >= acks:
            break
    time.sleep(rng.random() * 0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # Read the rest through the same file object: ``communicate()`` reads the raw pipe and
    # would miss the lines the loop above had already buffered.
    with proc.stdout, proc.stderr:
        rest, err = proc.stdout.read(), proc.stderr.read()
    acked.extend(int(line.split()[1]) for line in rest.splitlines() if line.startswith("ACK"))
    assert proc.returncode == -signal.SIGKILL, err
    assert acked, f"child acknowledged nothing before it was killed: {err}"
    return acked


def check_store(folder: Path, acked: list[int]) -> int:
    with open_store(folder, create=False) as store:
        contents = [m["content"] for m in store.messages("quest")]
        assert contents == [f"m:{i}" for i in range(len(contents))], "gap or reorder"
        assert len(contents) > max(acked), (len(contents), max(acked))
        assert store.fsck() == []
        return len(contents)


def run_rounds(folder: Path, rounds: int, seed: int, *extra: str) -> None:
    rng = random.Random(seed)
    acked: list[int] = []
    for _ in range(rounds):
        proc = spawn(folder, *extra)
        acked += kill_after(proc, rng.randint(1, 150), rng)
        check_store(folder, acked)


def test_sigkill_keeps_every_acknowledged_append(tmp_path: Path) -> None:
    run_rounds(tmp_path / "s", 5, seed=1)


def test_sigkill_durable_mode(tmp_path: Path) -> None:
    run_rounds(tmp_path / "s", 2, 2, "--durable")


def test_sigkill_batched_mode(tmp_path: Path) -> None:
    run_rounds(tmp_path / "s", 3, 3, "--batch", "25")


def tear_a_transaction(wal: Path, frames: int, rng: random.Random) -> None:
    """Leave the WAL as a crash in the middle of writing a transaction does: ``frames`` - 1
    frames of it written whole (their checksums chain on from the log's), then its commit frame
    only part-way, and nothing after."""
    data = bytearray(wal.read_bytes())
    page = struct.unpack(">I", data[8:12])[0]
    frame = 24 + page
    salts, order = bytes(data[16:24]), log_order(bytes(data))
    _, end = walk_log(bytes(data), frame, salts)
    assert end > 0, "the child left no log to tear"
    seed = struct.unpack_from(">II", data, 32 + (end - 1) * frame + 16)
    at = 32 + end * frame
    del data[at:]
    for j in range(frames):
        source = 32 + rng.randrange(end) * frame  # the page image of a frame of the log
        new = bytearray(data[source : source + frame])
        new[4:8] = new[4:8] if j == frames - 1 and any(new[4:8]) else struct.pack(
            ">I", 1000 if j == frames - 1 else 0)
        new[8:16] = salts
        seed = frame_checksum(order, bytes(new), 0, frame, seed)
        new[16:24] = struct.pack(">II", *seed)
        data += new
    del data[len(data) - rng.randrange(1, frame) :]  # the commit frame: torn
    wal.write_bytes(bytes(data))


@pytest.mark.parametrize("starved", [False, True])
def test_a_torn_last_transaction_loses_nothing_acknowledged(tmp_path: Path, starved: bool) -> None:
    """A crash while a transaction was being written leaves its frames part-written at the
    end of the WAL. It was never acknowledged: the store opens with every acknowledged append,
    is sound, and nothing is reported as damage (with the WAL index the crash left, and
    without it). Nothing is there that the writer did not write: at most the one append that
    committed but was killed before it printed its acknowledgement, past the acknowledged
    ones; ``starved`` kills it the way a loaded machine does (see :func:`kill_after`)."""
    rng = random.Random(4)
    for round, frames in enumerate((1, 3, 8)):
        folder = tmp_path / f"s{round}"
        proc = spawn(folder)
        acked = kill_after(proc, 2 if starved else rng.randint(100, 300), rng, starved=starved)
        tear_a_transaction(folder / "store.db-wal", frames, rng)
        if round == 2:
            (folder / "store.db-shm").unlink()
        with open_store(folder, create=False) as store:
            contents = [m["content"] for m in store.messages("quest")]
            assert contents == [f"m:{i}" for i in range(len(contents))]
            written = max(acked) + 1  # messages m:0 .. m:max(acked) were acknowledged
            assert written <= len(contents) <= written + 1, (len(contents), written)
            assert store.fsck() == []
            # and the store still takes writes
            store.session("quest").add_message({"role": "user", "content": f"m:{len(contents)}"})
            assert store.fsck() == []
        assert not list(folder.glob("store.db-wal.damaged-*"))


def test_garbage_appended_to_wal(tmp_path: Path) -> None:
    """Random bytes after the last valid WAL frame are ignored, not fatal."""
    folder = tmp_path / "s"
    proc = spawn(folder)
    acked = kill_after(proc, 50, random.Random(5))
    with (folder / "store.db-wal").open("ab") as f:
        f.write(os.urandom(3000))
    check_store(folder, acked)


@pytest.mark.stress
def test_sigkill_many_rounds(tmp_path: Path) -> None:
    run_rounds(tmp_path / "a", 40, seed=10)
    run_rounds(tmp_path / "b", 15, 11, "--durable")
    run_rounds(tmp_path / "c", 15, 12, "--batch", "7")
