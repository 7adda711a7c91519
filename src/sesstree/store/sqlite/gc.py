"""Garbage collection for the SQLite backend: reachability from integers, deletes in short turns.

1. Reachability is computed from one read snapshot, without the write lock, from row numbers
   only: each node's parent row (one array of integers indexed by row number) and the rows
   every reflog entry (live or deleted ref) and a detached HEAD name, streamed. No payload is
   read or decoded, and memory is about 9 bytes a row (the parent array and a state byte),
   whatever the payloads weigh: about 10 MB for a million nodes.
2. Unreachable rows are deleted in chunks of :data:`CHUNK`, children first, each in its own
   short write transaction (writers queued meanwhile get their turn between chunks). Each
   chunk first looks, inside the same transaction, at what was written since the snapshot:
   a new node whose parent is doomed, a new reflog entry naming a doomed row (found through
   the ``reflog_new`` index; a ref's ``old`` is always the ``new`` of its entry before), or a
   detached HEAD naming one, saves it and its ancestors.
3. Payloads go last: those of the removed nodes that no node names any more (one seek each in
   the ``nodes_bid`` index, which also sees nodes written since the snapshot).
"""

from __future__ import annotations

import sqlite3
import time
from array import array
from collections.abc import Iterator

from ...node import NodeId, parse_symbolic
from ..base import Progress
from ..meta_rows import HEAD
from .sql import by_id
from .state import ConnState
from .textindex import lower_mark, unindex
from .txn import Transactions

__all__ = ["CHUNK", "collect_garbage"]

#: Rows deleted per write transaction: small enough that a waiting writer is not held up long.
CHUNK = 500
_ABSENT, _LIVE, _DEAD = 0, 1, 2
_NO_PARENT = 0  # row numbers start at 1


