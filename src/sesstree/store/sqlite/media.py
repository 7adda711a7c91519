"""SQLite errors as sesstree errors; full disks and read-only media: reading what can be
read, and one clear line for the rest.

A store on read-only media (a read-only mount, a snapshot, a backup) opens for reading:
first as usual, then with SQLite's ``mode=ro``, and, when SQLite cannot create the
``store.db-shm`` it needs beside a WAL store, as ``immutable=1``. That last one ignores the
WAL, so it is used only when there is no WAL content to miss (a store that was closed
cleanly has none); otherwise the open says so instead of showing an older state.

A store on a full disk opens too. Every connection to a WAL store maps ``store.db-shm``, a
32 KB index of the WAL that the first one to open the store creates (the last one to close it
removes it), so on a disk with less than that free even a read would fail. When that file
cannot be made, the store is opened with SQLite's exclusive locking mode, which keeps that
index in memory instead (:func:`open_without_index`): reads work, and every write is refused
with :class:`StoreFullError` before it starts (it would need the room the index did not get).
A disk I/O error on a disk with (almost) no space left is that same full disk (SQLite reports
some failed writes that way).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from ...errors import (
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreReadOnlyError,
)
from ...fmt import printable

__all__ = [
    "full_error", "is_media_error", "media_error", "one_line", "open_read_only", "open_without_index",
    "translate", "translating", "unopenable", "without_index",
]

# SQLite's primary result codes (the low byte of an extended code).
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY = 3, 5, 6, 8
SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 10, 13, 14
_UNOPENABLE = frozenset({SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN})
# Only where Python gives no result code (3.10) is the message read instead.
_READ_ONLY_TEXT = ("readonly", "read-only", "unable to open", "attempt to write")
# Free space below which a disk I/O error is taken for a full disk: more than the largest
# single write SQLite makes here (a 32 KB region of the WAL index; a WAL frame is ~2 KB), with
# room for what another process freed or wrote between the failure and the look.
FULL_BELOW = 256 * 1024


def result_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code for an error (Python 3.11+), or None where unknown."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def unopenable(exc: sqlite3.Error) -> bool:
    """True if an SQLite error means the files cannot be opened or written as they are."""
    code = result_code(exc)
    if code is not None:
        return code in _UNOPENABLE
    text = str(exc)
    return any(t in text for t in _READ_ONLY_TEXT)


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error) and (code := result_code(exc)) is not None:
        return code == SQLITE_FULL
    return "full" in str(exc)


def _free_bytes(folder: Path) -> int | None:
    """Bytes this process can still write on the file system holding ``folder``."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    # root may also use the blocks reserved for it (ext4 keeps 5 %); others may not.
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize


def _disk_full(path: Path, exc: BaseException) -> bool:
    """Whether ``exc`` (raised on the store at ``path``) means its disk is full: SQLite says
    so, or an I/O error on a disk with next to no space left."""
    if _is_full(exc):
        return True
    if isinstance(exc, sqlite3.Error):
        code = result_code(exc)
        if code != SQLITE_IOERR and (code is not None or "disk I/O" not in str(exc)):
            return False
    free = _free_bytes(path.parent)
    return free is not None and free < FULL_BELOW


def full_error(path: Path) -> StoreFullError:
    """The error for a write the disk holding the store at ``path`` had no room for."""
    return StoreFullError(
        f"store {path.parent}: the disk is full; nothing was written, free space there "
        "and retry"
    )


def one_line(text: str, limit: int = 200) -> str:
    """``text`` made safe for one line of output: control and odd bytes escaped, cut short."""
    return printable(text, limit)


def is_media_error(exc: sqlite3.Error) -> bool:
    """True if an SQLite error is about the medium (full, read-only, cannot open, I/O)."""
    code = result_code(exc)
    if code is not None:
        return code in (SQLITE_FULL, SQLITE_IOERR) or code in _UNOPENABLE
    text = str(exc)
    return "full" in text or "disk I/O" in text or unopenable(exc)


def media_error(path: Path, exc: BaseException) -> StoreError:
    """The sesstree error for an OS or SQLite error about the medium the store is on."""
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
            return full_error(path)
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return StoreReadOnlyError(
                f"store {path} cannot be written: {exc.strerror}"
            )
        return StoreError(f"store {path}: {exc.strerror or exc}")
    text = str(exc)
    if _disk_full(path, exc):
        return full_error(path)
    if isinstance(exc, sqlite3.Error) and unopenable(exc) and not _writable(path):
        return StoreReadOnlyError(
            f"store {path} is on read-only media or files ({text}); reads still work"
        )
    return StoreError(f"store {path}: {one_line(text)}")


def _writable(path: Path) -> bool:
    folder = path.parent
    return os.access(folder, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))


def open_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A read-only connection to the store at ``path`` (see the module docstring)."""
    uri = path.resolve().as_uri()
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None,
                             timeout=timeout, check_same_thread=False)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error:
            db.close()
    except sqlite3.Error:
        pass
    wal = Path(str(path) + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreReadOnlyError(
            f"store {path} is on read-only media and its log {wal.name} holds writes not yet "
            "folded into the store file; copy the folder to writable media to read it"
        )
    try:
        db = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None,
                             timeout=timeout, check_same_thread=False)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from None
    return db


def open_without_index(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection to the store at ``path`` that needs no ``store.db-shm`` (see the module
    docstring): for a disk too full to create that file.

    SQLite's exclusive locking mode, set before the first read, keeps the WAL's index in this
    process's memory. The price is the lock: until this connection closes, other processes
    cannot open the store (they wait up to their timeout). No other process has it open now:
    each would hold the ``-shm`` this open could not make. SQLite errors are raised as they
    are, for the caller to translate.
    """
    db = sqlite3.connect(path, isolation_level=None, timeout=timeout, check_same_thread=False)
    try:
        db.execute("PRAGMA locking_mode=EXCLUSIVE")
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def without_index(db: sqlite3.Connection) -> bool:
    """Whether ``db`` was opened by :func:`open_without_index` (sesstree sets the exclusive
    locking mode nowhere else)."""
    return str(db.execute("PRAGMA locking_mode").fetchone()[0]).lower() == "exclusive"


def translate(path: Path, exc: sqlite3.Error, *, full: bool = False) -> NoReturn:
    """Raise the sesstree error an SQLite error on the store at ``path`` means (``full``: the
    store was opened without its index for want of space, so a refused write is that)."""
    text = one_line(str(exc))
    code = result_code(exc)
    if full and unopenable(exc):
        raise full_error(path) from None
    if isinstance(exc, sqlite3.OperationalError):
        if (code in (SQLITE_BUSY, SQLITE_LOCKED) if code is not None
                else "locked" in text or "busy" in text):
            raise StoreLockedError(f"store {path} is locked by another process: {text}") from None
        if is_media_error(exc):
            raise media_error(path, exc) from None
        # Anything else an existing store's own statements meet ("no such column",
        # "Could not decode to UTF-8", ...) means its file is not as sesstree wrote it.
        raise StoreCorruptError(f"store {path} is damaged: {text}") from None
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
        raise StoreCorruptError(f"store {path} is damaged: {text}") from None
    raise exc


@contextmanager
def translating(path: Path, *, full: bool = False) -> Iterator[None]:
    """Turn SQLite errors inside the block into sesstree errors (see :func:`translate`)."""
    try:
        yield
    except sqlite3.Error as exc:
        translate(path, exc, full=full)
    except UnicodeDecodeError:
        # SQLite's message (or a text column) is not UTF-8: damaged text in the file.
        raise StoreCorruptError(f"store {path} is damaged: unreadable text") from None
