"""Opening an SQLite store: create it if asked, connect (read-only on read-only media), check
that it is a sesstree store this version can read, and set the connection up.

Nothing is written to an existing file before it is known to be a sesstree store: a damaged,
foreign or newer file stays exactly as it was.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from ...errors import StoreCorruptError, StoreFormatError, StoreLockedError, StoreNotFoundError
from .create import create_store_file, remove_leftovers
from .media import (
    is_media_error,
    media_error,
    open_read_only,
    open_without_index,
    translate,
    translating,
    unopenable,
)
from .schema import FORMAT_VERSION, build, reflog_has_started, upgrade
from .sql import APPEND_TEMP, without_started
from .wal import preallocate_wal
from .walguard import OPENING, guard_wal

__all__ = [
    "DURABLE_WAL_PAGES", "FORMAT_VERSION", "PAGE_SIZE", "WAL_PAGES", "open_connection",
    "prepare_appends",
]


#: A commit writes whole pages to the WAL, and an append dirties three: smaller pages make it
#: cheaper, while 1 KB pages would cost disk space (measured in bench/bench_store.py).
PAGE_SIZE = 2048
# Checkpoint every 10,000 pages (~20 MB of WAL) instead of 1,000: fewer checkpoints (each one
# fsyncs) make committed appends cheaper; the WAL file is reused, so it stays about this size.
WAL_PAGES = 10_000
# A durable store checkpoints sooner, so that its WAL stays within the size it is given when
# opened (see wal.preallocate_wal): ~4 MB with 2 KB pages.
DURABLE_WAL_PAGES = 2_000


class _NotCreated(Exception):
    """The file is an SQLite file with no tables: a store whose creation never finished."""


def open_connection(
    path: Path, *, create: bool, durable: bool, timeout: float
) -> tuple[sqlite3.Connection, bool]:
    """A connection to the store file ``path``, set up, and whether it is read-only."""
    exists = path.exists()
    size = path.stat().st_size if exists else 0
    if not exists and not create:
        raise StoreNotFoundError(f"no store at {path}")
    if exists and not create and size == 0:
        # Opening an existing store must never turn some other (empty) file into one.
        raise StoreCorruptError(f"{path} is an empty file, not a sesstree store")
    if create and size == 0:
        _create(path, durable)
    with OPENING:  # (no other thread's check may close store.db-shm during the connect)
        if not (create and size == 0):
            guard_wal(path)  # before SQLite can drop what a damaged WAL hides (walguard.py)
        db, read_only = _connect(path, timeout)
    try:
        try:
            _prepare(db, path, durable, read_only)
        except _NotCreated:
            if not create:
                raise StoreCorruptError(
                    f"{path} is an SQLite file but not a sesstree store"
                ) from None
            # A first open killed before its schema landed (an older sesstree): finish it.
            db.close()
            _create(path, durable)
            with OPENING:
                db, read_only = _connect(path, timeout)
            _prepare(db, path, durable, read_only)
    except BaseException:
        db.close()
        raise
    if not read_only:
        remove_leftovers(path)
    return db, read_only


def _build(db: sqlite3.Connection) -> None:
    """A new store's schema, in the file create.py renames into place (see schema.py)."""
    build(db, PAGE_SIZE)


def _create(path: Path, durable: bool) -> None:
    """Create the store file atomically (see create.py), mapping OS errors."""
    try:
        create_store_file(path, _build, sync=durable)
    except (OSError, sqlite3.Error) as exc:
        raise media_error(path, exc) from None


def _connect(path: Path, timeout: float) -> tuple[sqlite3.Connection, bool]:
    """Connect for reading and writing, or (read-only media, a full disk) for reading only."""
    db = sqlite3.connect(path, isolation_level=None, timeout=timeout, check_same_thread=False)
    try:
        # Touch the file: on read-only media a WAL store fails here, not on first use.
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db, False
    except UnicodeDecodeError:
        db.close()
        raise StoreCorruptError(f"store {path} is damaged: unreadable text") from None
    except sqlite3.Error as exc:
        db.close()
        if is_media_error(exc) and not unopenable(exc):
            # A disk too full for the WAL's index file (media.py): read without it.
            with translating(path):
                return open_without_index(path, timeout), True
        if not unopenable(exc):
            translate(path, exc)  # locked, or else damaged
    return open_read_only(path, timeout), True


def _prepare(db: sqlite3.Connection, path: Path, durable: bool, read_only: bool) -> None:
    with translating(path):
        # Read before any write: a damaged or newer store must stay exactly as it is.
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        if not tables:
            raise _NotCreated
        if "meta" not in tables or "nodes" not in tables:
            raise StoreCorruptError(f"{path} is an SQLite file but not a sesstree store")
        row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        try:
            version = int(row[0]) if row else 0
        except (TypeError, ValueError):
            version = 0
        if version > FORMAT_VERSION:
            raise StoreFormatError(
                f"{path} has store format {version}; this sesstree reads up to "
                f"{FORMAT_VERSION}. Upgrade sesstree to open it."
            )
        if version < 1:
            raise StoreCorruptError(f"{path} has no valid format version")
        if version < FORMAT_VERSION and not read_only:
            upgrade(db)  # (see schema.py)
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal" and not read_only:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreLockedError(f"cannot switch {path} to WAL mode (is it in use?)")
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        db.execute("PRAGMA cache_size=-65536")
        db.execute(f"PRAGMA wal_autocheckpoint={DURABLE_WAL_PAGES if durable else WAL_PAGES}")
        # No memory map: a read through one leaves every page it touched, and the neighbours
        # the kernel maps on each fault, in the process, so a scan (fsck, gc, stats) or a few
        # thousand lookups spread over the file (branch, the refs of log --graph) held as
        # much memory as the file, up to the map's size. Through SQLite's page cache memory
        # stays within cache_size; loads measured the same within noise (bench/bench_scale.py).
        db.execute("PRAGMA temp_store=MEMORY")
        # (The statements appends run are made by the first write: prepare_appends.)
        if durable and not read_only:
            try:
                preallocate_wal(db, path, DURABLE_WAL_PAGES)
            except (OSError, sqlite3.Error):
                pass  # only a speed-up (a full disk, say): the WAL then grows as it goes


# A CREATE TEMP statement, which IF NOT EXISTS makes safe to run again.
_CREATE_TEMP = re.compile(r"^(\s*CREATE\s+TEMP\s+\w+)\s+(?!IF\b)", re.IGNORECASE)


def prepare_appends(db: sqlite3.Connection) -> bool:
    """Make the temporary view and triggers through which an append is one statement
    (sql.APPEND_TEMP) on ``db``, if it has not got them yet.

    Made by the first write rather than on open: they cost a quarter of an open to compile,
    and most connections (a ``sess log``, a load) never write. True when they stay made; False
    when a transaction was open (a write inside a snapshot), as its rollback would undo them,
    so the next write makes sure again.
    """
    kept = not db.in_transaction
    started = reflog_has_started(db)
    for statement in APPEND_TEMP:
        statement = statement if started else without_started(statement)
        db.execute(_CREATE_TEMP.sub(r"\1 IF NOT EXISTS ", statement, count=1))
    return kept
