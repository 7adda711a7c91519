"""A store read without its WAL index (a full disk) lets go of it whenever it is idle.

Opened that way (:func:`sesstree.store.sqlite.media.open_without_index`), a connection holds
the store alone: no other process can open it, even to read, until it closes. A command ends
in a moment, but a process that keeps its store open (``sess serve``, the proxy, a program
using the API) would shut every other ``sess`` command out for as long as it runs, and would
go on refusing writes after space was freed. So such a connection is closed whenever it is
idle (no transaction open, no statement running) and opened again at its next use: others
get their turn within :data:`RELEASE_AFTER` seconds, and an open once there is room again is
an ordinary one (shared with other processes, and writable).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any, cast

from .media import full_error, translating, without_index
from .opening import open_connection, prepare_appends
from .state import ConnState
from .threads import start_daemon

__all__ = ["RELEASE_AFTER", "Hold", "Reopening"]

#: Seconds between looks at whether the store is idle. A process waiting to open the store
#: waits up to its timeout (10 s by default), so it gets in.
RELEASE_AFTER = 0.5


class Reopening:
    """The connection of a store opened without its index: closed when let go of
    (:meth:`release`), opened again by the first use after that. Everything that holds the
    backend's connection holds this, so no one is left with a closed one."""

    def __init__(self, owner: Hold, db: sqlite3.Connection) -> None:
        self._owner = owner
        #: The open connection, or None while let go of.
        self.real: sqlite3.Connection | None = db
        #: Set when the backend closes.
        self.closed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real or self._owner.open_again(), name)

    def release(self) -> None:
        """Close the connection if no transaction is open on it (the next use opens it)."""
        if self.real is not None and not self.real.in_transaction:
            db, self.real = self.real, None
            db.close()

    def close(self) -> None:
        """Close it for good (the backend closes)."""
        self.closed.set()
        if self.real is not None:
            db, self.real = self.real, None
            db.close()


class Hold:
    """Opens the store for the backend, and lets go of a store opened without its index (see
    the module docstring). Owns the :class:`Reopening` stand-in, if any, and its thread; it
    sets the connection and how it was opened in the backend's :class:`ConnState`."""

    def __init__(self, state: ConnState) -> None:
        self._state = state
        # Whether the connection has the statements appends run (see refuse_if_full).
        self._appends_ready = False

    def connect(self, create: bool) -> None:
        """Open the store (again), and set up what depends on how it was opened: read-only
        (read-only media, a full disk) or not, with its index or without."""
        state = self._state
        db, read_only = open_connection(
            state.path, create=create, durable=state.durable, timeout=state.timeout
        )
        state.read_only = read_only
        state.full = read_only and without_index(db)
        self._appends_ready = False  # (a new connection has none of them)
        if state.full:
            db.execute("PRAGMA query_only=1")
        held: object = getattr(state, "db", None)
        made: Reopening | None = None
        if isinstance(held, Reopening):
            held.real = db
            state.data_version = -1  # (another process may have written meanwhile)
        elif state.full:
            made = Reopening(self, db)
            state.db = cast(sqlite3.Connection, made)  # (it acts as one)
        else:
            state.db = db
        try:
            # The first reads of the tables' columns: a damaged schema text is found here.
            with translating(state.path):
                state.setup()
        except BaseException:
            for reopening in (held, made):
                if isinstance(reopening, Reopening):
                    reopening.real = None  # (let go of: a later use tries again)
            db.close()
            raise
        if made is not None:
            start_daemon(self._release_loop, "sesstree-release", made)

    def open_again(self) -> sqlite3.Connection:
        """The connection of a store let go of, opened again."""
        state = self._state
        with state.lock:
            held: object = state.db
            assert isinstance(held, Reopening)
            if held.real is None:
                self.connect(create=False)  # (a sesstree error if it cannot: still let go)
            assert held.real is not None
            return held.real

    def refuse_if_full(self) -> None:
        """Before a write (the lock held, no transaction open): on a store opened without
        room for its index, open it again, as there may be room now; refuse it if not. Then,
        on the connection's first write, make the statements appends run
        (:func:`~.opening.prepare_appends`): a connection that only reads never pays for them."""
        state = self._state
        held: object = state.db
        if state.full and isinstance(held, Reopening):
            with state.lock:
                held.release()
                self.open_again()
        if state.full:
            raise full_error(state.path)
        if not self._appends_ready and state.codec_columns:
            # (A format-3 store opened read-only has no codec columns: it is never appended to.)
            with translating(state.path):
                self._appends_ready = prepare_appends(state.db)

    def _release_loop(self, held: Reopening) -> None:
        """Let go of ``held`` whenever it is idle, until the backend closes it."""
        state = self._state
        while not held.closed.wait(RELEASE_AFTER) and state.full:
            # (Once opened again with room, it is held as any connection is.)
            if not state.lock.acquire(blocking=False):
                continue  # in use, so not idle
            try:
                if state.full and not state.batch_depth:
                    held.release()
            finally:
                state.lock.release()
