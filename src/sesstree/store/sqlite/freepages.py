"""Giving free pages back to the file system, when a writer pauses or closes.

Packing deletes a tail's loose rows (their content is in the pack now): their pages go to
SQLite's freelist, where the next appends reuse them. A writer that made many loose rows
before packing them (a tree of short forks, each packed when the writer pauses or closes)
leaves a freelist as large as its loose rows were: a forest of 200 forks of 20 messages kept
1.7 MB of free pages in a 4.3 MB file. A store made with ``auto_vacuum=INCREMENTAL`` (every
store created since format 6; an older one keeps its mode, which only a ``VACUUM`` changes)
can hand them back: at a pause a writer gives back the free pages past a reserve kept for
the next appends, at its close all of them. ``PRAGMA incremental_vacuum`` moves pages from
the end of the file into the free ones and truncates it, in one short write transaction.
"""

from __future__ import annotations

import sqlite3

from .state import ConnState
from .txn import Transactions

__all__ = ["INCREMENTAL", "give_back_free_pages"]

#: ``PRAGMA auto_vacuum`` of a store that can give free pages back.
INCREMENTAL = 2
#: Free pages kept for the next appends (2 KB each): a pause gives back the ones past
#: ``_KEEP_AT_PAUSE``, a close the ones past ``_KEEP_AT_CLOSE``, and neither bothers for fewer
#: than ``_LEAST`` (each page given back is a page moved).
_KEEP_AT_PAUSE = 512
_KEEP_AT_CLOSE = 0
_LEAST = 16


def give_back_free_pages(state: ConnState, txn: Transactions, closing: bool) -> int:
    """Give the store's free pages past a reserve back to the file system (a store in
    incremental auto-vacuum mode only). Outside any transaction; waits for no writer (a busy
    store is left for the next pause). Returns how many pages went."""
    db = state.db
    if state.read_only or db.in_transaction:
        return 0
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL:
        return 0
    free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    extra = free - (_KEEP_AT_CLOSE if closing else _KEEP_AT_PAUSE)
    if extra < _LEAST:
        return 0
    if not state.queue_depth:
        if not txn.queue.acquire(0.0):
            return 0
        state.queue_depth = 1
        try:
            return _vacuum(db, extra)
        finally:
            state.queue_depth = 0
            txn.queue.release()
    return _vacuum(db, extra)


def _vacuum(db: sqlite3.Connection, pages: int) -> int:
    # Python's sqlite3 steps a statement that returns no rows once, and each step of
    # incremental_vacuum frees one page: one statement per page, in one transaction (about
    # 3 µs a page).
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            for _ in range(pages):
                db.execute("PRAGMA incremental_vacuum(1)")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError:
        return 0  # busy (a writer of another program), or no room: the next pause tries again
    return pages
