"""The SQLite backend's transactions: a write, a batch, a read snapshot, the writers' queue in
front of them, and the compare-and-set of a ref that each write may make.

A ref's move is its reflog entry (the reflog is the truth of every ref, see
:mod:`sesstree.store.sqlite.backend`): the compare-and-set is one ``INSERT ... WHERE newest IS
old``, and a fold rewrites the newest entry. Inside a batch, which holds the write lock, where
each ref is now is known (``heads``), and folds are written once, before anything reads the
log (``unwritten``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ...errors import ConflictError, StoreLockedError
from ..base import RefUpdate, describe
from .lock import WriteLock
from .sql import CAS, NEWEST
from .state import ConnState
from .wal import IdleCheckpointer

__all__ = ["Transactions"]


def _nothing() -> None:
    pass


class Transactions:
    """Write transactions, batches and snapshots on the backend's connection.

    Owns the writers' queue (``queue``, see :mod:`~sesstree.store.sqlite.lock`), the idle
    checkpointer each write tells it wrote, and what an open batch knows of the refs it moved
    (``heads``, ``unwritten``). ``after_batch`` runs when a batch has committed, still holding
    the write lock, outside any transaction (the backend sets it to the dictionary's training).
    """

    def __init__(self, state: ConnState, refuse_if_full: Callable[[], None],
                 checkpoint_idle: Callable[[], bool], idle_after: float) -> None:
        self._state = state
        self._refuse_if_full = refuse_if_full
        self.queue = WriteLock(state.path)
        self.idle = IdleCheckpointer(checkpoint_idle, idle_after)
        self.after_batch: Callable[[], None] = _nothing
        # Inside a batch, where each ref it moved is now (row number, or None): the batch holds
        # the write lock, so no one else moves them meanwhile, and a CAS needs no read.
        self.heads: dict[str, int | None] = {}
        # Inside a batch, folds not written yet: ref -> (new row, time, reason). A ref's later
        # moves in a batch each rewrite its newest entry; only the last rewrite matters, so it
        # is written once, before anything reads the log and when the batch commits.
        self.unwritten: dict[str, tuple[int | None, float, str]] = {}

    def rollback(self) -> None:
        """Roll the open transaction back, and forget what it made known."""
        state = self._state
        if state.db.in_transaction:
            state.db.execute("ROLLBACK")
        for key in state.txn_new:
            state.known.pop(key, None)
        state.txn_new.clear()
        self.heads.clear()
        self.unwritten.clear()

    @contextmanager
    def write(self, quiet: bool = False) -> Iterator[None]:
        """One transaction, or the one already open (a batch, or an outer write). ``quiet``:
        a write of a derived index only (the text index's catch-up), which does not make this
        connection a writer whose pauses pack and train: a reader that searched packs nothing
        (SQLite's own autocheckpoint still bounds the WAL)."""
        state = self._state
        with state.lock, state.errors():
            if state.batch_depth or state.db.in_transaction:
                self.write_folds()
                yield
                return
            self._refuse_if_full()
            with self.queued(quiet):
                state.db.execute("BEGIN IMMEDIATE")
                try:
                    state.sync_cache()
                    yield
                    state.db.execute("COMMIT")
                    state.txn_new.clear()
                except BaseException:
                    self.rollback()
                    raise

    @contextmanager
    def queued(self, quiet: bool = False) -> Iterator[None]:
        """Hold this store's place in the writers' queue (see lock.py) for the block."""
        state = self._state
        if state.queue_depth:
            state.queue_depth += 1
            try:
                yield
            finally:
                state.queue_depth -= 1
            return
        if not self.queue.acquire(state.timeout):
            raise self.starved()
        state.queue_depth = 1
        try:
            yield
        finally:
            state.queue_depth = 0
            self.queue.release()
            if not quiet:
                self.idle.wrote()

    def starved(self) -> StoreLockedError:
        """The error for a writer that waited its whole timeout in the queue."""
        state = self._state
        return StoreLockedError(
            f"store {state.path} is locked by another process: waited {state.timeout:g} s "
            "for its write to finish"
        )

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for every write inside the block (nested batches join it)."""
        state = self._state
        with state.lock, state.errors():
            if state.batch_depth:
                state.batch_depth += 1
                try:
                    yield
                finally:
                    state.batch_depth -= 1
                return
            self._refuse_if_full()
            with self.queued():
                state.db.execute("BEGIN IMMEDIATE")
                state.sync_cache()
                state.batch_depth = 1
                state.batch_ms = int(time.time() * 1000)
                try:
                    yield
                    self.write_folds()
                    state.db.execute("COMMIT")
                    state.txn_new.clear()
                except BaseException:
                    self.rollback()
                    raise
                finally:
                    state.batch_depth = 0
                    state.batch_ms = None
                    self.heads.clear()
                    self.unwritten.clear()
                # Committed, outside any transaction, still holding the write lock: a batch
                # that took the store past TRAIN_AFTER rows trains the dictionary now, so the
                # next batch of a long import compresses (a failure there undoes no batch).
                try:
                    self.after_batch()
                except sqlite3.Error:
                    pass  # the batch is committed; the next pause tries again

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside the block sees one state of the store."""
        state = self._state
        with state.lock, state.errors():
            if state.db.in_transaction:  # a batch or write already sees one state
                yield
                return
            state.db.execute("BEGIN")
            try:
                # A deferred transaction takes its snapshot at the first read: take it now.
                state.db.execute("SELECT count(*) FROM meta").fetchone()
                yield
            finally:
                if state.db.in_transaction:
                    state.db.execute("COMMIT")

    # -- a ref's compare-and-set -------------------------------------------------------------

    def log(self, name: str, old: int | None, new: int | None, reason: str, now: float,
            fold: bool = False) -> bool:
        """The compare-and-set: move ``name`` from ``old`` to ``new`` and log it (or, with
        ``fold``, rewrite its newest entry), or do nothing."""
        db = self._state.db
        if fold and db.execute(self._state.fold_sql, (name, old, new, now, reason)).rowcount == 1:
            return True
        # Not folded: the ref has no entry to fold into, or it is not at `old` (then the CAS
        # below writes nothing either).
        return db.execute(CAS, (name, old, new, now, reason)).rowcount == 1

    def ref_seq(self, name: str) -> int | None:
        """The row a ref is at now (None: it does not exist)."""
        if name in self.heads:
            return self.heads[name]
        row = self._state.db.execute(NEWEST, (name,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def write_folds(self) -> None:
        """Write the folds a batch has kept back (see ``unwritten``)."""
        if self.unwritten:
            unwritten, self.unwritten = self.unwritten, {}
            self._state.db.executemany(self._state.fold_newest_sql, [
                (name, new, when, reason) for name, (new, when, reason) in unwritten.items()
            ])

    def conflict(self, u: RefUpdate) -> ConflictError:
        """The error for a lost compare-and-set, saying where the ref is."""
        current = self.ref_seq(u.name)
        found = None
        if current is not None:
            row = self._state.db.execute(
                "SELECT id FROM nodes WHERE seq = ?", (current,)).fetchone()
            found = row[0].hex() if row else None
        return ConflictError(
            f"{u.name} moved: expected {describe(u.old)}, found {describe(found)}"
        )
