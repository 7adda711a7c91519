"""fsck's checks of an SQLite store below the node level: pages, indexes, links, payloads,
the reflog's own chain, and the write-ahead log.

Every check reads inside the caller's snapshot and reports what it finds as one line; none
stops at the first fault, and none lets damage escape as an exception of another kind.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from blake3 import blake3

from ...errors import InvalidRefNameError, StoreCorruptError
from ...node import REMOTES, check_ref_name, session_name, tag_name
from ..codec import dict_hash
from .sql import CHECKS
from .wal import scan_wal

__all__ = ["check_store"]

# Every ref's log is one chain: the first entry starts from nothing, each later entry starts
# where the one before it ended, and entries are numbered without gaps. Appends, resets,
# batches, renames, deletes and expiries all keep this, so a break means a damaged row (a
# ref name changed by damage leaves its ref one step back and an orphan entry elsewhere).
_REFLOG_BREAKS = """
SELECT ref, n FROM (
    SELECT ref, n, old, lag(new) OVER w AS before, lag(n) OVER w AS n_before,
           row_number() OVER w AS k
    FROM reflog WINDOW w AS (PARTITION BY ref ORDER BY n)
)
WHERE (k = 1 AND old IS NOT NULL) OR (k > 1 AND (old IS NOT before OR n != n_before + 1))
LIMIT 20
"""


def _short(key: object) -> str:
    return key.hex()[:12] if isinstance(key, bytes) else repr(key)[:12]


def _name_of(ref: str) -> str:
    """The name inside a stored ref (``sessions/NAME``, ``tags/NAME``, ``remotes/R/NAME``)."""
    name = session_name(ref)
    if name is None:
        name = tag_name(ref)
    if name is None and ref.startswith(REMOTES):  # remote-tracking refs: remotes/REMOTE/NAME
        remote, _, name = ref[len(REMOTES):].partition("/")
        if not remote:
            raise InvalidRefNameError(ref)
    if name is None:
        raise InvalidRefNameError(ref)
    return name


def check_store(
    db: sqlite3.Connection, path: Path, inflate: Callable[[bytes, int | None, None], bytes],
    codec: bool,
) -> list[str]:
    """Faults of the store at ``path`` (an open connection in a read transaction).
    ``inflate`` reads a compressed payload; ``codec``: the store has format 4's columns."""
    faults: list[str] = []
    # integrity_check, not quick_check: only it compares every index with its table, and a
    # damaged id index hides nodes from lookups.
    for (msg,) in db.execute("PRAGMA integrity_check(20)"):
        if msg != "ok":
            faults.append(f"sqlite: {msg}")
    for what, sql in CHECKS.items():
        for (key,) in db.execute(sql + " LIMIT 20"):
            faults.append(f"{what}: {_short(key)}")
    for ref, n in db.execute(
        "SELECT ref, n FROM reflog WHERE (old IS NOT NULL AND old NOT IN "
        "(SELECT seq FROM nodes)) OR (new IS NOT NULL AND new NOT IN (SELECT seq FROM nodes))"
    ):
        faults.append(f"reflog entry {n} of {ref} points at a missing node")
    for ref, n in db.execute(_REFLOG_BREAKS):
        faults.append(f"reflog entry {n} of {ref} does not follow the entry before it "
                      "(a damaged log: the ref may show an older position)")
    for (ref,) in db.execute("SELECT DISTINCT ref FROM reflog"):
        try:
            check_ref_name(_name_of(str(ref)))
        except InvalidRefNameError:
            faults.append(f"reflog names a ref that cannot exist: {ref!r} (damaged)")
    wal = scan_wal(path)
    if wal is not None:
        faults.append(wal)
    if codec:
        for dict_id, digest, data in db.execute("SELECT id, hash, data FROM dicts"):
            if not isinstance(data, bytes) or dict_hash(data) != digest:
                faults.append(f"compression dictionary {dict_id} does not match its hash")
    blobs = "SELECT hash, data, codec FROM blobs" if codec else "SELECT hash, data, NULL FROM blobs"
    for digest, data, how in db.execute(blobs):
        try:
            intact = blake3(inflate(data, how, None)).digest() == digest
        except (StoreCorruptError, TypeError):
            intact = False
        if not intact:
            faults.append(f"payload {_short(digest)} does not match its hash")
    return faults
