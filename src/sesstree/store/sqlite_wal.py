"""Giving a durable store's write-ahead log its size up front."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

__all__ = ["preallocate_wal"]


def preallocate_wal(db: sqlite3.Connection, path: Path, pages: int, *, sync: bool = True) -> None:
    """Extend the WAL of the store at ``path`` with zeros to hold ``pages`` frames, so that
    durable commits overwrite blocks the file already has.

    A commit that grows a file makes its fsync also commit the file system's metadata, which
    on the disks measured here doubles the cost of a durable append. SQLite reuses the WAL from
    its start after each checkpoint, so with a checkpoint every ``pages`` pages the file never
    needs to grow again. Zeros past the last frame read as the end of the log, which is how
    SQLite treats a WAL it has not filled yet. Without ``sync`` the zeros are left to the OS:
    a crash can only leave the tail as holes or stale frames, which read as the end too.
    """
    page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    target = 32 + (pages + 64) * (24 + page_size)
    wal = str(path) + "-wal"
    # The write lock: no other connection can be appending frames while the file grows.
    # If another writer holds it, skip: this only saves time, and the WAL grows as usual.
    timeout = db.execute("PRAGMA busy_timeout").fetchone()[0]
    db.execute("PRAGMA busy_timeout=0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return
    finally:
        db.execute(f"PRAGMA busy_timeout={int(timeout)}")
    try:
        fd = os.open(wal, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            chunk = b"\0" * (1 << 20)
            while size < target:
                size += os.pwrite(fd, chunk[: target - size], size)
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
    finally:
        db.execute("ROLLBACK")