class _Plan:
    """What one snapshot says is unreachable, kept up to date as chunks look at new writes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.top = int(db.execute("SELECT coalesce(max(seq), 0) FROM nodes").fetchone()[0])
        # parent[seq] (0: a root); state[seq]: absent, live or dead.
        self.parent = array("q", bytes(8 * (self.top + 1)))
        self.state = bytearray(self.top + 1)
        for seq, parent in _rows(db, "SELECT seq, parent FROM nodes WHERE seq > ? "
                                     "ORDER BY seq LIMIT 10000"):
            self.parent[seq] = _NO_PARENT if parent is None else parent
            self.state[seq] = _DEAD
        for old, new in db.execute("SELECT old, new FROM reflog"):
            self._mark(old)
            self._mark(new)
        self._mark(_detached_head(db))
        # New rows are those above this mark: the largest row number at the snapshot, lowered
        # as chunks remove the newest rows (SQLite gives a new row the largest number + 1).
        self.mark = self.top
        self.kept = self.state.count(_LIVE)
        self.dead = self.state.count(_DEAD)

    def _mark(self, seq: int | None) -> None:
        """``seq`` and its ancestors are live (during the first pass)."""
        state, parent = self.state, self.parent
        while seq is not None and 0 < seq <= self.top and state[seq] == _DEAD:
            state[seq] = _LIVE
            seq = parent[seq]

    def revive(self, seq: int | None) -> None:
        """``seq`` is reached again: it and its ancestors stay."""
        state, parent = self.state, self.parent
        while seq is not None and 0 < seq <= self.top and state[seq] == _DEAD:
            state[seq] = _LIVE
            self.kept += 1
            self.dead -= 1
            seq = parent[seq]

    def doomed(self) -> Iterator[int]:
        """The dead rows, newest (children) first."""
        state = self.state
        seq = self.top
        while seq > 0:
            seq = state.rfind(_DEAD, 0, seq + 1)
            if seq <= 0:
                return
            yield seq
            seq -= 1

    def catch_up(self, db: sqlite3.Connection, chunk: list[int]) -> None:
        """Save whatever was written since the snapshot reaches (called in a write transaction)."""
        for (parent,) in db.execute("SELECT parent FROM nodes WHERE seq > ?", (self.mark,)):
            self.revive(parent)
        named = db.execute(
            f"SELECT new FROM reflog WHERE new IN ({_marks(chunk)})", chunk
        ).fetchall()
        for (seq,) in named:
            self.revive(seq)
        self.revive(_detached_head(db))


def _rows(db: sqlite3.Connection, sql: str) -> Iterator[tuple[int, int | None]]:
    """The rows of ``sql`` (which takes the last seq seen and returns seq first), in slices."""
    after = 0
    while True:
        rows = db.execute(sql, (after,)).fetchall()
        if not rows:
            return
        yield from rows
        after = rows[-1][0]


def _detached_head(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", (HEAD,)).fetchone()
    if row is None or parse_symbolic(str(row[0])) is not None:
        return None
    try:
        key = bytes.fromhex(str(row[0]))
    except ValueError:
        return None
    found = db.execute(f"SELECT seq FROM nodes WHERE {by_id('id', '?1')}", (key,)).fetchone()
    return None if found is None else int(found[0])


def _ids(db: sqlite3.Connection, seqs: list[int]) -> list[NodeId]:
    rows = db.execute(f"SELECT id FROM nodes WHERE seq IN ({_marks(seqs)}) ORDER BY seq DESC",
                      seqs)
    return [NodeId(r[0].hex()) for r in rows]


def _chunks(seqs: Iterator[int]) -> Iterator[list[int]]:
    chunk: list[int] = []
    for seq in seqs:
        chunk.append(seq)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def collect_garbage(
    state: ConnState, txn: Transactions, dry_run: bool, keep: NodeId | None = None,
    progress: Progress | None = None,
) -> tuple[list[NodeId], int, int]:
    """Remove (unless ``dry_run``) what nothing reaches, nor ``keep``; return the unreachable
    ids (newest first), how many nodes were removed, and how many are kept. Reads in one
    snapshot of ``txn``, deletes in its short write transactions."""
    db = state.db
    with txn.snapshot():
        plan = _Plan(db)
        if keep is not None:
            row = db.execute(f"SELECT seq FROM nodes WHERE {by_id('id', '?1')}",
                             (bytes.fromhex(keep),)).fetchone()
            plan.revive(None if row is None else int(row[0]))
        if dry_run:
            found = [i for chunk in _chunks(plan.doomed()) for i in _ids(db, chunk)]
            return found, 0, plan.kept
        # How many rows each pack has: the chunk that removes a pack's last row drops the pack
        # in its own transaction, so a gc stopped anywhere leaves no pack that no row names
        # (rows never join a pack once it is made: a count can only be too high, never low).
        rows_in = _rows_in_packs(db) if state.packs else {}
    gone: list[NodeId] = []
    bids: set[int] = set()
    total = plan.dead
    # Children before parents. The doomed rows are listed afresh at each chunk, so rows that a
    # chunk's catch-up saves are skipped.
    for chunk in _chunks(plan.doomed()):
        with txn.write():
            plan.catch_up(db, chunk)
            chunk = [s for s in chunk if plan.state[s] == _DEAD]
            if chunk:
                marks = _marks(chunk)
                bids.update(r[0] for r in db.execute(
                    f"SELECT bid FROM nodes WHERE seq IN ({marks}) AND bid IS NOT NULL", chunk))
                gone += _ids(db, chunk)
                unindex(state, chunk)  # (read from the rows, and their packs, before they go)
                if rows_in:
                    _drop_emptied_packs(db, rows_in, chunk)
                db.execute(f"DELETE FROM nodes WHERE seq IN ({marks})", chunk)
                if state.packs:
                    db.execute(f"DELETE FROM loose WHERE seq IN ({marks})", chunk)
                db.execute(f"DELETE FROM path_bytes WHERE seq IN ({marks})", chunk)
                for s in chunk:
                    plan.state[s] = _ABSENT
                row = db.execute("SELECT coalesce(max(seq), 0) FROM nodes").fetchone()
                plan.mark = min(plan.mark, int(row[0]))
                lower_mark(state)
                state.known.clear()
        if progress is not None:
            progress(len(gone), total)
        time.sleep(0)  # between chunks, a writer woken from the queue gets to run first
    if state.packs:
        # Packs that lost rows are rebuilt from what is left (packing.py): also those of a
        # gc that was stopped before it got to them, so this runs when nothing was removed.
        from .packing import trim_packs

        trim_packs(state, txn)
    # Payloads go last, once every node that used them is gone, again in short turns.
    order = sorted(bids)
    for k in range(0, len(order), CHUNK):
        part = order[k:k + CHUNK]
        with txn.write():
            db.execute(
                f"DELETE FROM blobs WHERE bid IN ({_marks(part)}) AND NOT EXISTS "
                "(SELECT 1 FROM nodes WHERE nodes.bid = blobs.bid)", part
            )
        time.sleep(0)
    return gone, len(gone), plan.kept


def _rows_in_packs(db: sqlite3.Connection) -> dict[int, int]:
    """Each pack's number of node rows."""
    rows = db.execute("SELECT pack, count(*) FROM nodes WHERE pack IS NOT NULL GROUP BY pack")
    return {int(pid): int(n) for pid, n in rows}


def _drop_emptied_packs(db: sqlite3.Connection, rows_in: dict[int, int], chunk: list[int]) -> None:
    """Count the packed rows of ``chunk`` (about to be deleted) off their packs, and drop each
    pack that is left with none (in the chunk's transaction)."""
    for pid, n in db.execute(f"SELECT pack, count(*) FROM nodes WHERE seq IN ({_marks(chunk)}) "
                             "AND pack IS NOT NULL GROUP BY pack", chunk).fetchall():
        if pid in rows_in:
            rows_in[pid] -= n
            if rows_in[pid] <= 0:
                db.execute("DELETE FROM packs WHERE pid = ?", (pid,))


def _marks(values: list[int]) -> str:
    return ",".join("?" * len(values))
