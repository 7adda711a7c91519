"""One connection to a PostgreSQL server: connecting, retrying, and turning errors into ours.

This module knows nothing of nodes or refs. It gives the backend three things:

- a connection that comes back after the server dropped it (a restart, an operator's
  ``pg_terminate_backend``): the next operation reconnects, within ``timeout`` seconds;
- :meth:`Connector.run`, which runs one whole unit of work and runs it again when doing so is
  safe: after a serialization failure (SQLSTATE ``40001``, what CockroachDB and YugabyteDB
  ask clients to retry) or a deadlock (``40P01``), and after a lost connection. A unit of
  work inside an open batch is never rerun (the batch's earlier work is gone with its
  transaction): it fails with :class:`~sesstree.errors.ConflictError` or
  :class:`StoreUnavailableError`;
- translation of every psycopg error into a sesstree error, by SQLSTATE and never by the
  text of the message, so a CLI user sees one line and no traceback.

A unit of work rerun after a lost connection is told so (``replay=True``): the server may
have committed it before the connection went, and the writes know how to recognise their own
committed work (see :mod:`sesstree.store.postgres.refs`). So an acknowledged append is
committed, and one whose acknowledgement was lost is neither lost nor written twice.

The password of the URL never appears in a message: errors name the store by
:func:`sesstree.store.urls.redact_url`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import psycopg

from ...errors import (
    ConflictError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from ..urls import mask_secrets, redact_url

__all__ = ["Conn", "Connector", "StoreUnavailableError", "is_connection_lost", "is_serialization_failure"]

T = TypeVar("T")
#: A connection whose rows are tuples.
Conn = psycopg.Connection[tuple[Any, ...]]

#: Serialization failures and deadlocks are rerun this many times before giving up.
_SERIAL_RETRIES = 10


class StoreUnavailableError(StoreError):
    """The PostgreSQL server cannot be reached, or the connection went and did not come back
    within the timeout. What was acknowledged before is stored; the operation that failed
    was not acknowledged."""


def _sqlstate(exc: BaseException) -> str:
    return getattr(exc, "sqlstate", None) or ""


def is_serialization_failure(exc: BaseException) -> bool:
    """40001 (serialization failure) or 40P01 (deadlock detected): safe to run again."""
    return _sqlstate(exc) in ("40001", "40P01")


def is_connection_lost(exc: BaseException, conn: Conn | None) -> bool:
    """The connection is gone (class 08, an administrator's or crash shutdown, or a socket
    that closed without an SQLSTATE)."""
    state = _sqlstate(exc)
    if state.startswith("08") or state in ("57P01", "57P02", "57P03"):
        return True
    if isinstance(exc, psycopg.OperationalError) and not state:
        return True
    return conn is not None and (conn.closed or conn.broken)


class Connector:
    """Owns the connection of one backend, reconnecting and retrying as the module says."""

    def __init__(
        self, url: str, *, timeout: float = 10.0, setup: Callable[[Conn], None]
        | None = None,
    ) -> None:
        self.url = url
        #: The URL as errors show it: without the password.
        self.shown = redact_url(url)
        self.timeout = timeout
        self._setup = setup
        self._conn: Conn | None = None
        self._connected_before = False
        # The connection of the open batch, if one is open: then nothing may be rerun, and a
        # lost connection loses the batch (and no new one may silently take its place).
        self._batch_conn: Conn | None = None

    @property
    def in_batch(self) -> bool:
        """True while a batch's transaction is open."""
        return self._batch_conn is not None

    def begin_batch(self, conn: Conn) -> None:
        """Pin ``conn`` as the batch's: work until :meth:`end_batch` must run on it."""
        self._batch_conn = conn

    def end_batch(self) -> None:
        """The batch is over (committed or rolled back)."""
        self._batch_conn = None

    # -- the connection ----------------------------------------------------------------------

    def connection(self) -> Conn:
        """The open connection, connecting (and retrying until ``timeout``) if needed."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        # The first connection is tried for a moment only (a connection dropped while it was
        # being made): a wrong host or port should be reported at once. A connection that was
        # up and went (a server restart) is tried again until the timeout.
        first = not self._connected_before
        self.discard()
        deadline = time.monotonic() + (min(1.0, self.timeout) if first else self.timeout)
        delay = 0.05
        while True:
            try:
                conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self.timeout)),
                )
            except psycopg.Error as exc:
                state = _sqlstate(exc)
                # Wrong database or credentials will not fix themselves: say so at once.
                if state == "3D000":
                    raise StoreNotFoundError(
                        f"no database for the store at {self.shown}: {self._text(exc)}"
                    ) from None
                if state.startswith("28"):
                    raise StoreUnavailableError(
                        f"cannot log in to {self.shown}: {self._text(exc)}"
                    ) from None
                delay = self._wait_to_retry(exc, delay, deadline)
                continue
            try:
                if self._setup is not None:
                    self._setup(conn)
            except psycopg.Error as exc:
                # Dropped while being set up: as if the connection had failed, try again.
                lost = is_connection_lost(exc, conn)
                conn.close()
                if not lost:
                    self.raise_translated(exc)
                delay = self._wait_to_retry(exc, delay, deadline)
                continue
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._connected_before = True
            return conn

    def _wait_to_retry(self, exc: psycopg.Error, delay: float, deadline: float) -> float:
        """Sleep before the next attempt to connect, and return the delay after that one;
        past the deadline, give up with one clear error."""
        if time.monotonic() + delay > deadline:
            raise StoreUnavailableError(
                f"cannot reach the store at {self.shown}: {self._text(exc)}"
            ) from None
        time.sleep(delay)
        return min(delay * 2, 1.0)

    @property
    def raw(self) -> Conn:
        """The psycopg connection (for tests and tools that need plain SQL)."""
        return self.connection()

    def discard(self) -> None:
        """Forget the connection (closing it if it is still open)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass  # it was broken already: nothing more to release

    def close(self) -> None:
        """Close the connection."""
        self.discard()

    # -- running work ------------------------------------------------------------------------

    def run(self, work: Callable[[Conn, bool], T]) -> T:
        """``work(connection, replay)``, rerun when that is safe (see the module docstring).

        ``work`` must be one whole transaction (or one statement in autocommit) unless a batch
        is open, in which case it joins the batch's transaction and is never rerun.
        """
        serial_tries = 0
        replay = False
        deadline: float | None = None
        while True:
            if self._batch_conn is not None and self._batch_conn is not self._conn:
                raise self._batch_lost()
            conn = self.connection()
            try:
                return work(conn, replay)
            except psycopg.Error as exc:
                if self.in_batch:
                    if is_connection_lost(exc, conn):
                        self.discard()
                        raise self._batch_lost() from None
                    self.raise_translated(exc)
                if is_serialization_failure(exc) and serial_tries < _SERIAL_RETRIES:
                    serial_tries += 1
                    # Back off a little, with jitter, so that the writers that collided do not
                    # collide again in step.
                    time.sleep(random.uniform(0, 0.002 * 2**serial_tries))
                    continue
                if is_connection_lost(exc, conn):
                    self.discard()
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self.timeout
                    if now < deadline:
                        replay = True
                        continue
                self.raise_translated(exc)

    def _batch_lost(self) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"lost the connection to the store at {self.shown} during a batch; "
            "nothing of the batch was stored"
        )

    def _text(self, exc: BaseException) -> str:
        """The server's message, first line only, and never holding the password."""
        diag = getattr(exc, "diag", None)
        primary = getattr(diag, "message_primary", None) if diag is not None else None
        text = str(primary or exc).strip().splitlines()
        line = text[0] if text else type(exc).__name__
        return mask_secrets(line, self.url)

    def raise_translated(self, exc: BaseException) -> NoReturn:
        """Raise the sesstree error that a psycopg error means, chosen by its SQLSTATE."""
        state = _sqlstate(exc)
        text = self._text(exc)
        where = self.shown
        if is_serialization_failure(exc):
            raise ConflictError(
                f"the store at {where} could not order this write with a concurrent one "
                f"(SQLSTATE {state}); nothing was written, try again"
            ) from None
        if is_connection_lost(exc, None) or state.startswith("08") or state in ("57P01", "57P02"):
            raise StoreUnavailableError(
                f"lost the connection to the store at {where} ({text}); "
                "the operation was not acknowledged"
            ) from None
        if state in ("55P03", "57014"):  # lock not available, statement cancelled (timeout)
            raise StoreLockedError(f"the store at {where} is busy: {text}") from None
        if state.startswith("XX") or state in ("42P01", "42883", "42703"):
            # Internal errors (data or index corruption), or tables, functions or columns
            # missing: the store was damaged or dropped under us.
            raise StoreCorruptError(f"the store at {where} is damaged: {text} ({state})") from None
        if state == "25006":  # read-only transaction: a hot standby, a read-only role
            raise StoreReadOnlyError(f"the store at {where} is read-only: {text}") from None
        if state in ("53100", "53200"):  # disk full, out of memory on the server
            raise StoreFullError(
                f"the server of the store at {where} is out of space: {text} ({state}); "
                "nothing was written"
            ) from None
        raise StoreError(f"the store at {where} failed: {text} (SQLSTATE {state or 'none'})") from None
