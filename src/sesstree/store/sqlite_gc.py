"""Garbage collection for the SQLite backend: reachability from integers, deletes in short turns.

1. Reachability is computed from one read snapshot, without the write lock, from row numbers
   only: each node's parent row and the rows every reflog entry (live or deleted ref) and a
   detached HEAD name. No payload is read or decoded, so memory stays at a few integers a node.
2. Unreachable rows are deleted in chunks of :data:`CHUNK`, each in its own short write
   transaction (writers queued meanwhile get their turn between chunks). Each chunk first
   looks at what was written since the snapshot, inside the same transaction: a new node
   whose parent is a doomed row, a new reflog entry or a detached HEAD naming one, or a new
   node sharing a doomed payload, saves it (and its ancestors) from deletion.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from ..node import NodeId

if TYPE_CHECKING:
    from .sqlite import SqliteBackend

__all__ = ["CHUNK", "collect_garbage"]

#: Rows deleted per write transaction: small enough that a waiting writer is not held up long.
CHUNK = 500

# The newest entry number of every ref, one index seek per ref (not a scan of the whole log).
_NEWEST_PER_REF = """
WITH RECURSIVE names(ref) AS (
    SELECT (SELECT ref FROM reflog ORDER BY ref LIMIT 1)
    UNION ALL
    SELECT (SELECT ref FROM reflog WHERE ref > names.ref ORDER BY ref LIMIT 1)
    FROM names WHERE names.ref IS NOT NULL
)
SELECT ref, (SELECT max(n) FROM reflog r WHERE r.ref = names.ref) FROM names
WHERE ref IS NOT NULL
"""


class _Plan:
    """What one snapshot says is unreachable, kept up to date as chunks look at new writes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.parent: dict[int, int | None] = dict(db.execute("SELECT seq, parent FROM nodes"))
        self.bid: dict[int, int] = dict(
            db.execute("SELECT seq, bid FROM nodes WHERE bid IS NOT NULL")
        )
        roots = {
            r[0] for r in db.execute(
                "SELECT old FROM reflog WHERE old IS NOT NULL "
                "UNION SELECT new FROM reflog WHERE new IS NOT NULL"
            )
        }
        head = _detached_head(db)
        if head is not None:
            roots.add(head)
        self.top = max(self.parent, default=0)
        self.newest: dict[str, int] = dict(db.execute(_NEWEST_PER_REF))
        live: set[int] = set()
        for root in roots:
            cur: int | None = root
            while cur is not None and cur not in live and cur in self.parent:
                live.add(cur)
                cur = self.parent[cur]
        self.kept = len(live)
        self.dead = {s for s in self.parent if s not in live}
        live_bids = {b for s, b in self.bid.items() if s in live}
        # Payloads that only unreachable nodes use.
        self.dead_bids = {b for s, b in self.bid.items() if s in self.dead} - live_bids

    def revive(self, seq: int | None) -> None:
        """``seq`` is reached again: it and its ancestors stay."""
        while seq is not None and seq in self.dead:
            self.dead.discard(seq)
            self.kept += 1
            bid = self.bid.get(seq)
            if bid is not None:
                self.dead_bids.discard(bid)
            seq = self.parent.get(seq)

    def catch_up(self, db: sqlite3.Connection) -> None:
        """Save whatever was written since the snapshot reaches (called in a write transaction)."""
        for seq, parent, bid in db.execute(
            "SELECT seq, parent, bid FROM nodes WHERE seq > ?", (self.top,)
        ).fetchall():
            self.top = max(self.top, seq)
            self.revive(parent)
            if bid is not None:
                self.dead_bids.discard(bid)
        for ref, newest in db.execute(_NEWEST_PER_REF).fetchall():
            seen = self.newest.get(ref, 0)
            if newest > seen:
                for old, new in db.execute(
                    "SELECT old, new FROM reflog WHERE ref = ? AND n > ?", (ref, seen)
                ).fetchall():
                    self.revive(old)
                    self.revive(new)
                self.newest[ref] = newest
        self.revive(_detached_head(db))


def _detached_head(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT value FROM meta WHERE key = 'HEAD'").fetchone()
    if row is None or str(row[0]).startswith("ref: "):
        return None
    try:
        key = bytes.fromhex(str(row[0]))
    except ValueError:
        return None
    found = db.execute("SELECT seq FROM nodes WHERE id = ?", (key,)).fetchone()
    return None if found is None else int(found[0])


def _ids(db: sqlite3.Connection, seqs: list[int]) -> list[NodeId]:
    rows = db.execute(f"SELECT id FROM nodes WHERE seq IN ({_marks(seqs)}) ORDER BY seq DESC",
                      seqs)
    return [NodeId(r[0].hex()) for r in rows]


def collect_garbage(
    backend: SqliteBackend, dry_run: bool, keep: NodeId | None = None
) -> tuple[list[NodeId], int, int]:
    """Remove (unless ``dry_run``) what nothing reaches, nor ``keep``; return the unreachable
    ids (newest first), how many nodes were removed, and how many are kept."""
    db = backend._db
    with backend.snapshot():
        plan = _Plan(db)
        if keep is not None:
            row = db.execute("SELECT seq FROM nodes WHERE id = ?", (bytes.fromhex(keep),)).fetchone()
            plan.revive(None if row is None else int(row[0]))
        if dry_run:
            doomed = sorted(plan.dead, reverse=True)
            found = [i for k in range(0, len(doomed), CHUNK) for i in _ids(db, doomed[k:k + CHUNK])]
            return found, 0, plan.kept
    gone: list[NodeId] = []
    order = sorted(plan.dead, reverse=True)  # children before parents
    for k in range(0, len(order), CHUNK):
        with backend._write():
            plan.catch_up(db)
            chunk = [s for s in order[k:k + CHUNK] if s in plan.dead]
            if chunk:
                gone += _ids(db, chunk)
                db.execute(f"DELETE FROM nodes WHERE seq IN ({_marks(chunk)})", chunk)
                plan.dead.difference_update(chunk)
                backend._known.clear()
        time.sleep(0)  # between chunks, a writer woken from the queue gets to run first
    # Payloads go last, once every node that used them is gone (a node saved by a late write
    # keeps its payload), again in short turns that look at new writes first.
    while True:
        with backend._write():
            plan.catch_up(db)
            bids = sorted(plan.dead_bids)[:CHUNK]
            if not bids:
                break
            db.execute(f"DELETE FROM blobs WHERE bid IN ({_marks(bids)})", bids)
            plan.dead_bids.difference_update(bids)
        time.sleep(0)
    return gone, len(gone), plan.kept


def _marks(values: list[int]) -> str:
    return ",".join("?" * len(values))
