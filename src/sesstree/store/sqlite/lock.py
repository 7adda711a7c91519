"""Fair turns for writers: a queue in the kernel in front of SQLite's write lock.

SQLite's busy handler polls: a writer that finds the lock taken sleeps (up to 100 ms at a
time) and looks again, so a process that holds the lock almost all the time (gc in a loop,
a bulk import in many short transactions) can keep another writer out until its timeout.

So every sesstree write transaction first passes a turnstile made of two ``flock`` locks
beside the store: it takes ``store.db.turn``, then ``store.db.lock``, then lets go of the
turn, writes, and lets go of the lock. A writer that finds the lock taken waits for it in
the kernel *while holding the turn*, so the writer that had the lock cannot take it again
(it first needs the turn): the lock goes to the one who waited. Waiters are woken by the
kernel the moment a lock is released, instead of sleeping through the gap. SQLite's own lock
still guards the file (and any writer that does not know these files); the ``flock`` locks
only order sesstree's writers.

A blocking ``flock`` cannot time out, so a contended wait happens in a helper thread on its
own open files; the caller waits up to its timeout and, if it gives up, the helper lets go
as soon as it gets through.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from .create import FILE_MODE, lock_path
from .threads import start_daemon

__all__ = ["WriteLock"]

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
# Looked up once: acquire and release run on every append.
_flock = fcntl.flock
_TRY = fcntl.LOCK_EX | fcntl.LOCK_NB
_UNLOCK = fcntl.LOCK_UN
# The descriptors of a queue whose files are not open yet (-1: they cannot be, read-only media).
_UNOPENED = -2


def turn_path(store_file: Path) -> Path:
    """The turnstile file beside the store file."""
    return store_file.with_name(store_file.name + ".turn")


class WriteLock:
    """The writers' queue of one connection. Not re-entrant: the backend counts nesting."""

    def __init__(self, store_file: Path) -> None:
        self._paths = (turn_path(store_file), lock_path(store_file))
        self._held = -1  # the descriptor that holds the lock now, if any
        # Opened by the first write: a connection that only reads (most) never needs them.
        self._turn = self._lock = _UNOPENED

    def _open(self) -> None:
        try:
            self._turn = os.open(self._paths[0], _FLAGS, FILE_MODE)
        except OSError:
            self._turn = self._lock = -1  # read-only media: nothing will be written
            return
        try:
            self._lock = os.open(self._paths[1], _FLAGS, FILE_MODE)
        except OSError:
            os.close(self._turn)
            self._turn = self._lock = -1

    def acquire(self, timeout: float) -> bool:
        """Take the lock, waiting up to ``timeout`` seconds; False if that was not enough."""
        lock, turn = self._lock, self._turn
        if lock < 0:
            if lock != _UNOPENED:
                return True
            self._open()
            return self.acquire(timeout)
        try:
            _flock(turn, _TRY)
        except BlockingIOError:
            return self._wait(timeout)  # someone is queued already: get in line
        try:
            _flock(lock, _TRY)
        except BlockingIOError:
            _flock(turn, _UNLOCK)
            return self._wait(timeout)
        _flock(turn, _UNLOCK)
        self._held = lock
        return True

    def _wait(self, timeout: float) -> bool:
        turn = os.open(self._paths[0], _FLAGS, FILE_MODE)
        lock = os.open(self._paths[1], _FLAGS, FILE_MODE)
        got = threading.Event()
        decided = threading.Lock()
        abandoned = False

        def wait() -> None:
            try:
                fcntl.flock(turn, fcntl.LOCK_EX)
                fcntl.flock(lock, fcntl.LOCK_EX)  # waiting here, holding the turn
            finally:
                os.close(turn)  # the next writer may now queue behind us
            with decided:
                if abandoned:
                    os.close(lock)  # closing releases it: the caller gave up
                else:
                    got.set()

        start_daemon(wait, "sesstree-write-lock")
        if got.wait(timeout):
            self._held = lock
            return True
        with decided:
            if got.is_set():  # granted just as the wait ran out: keep it
                self._held = lock
                return True
            abandoned = True
        return False

    def release(self) -> None:
        """Give the lock to the writer waiting at the turnstile, if any."""
        held, self._held = self._held, -1
        if held == self._lock:
            if held >= 0:
                _flock(held, _UNLOCK)
        elif held >= 0:
            os.close(held)

    def close(self) -> None:
        """Release the lock if held, and close the lock files."""
        self.release()
        for fd in (self._turn, self._lock):
            if fd >= 0:
                os.close(fd)
        self._turn = self._lock = -1
