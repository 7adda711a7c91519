"""SQLite errors as sesstree errors; full disks and read-only media: reading what can be
read, and one clear line for the rest.

A store on read-only media (a read-only mount, a snapshot, a backup) opens for reading:
first as usual, then with SQLite's ``mode=ro``, and, when SQLite cannot create the
``store.db-shm`` it needs beside a WAL store, as ``immutable=1``. That last one ignores the
WAL, so it is used only when there is no WAL content to miss (a store that was closed
cleanly has none); otherwise the open says so instead of showing an older state.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from ..errors import (
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreReadOnlyError,
)
from ..fmt import printable

__all__ = [
    "is_media_error", "media_error", "one_line", "open_read_only", "translate", "translating",
    "unopenable",
]

# SQLite's primary result codes (the low byte of an extended code).
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY = 3, 5, 6, 8
SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 10, 13, 14
_UNOPENABLE = frozenset({SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN})
# Only where Python gives no result code (3.10) is the message read instead.
_READ_ONLY_TEXT = ("readonly", "read-only", "unable to open", "attempt to write")


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
            return StoreFullError(f"store {path}: the disk is full ({exc.strerror})")
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return StoreReadOnlyError(
                f"store {path} cannot be written: {exc.strerror}"
            )
        return StoreError(f"store {path}: {exc.strerror or exc}")
    text = str(exc)
    if _is_full(exc):
        return StoreFullError(
            f"store {path}: the disk is full; nothing was written, free space and retry"
        )
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


def translate(path: Path, exc: sqlite3.Error) -> NoReturn:
    """Raise the sesstree error an SQLite error on the store at ``path`` means."""
    text = one_line(str(exc))
    code = result_code(exc)
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
def translating(path: Path) -> Iterator[None]:
    """Turn SQLite errors inside the block into sesstree errors (see :func:`translate`)."""
    try:
        yield
    except sqlite3.Error as exc:
        translate(path, exc)
    except UnicodeDecodeError:
        # SQLite's message (or a text column) is not UTF-8: damaged text in the file.
        raise StoreCorruptError(f"store {path} is damaged: unreadable text") from None
