"""A real small file system for full-disk tests: a tmpfs mounted for the test, and a filler
file that leaves it a chosen number of bytes free; and a folder seen as read-only media.

Mounting needs root and mount permission; without them the tests that need a small disk are
skipped, with that reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = "filler"


def free_bytes(where: Path) -> int:
    """Bytes still free on the file system holding ``where`` (what root may write)."""
    st = os.statvfs(where)
    return st.f_bfree * st.f_frsize


@contextmanager
def mounted(where: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` at folder ``where`` (made), unmounted after the block."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a small disk needs a tmpfs mount, which needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def leave_free(disk: Path, left: int) -> int:
    """Grow the filler file on ``disk`` until only about ``left`` bytes are free (whole
    blocks); returns the bytes free now. ``left`` larger than what is free: nothing changes."""
    filler = disk / FILLER
    free = free_bytes(disk)
    if free > left:
        with open(filler, "ab") as f:
            f.write(b"\0" * (free - left))
    return free_bytes(disk)


def make_room(disk: Path) -> None:
    """Remove the filler file: the disk has room again."""
    (disk / FILLER).unlink(missing_ok=True)


def _bind(*args: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("read-only media needs a bind mount, which needs root")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")


@contextmanager
def read_only_view(folder: Path, view: Path) -> Iterator[Path]:
    """``folder`` seen read-only at ``view`` (a read-only bind mount) inside the block; the
    test is skipped where it cannot be mounted."""
    view.mkdir()
    _bind("--bind", str(folder), str(view))
    try:
        _bind("-o", "remount,ro,bind", str(view))
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True, check=False)
