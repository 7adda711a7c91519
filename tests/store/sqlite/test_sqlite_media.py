"""Full disks and read-only media: one clear error, reads keep working, nothing is lost.

These use real mounts (a small tmpfs for a full disk, a read-only bind mount for read-only
media), which need root and mount permission; without them the tests are skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import StoreFullError, StoreReadOnlyError, open_store


def _mount(*args: str) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB file system of its own."""
    where = tmp_path / "disk"
    where.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        yield where
    finally:
        _umount(where)


def read_only_view(source: Path, where: Path) -> None:
    """Show folder ``source`` at ``where``, read-only (a bind mount remounted ro)."""
    where.mkdir()
    if not _mount("--bind", str(source), str(where)):
        pytest.skip("cannot bind-mount here (needs root and mount permission)")
    if not _mount("-o", "remount,ro,bind", str(where)):
        _umount(where)
        pytest.skip("cannot remount read-only here")


def fill(store_path: Path) -> int:
    """Append until the disk is full; returns how many appends were acknowledged."""
    n = 0
    with open_store(store_path) as store:
        q = store.session("q")
        with pytest.raises(StoreFullError) as caught:
            while True:
                q.add_message({"role": "user", "content": f"{n} " + "z" * 900})
                n += 1
        message = str(caught.value)
        assert "full" in message and "\n" not in message
        assert len(store.messages("q")) == n  # reads still work on a full disk
        with pytest.raises(StoreFullError):
            with store.batch():
                for i in range(20):
                    q.add_message({"role": "user", "content": f"batch {i} " + "z" * 900})
        assert len(store.messages("q")) == n
    return n


def test_a_full_disk_is_one_clear_error_and_loses_nothing(small_disk: Path) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 1_000_000)
    folder = small_disk / "s"
    acked = fill(folder)
    assert acked > 10
    with pytest.raises(StoreFullError):  # a new store on the full disk: the same error
        open_store(small_disk / "other")
    with open_store(folder, durability="durable") as store:  # no room to size its WAL: fine
        assert len(store.messages("q")) == acked
    ballast.unlink()  # space again: the store works as before, with everything it had
    with open_store(folder) as store:
        q = store.session("q")
        q.add_message({"role": "user", "content": "after"})
        contents = [m["content"] for m in store.messages("q")]
        assert contents[:-1] == [f"{i} " + "z" * 900 for i in range(acked)]
        assert contents[-1] == "after"
        assert store.fsck() == []


def make_store(folder: Path, n: int = 5) -> None:
    with open_store(folder) as store:
        q = store.session("q")
        for i in range(n):
            q.add_message({"role": "user", "content": f"m{i}"})
        store.tag("t", "q~1")


def test_reads_work_on_read_only_media_and_writes_say_why_not(tmp_path: Path) -> None:
    make_store(tmp_path / "src" / "s")
    ro = tmp_path / "ro"
    read_only_view(tmp_path / "src", ro)
    try:
        with open_store(ro / "s") as store:
            assert [m["content"] for m in store.messages("q")] == [f"m{i}" for i in range(5)]
            assert store.show("t").data["content"] == "m3"
            assert store.fsck() == []
            for write in (
                lambda: store.session("q").add_message({"role": "user", "content": "x"}),
                lambda: store.fork("z", "q"),
                lambda: store.rename_session("q", "r"),
                lambda: store.set_head_session("q"),
            ):
                with pytest.raises(StoreReadOnlyError, match="read-only") as caught:
                    write()
                assert "\n" not in str(caught.value)
            assert len(store.messages("q")) == 5
        with pytest.raises(StoreReadOnlyError):  # creating a store there: the same error
            open_store(ro / "new")
    finally:
        _umount(ro)


def test_a_snapshot_with_unfolded_log_on_read_only_media(tmp_path: Path) -> None:
    """A copy taken while a writer ran (killed here): with its ``-shm`` it reads in full;
    without it SQLite cannot read the log, and the open says so instead of showing less."""
    src = tmp_path / "src" / "s"
    child = subprocess.Popen(
        [sys.executable, str(HELPERS / "append_loop.py"), str(src), "q"],
        stdout=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None
    for _ in range(300):
        child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    acked = 300 + sum(1 for line in out.splitlines() if line.startswith("ACK"))
    assert (src.parent / "s" / "store.db-wal").stat().st_size > 0
    ro = tmp_path / "ro"
    read_only_view(tmp_path / "src", ro)
    try:
        with open_store(ro / "s") as store:
            assert len(store.messages("q")) >= acked
            assert store.fsck() == []
    finally:
        _umount(ro)
        time.sleep(0.01)
    (src / "store.db-shm").unlink()
    ro2 = tmp_path / "ro2"
    read_only_view(tmp_path / "src", ro2)
    try:
        with pytest.raises(StoreReadOnlyError, match="copy the folder to writable media"):
            open_store(ro2 / "s")
    finally:
        _umount(ro2)
