"""Creating an SQLite store atomically, privately and only once.

A store file appears complete or not at all: the schema is built in a private temporary file
beside the store (WAL mode, tables, format version), synced, and renamed into place. Creators
queue on an exclusive ``flock`` of ``store.db.lock`` and look again once they hold it, so any
number of processes may create the same store at once, and any of them may be killed at any
moment: the kernel drops a dead holder's lock, and a half-built temporary file is never the
store. A file left by an older sesstree whose first open was killed (an SQLite file with no
tables at all, or an empty file) counts as "not yet created" and is replaced the same way;
nothing was ever stored in it.

New files are 0600 and a new folder 0700, whatever the umask: conversations hold secrets.
SQLite gives the ``-wal`` and ``-shm`` files the mode of the database file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "FILE_MODE", "FOLDER_MODE", "create_store_file", "lock_path", "locked", "remove_leftovers",
    "schema_less",
]

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def lock_path(path: Path) -> Path:
    """The lock file beside the store file: creators and writers queue on it."""
    return path.with_name(path.name + ".lock")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive ``flock`` of the store's lock file (waiting in the kernel's queue)."""
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def schema_less(path: Path) -> bool:
    """True if ``path`` is missing, empty, or an SQLite file without a single table (a first
    open that was killed before its schema was committed); False for anything else."""
    try:
        if path.stat().st_size == 0:
            return True
    except FileNotFoundError:
        return True
    try:
        db = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        return bool(db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0)
    except sqlite3.Error:
        return False  # not an SQLite file: the open reports it, and leaves it alone
    finally:
        db.close()


def create_store_file(
    path: Path, build: Callable[[sqlite3.Connection], None], *, sync: bool = False
) -> None:
    """Make ``path`` a complete store unless it already holds something.

    ``build`` runs on a fresh connection to the temporary file (page size, WAL, schema).
    ``sync`` (durable stores) also fsyncs the file and the folder, so that the creation
    survives power loss; a rename is atomic for every process without it.
    """
    with locked(path):
        if not schema_less(path):
            return  # another creator finished first (or it is some other file: not ours)
        import secrets  # (here: only a creation needs it, and it is slow to import)

        tmp = path.with_name(f"{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            os.fchmod(fd, FILE_MODE)  # the umask may have taken bits away; put them back
            os.close(fd)
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                build(db)
                # The schema lives in the WAL until a checkpoint copies it into the file: one
                # that found no room (a full disk) must fail the creation, not leave it a file
                # of one empty page to rename into place, which every open calls damaged.
                busy, log, copied = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if busy or copied != log:
                    raise OSError(errno.ENOSPC, f"the new store's log was not folded into {tmp}")
            finally:
                db.close()
            if sync:
                fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            # The logs of an empty file being replaced must not be replayed onto the new one.
            for suffix in ("-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            os.replace(tmp, path)
            if sync:
                _sync_folder(path.parent)
        finally:
            for leftover in (tmp, Path(str(tmp) + "-wal"), Path(str(tmp) + "-shm")):
                leftover.unlink(missing_ok=True)
            _remove_stale_temporaries(path)


def remove_leftovers(path: Path) -> None:
    """Remove the temporary files of creators that were killed, if any, and if no creator is
    at work now (checked without waiting). Called on open; costs one folder listing."""
    prefix = path.name + ".new-"
    try:
        # (os.scandir, not Path.glob: this runs on every open, and glob costs ten times more.)
        with os.scandir(path.parent) as entries:
            if not any(entry.name.startswith(prefix) for entry in entries):
                return
    except OSError:
        return  # the folder cannot be listed: nothing can be tidied there either
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError:
        return  # read-only media: nothing to tidy, and nothing can be
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _remove_stale_temporaries(path)
    except OSError:
        pass  # a creator holds the lock: its file is not a leftover
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_stale_temporaries(path: Path) -> None:
    """Temporary files of creators that were killed (only ever touched under the lock)."""
    for leftover in path.parent.glob(path.name + ".new-*"):
        leftover.unlink(missing_ok=True)
