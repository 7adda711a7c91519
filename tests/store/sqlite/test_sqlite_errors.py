"""SQLite errors become sesstree errors by SQLite's result code, not by the words of a message
(which vary between SQLite builds and locales)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from sesstree import StoreCorruptError, StoreFullError, StoreLockedError
from sesstree.errors import StoreError
from sesstree.store.sqlite.media import translate

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="result codes on sqlite3 errors need Python 3.11")


def error(kind: type[sqlite3.Error], message: str, code: int) -> sqlite3.Error:
    exc = kind(message)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(("exc", "expected"), [
    # the message says nothing a word match would catch; the code says what happened
    (error(sqlite3.OperationalError, "xyzzy", 13), StoreFullError),           # SQLITE_FULL
    (error(sqlite3.OperationalError, "xyzzy", 5), StoreLockedError),          # SQLITE_BUSY
    (error(sqlite3.OperationalError, "xyzzy", 6 | (1 << 8)), StoreLockedError),  # LOCKED_SHAREDCACHE
    (error(sqlite3.OperationalError, "xyzzy", 10 | (3 << 8)), StoreError),    # IOERR_WRITE
    (error(sqlite3.DatabaseError, "xyzzy", 11), StoreCorruptError),           # SQLITE_CORRUPT
    # and words that would mislead a match are not taken for what they say
    (error(sqlite3.OperationalError, "table full of locked busy rows", 1), StoreCorruptError),
])
def test_errors_are_classified_by_result_code(tmp_path: Path, exc: sqlite3.Error,
                                              expected: type[Exception]) -> None:
    with pytest.raises(expected) as info:
        translate(tmp_path / "store.db", exc)
    assert type(info.value) is expected or expected is StoreError
