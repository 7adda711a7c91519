"""A writer's background work: packing the tails its appends made long, and folding the WAL
into the main file, in a thread of its own with a connection of its own, so that the
appending thread does neither.

An append is mostly SQLite writing pages (the GIL released), and so is what is moved here:
reading a tail's rows and compressing its pack (about 2 ms for 256 nodes, see packing.py),
and a checkpoint (20 ms for 10,000 pages, which SQLite would otherwise run inside the commit
that crossed its threshold). On a second core they run beside the appends.

- **Packing**: the thread reads the rows and builds each pack on its own connection, outside
  any transaction; only the commit, a short write transaction that first checks the rows are
  still loose below their packed parent, runs on the backend's connection, under its lock and
  in the writers' queue like any write. A kill at any point leaves the loose rows or the pack
  (the transaction is the commit's), and a pack another writer made meanwhile makes this one
  write nothing.
- **Checkpoints**: every :data:`CHECKPOINT_EVERY` commits of a default-durability writer, a
  PASSIVE checkpoint on the thread's connection copies the WAL's new pages into the main file
  (it waits for no one, and no one waits for it). SQLite's own checkpoint at
  ``wal_autocheckpoint`` pages still runs in the commit that crosses it, and is what starts
  the WAL over, but finds little left to copy.

A durable writer has no such thread (it packs inline, right after the commit): its WAL is
given its size up front (wal.py), and this thread's reads, each holding a place in the log,
kept SQLite from starting the log over after a checkpoint, so the file grew again.

Closing the backend waits for the pack under way and ends the thread, which closes its
connection; what was still queued is left to the closing pause, which packs every tail the
writer moved. A fork waits for the job under way (the child must not be made while this
thread is inside SQLite, holding mutexes it would wait for forever); the child has no such
thread: its copy starts its own when it has work, with a connection of its own (the parent's
is never used there).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import weakref
from typing import TYPE_CHECKING

from ...errors import SesstreeError
from ..codec import CodecError
from ..packs import PACK_AT
from .state import ConnState
from .threads import start_daemon

if TYPE_CHECKING:
    from .packing import Packer

__all__ = ["CHECKPOINT_EVERY", "Background"]

#: Commits between two background checkpoints (about 4,500 WAL pages of appends of agent
#: traffic: two before SQLite's own at 10,000, which then has little left to copy; more often
#: would copy the pages every append rewrites more often, and fsync more).
CHECKPOINT_EVERY = 512

# How long a fork waits for a job under way (a pack or a checkpoint takes milliseconds; one
# waiting for the write lock may take longer, and the fork then goes ahead).
_FORK_WAIT = 2.0
# Every Background of this process, so that a forked child can reset theirs.
_ALL: weakref.WeakSet[Background] = weakref.WeakSet()
# Connections a forked child inherited: never used or closed there (SQLite forbids it).
_INHERITED: list[object] = []


class Background:
    """The background thread of one backend's writer (started by its first job) and the
    connection it reads and checkpoints with. Owns the jobs queued for it: the refs whose
    tails are due to be packed, and whether a checkpoint is."""

    def __init__(self, state: ConnState, packer: Packer) -> None:
        self._main = state
        self._packer = packer
        self._cond = threading.Condition()
        self._names: dict[str, None] = {}  # refs whose tails are due, oldest first
        self._checkpoint = False
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._own: ConnState | None = None
        # Held while a job runs: a fork waits for it (see _before_fork).
        self._working = threading.Lock()
        _ALL.add(self)

    # -- jobs (from the writer's thread) -----------------------------------------------------

    def pack(self, name: str) -> bool:
        """Queue the packing of ``name``'s tail (whole packs of PACK_AT); False once closed
        (the caller packs it itself)."""
        with self._cond:
            if self._closed:
                return False
            self._names[name] = None
            self._start()
            self._cond.notify()
        return True

    def checkpoint(self) -> None:
        """Queue a PASSIVE checkpoint of the WAL."""
        with self._cond:
            if self._closed:
                return
            self._checkpoint = True
            self._start()
            self._cond.notify()

    def _lock_held_here(self) -> bool:
        """True if this thread holds the backend's lock (inside a batch or a snapshot): the
        thread's next commit waits for it, so waiting for the thread would never end."""
        owned = getattr(self._main.lock, "_is_owned", None)
        return bool(owned()) if owned is not None else False

    def wait(self) -> None:
        """Return once nothing is queued or under way (at once inside a batch or a snapshot
        of this backend, whose lock a queued pack's commit needs)."""
        if self._lock_held_here():
            return
        with self._cond:
            while ((self._names or self._checkpoint or self._busy) and self._thread is not None
                   and self._thread.is_alive()):
                self._cond.wait()

    def close(self) -> None:
        """Wait for the job under way, drop the rest, end the thread and close its
        connection. Closed inside a batch or a snapshot (whose lock a pack's commit waits
        for), it does not wait: the thread ends after its job, which then fails on the
        closed connection and writes nothing."""
        with self._cond:
            self._closed = True
            self._names.clear()
            self._checkpoint = False
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and not self._lock_held_here():
            thread.join()
            self._close_own()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = start_daemon(self._loop, "sesstree-background")

    # -- the thread ----------------------------------------------------------------------------

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not (self._names or self._checkpoint or self._closed):
                    cond.wait()
                if self._closed:
                    self._busy = False
                    cond.notify_all()
                    break
                name: str | None = None
                if self._names:
                    name = next(iter(self._names))
                    del self._names[name]
                else:
                    self._checkpoint = False
                self._busy = True
            try:
                with self._working:
                    self._run(name)
            finally:
                with cond:
                    self._busy = False
                    cond.notify_all()
        self._close_own()

    def _run(self, name: str | None) -> None:
        """One job: pack ``name``'s tail, or (None) checkpoint. Its failure (the store busy
        past the timeout, a full disk, damage) leaves things as they were: the next job, or
        the writer's pause, tries again."""
        try:
            own = self._connection()
            if name is None:
                with own.errors():
                    own.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                return
            with own.errors():
                self._packer.use_dict_of(own)
            head = self._packer.head(name, own)
            if head is not None:
                self._packer.pack_tail(head, PACK_AT, PACK_AT, own)
        except (SesstreeError, sqlite3.Error, CodecError, OSError):
            pass
        except Exception:  # a bug: reported as a thread's error is, and the thread goes on
            threading.excepthook(threading.ExceptHookArgs(
                (*sys.exc_info(), threading.current_thread())))

    def _connection(self) -> ConnState:
        """The thread's own connection (opened at its first job): it only reads, and
        checkpoints."""
        if self._own is None:
            main = self._main
            own = ConnState(main.path, timeout=main.timeout, durable=main.durable)
            with own.errors():
                db = sqlite3.connect(main.path, isolation_level=None, timeout=main.timeout,
                                     check_same_thread=False)
                try:
                    db.execute("PRAGMA query_only=1")
                    db.execute(f"PRAGMA synchronous={'FULL' if main.durable else 'NORMAL'}")
                    own.db = db
                    own.setup()
                except BaseException:
                    db.close()
                    raise
            self._own = own
        return self._own

    def _close_own(self) -> None:
        own, self._own = self._own, None
        if own is not None:
            try:
                own.db.close()
            except sqlite3.Error:
                pass

    def _before_fork(self) -> bool:
        """Before a fork: wait (a moment at most) for the job under way, and hold the next
        one off, so that the child is not made while this thread is inside SQLite (holding
        its mutexes, which the child would wait for forever). True if it got that."""
        return self._working.acquire(timeout=_FORK_WAIT)

    def _after_fork_in_parent(self, held: bool) -> None:
        if held:
            self._working.release()

    def _after_fork(self) -> None:
        """In a forked child: no thread, no jobs, and the parent's connection left alone."""
        self._working = threading.Lock()
        self._cond = threading.Condition()
        self._names = {}
        self._checkpoint = self._busy = False
        self._thread = None
        if self._own is not None:
            _INHERITED.append(self._own.db)
            self._own = None


# The Backgrounds a fork in progress holds off (see Background._before_fork).
_HELD: list[tuple[Background, bool]] = []


def _before_fork() -> None:
    _HELD[:] = [(background, background._before_fork()) for background in list(_ALL)]


def _after_fork_in_parent() -> None:
    held, _HELD[:] = list(_HELD), []
    for background, got in held:
        background._after_fork_in_parent(got)


def _after_fork_in_child() -> None:
    _HELD.clear()
    for background in list(_ALL):
        background._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
