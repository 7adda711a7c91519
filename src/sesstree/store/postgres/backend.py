"""A store on a PostgreSQL server: many processes on many machines share one DAG.

``open_store("postgresql://user@host/db")`` opens one. The backend is three parts, kept apart
so each maps onto one side of the seam:

- :mod:`.postgres_objects`: nodes and payloads (SQL, and the encoding of a node's row);
- :mod:`.postgres_refs`: refs, their compare-and-set, the reflog, settings;
- :mod:`.postgres_conn`: the connection, reconnecting, retrying, translating errors;

and :mod:`.postgres_schema` creates and upgrades the tables, :mod:`.postgres_reads` reads
nodes, paths and refs. This module only puts them together: what a commit, a batch, a read
is, in round trips.

Round trips: an append (one node on the session's head) is one statement, a server-side
function, in autocommit, so one round trip and one commit; a chain is one statement; other
commits are one transaction (the nodes pipelined, then one statement per ref moved). A batch
is one transaction: once it has moved a ref it holds that ref's row lock, so its later appends
to it (folded into one reflog entry, as the store asks) are decided here and sent as one call
per ref (before anything else reaches the server, and at the end).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from ...errors import (
    ConflictError,
    MissingNodeError,
    SesstreeError,
    StoreError,
)
from ...node import NodeId
from ..base import (
    RawNode,
    RefUpdate,
    SessionMeta,
    describe,
)
from ..codec import CodecError
from ..meta_rows import HEAD, LEGACY, SESSION
from ..storable import check_commit, check_head, check_session_meta, storable
from ..urls import redact_url
from . import objects, refs
from .codec import PgPayloads
from .conn import Conn, Connector, StoreUnavailableError, is_connection_lost
from .reads import NodeReads
from .scans import ScanReads
from .schema import ensure_schema

__all__ = ["PostgresBackend", "StoreUnavailableError"]

T = TypeVar("T")



class PostgresBackend(NodeReads, ScanReads):
    """A store in a PostgreSQL database (or one schema of it). See the module docstring."""

    def __init__(
        self, url: str, *, create: bool = True, durable: bool = False, timeout: float = 10.0,
    ) -> None:
        self.url = redact_url(url)
        self._durable = durable
        self._timeout = timeout
        self._conn = Connector(url, timeout=timeout, setup=self._setup)
        self._lock = threading.RLock()
        self._batch_depth = 0
        # Inside a batch: where each ref the batch moved is now (the batch holds its row lock),
        # and the appends not sent yet, by ref, oldest first: (expected old head, params), with
        # the reason of the newest.
        self._heads: dict[str, NodeId | None] = {}
        self._queue: dict[str, list[tuple[NodeId | None, tuple[Any, ...]]]] = {}
        self._queue_reason: dict[str, str] = {}
        self._create = create
        # Compression of rows and payloads (format 4), and the dictionary it trains.
        self._payloads = PgPayloads(lambda sql, params: self._read(sql, params, binary=True))
        try:
            self._conn.run(self._check_schema)
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, conn: Conn) -> None:
        """Per-connection settings, applied on every (re)connection."""
        # Every read of sesstree is a lookup or a range of `seq`: read in index order, a range
        # needs no sort for the path's aggregates, where a bitmap scan would (measured: a
        # 10,000-event load 0.9 ms faster on the server). Only a speed-up: an engine without
        # the setting (CockroachDB, YugabyteDB) is used as it is.
        self._try_setting(conn, "SET enable_bitmapscan = off")
        # A writer waits for a ref's row as long as the store's timeout, as on SQLite, and
        # then gets StoreLockedError (SQLSTATE 55P03) instead of waiting for ever on a long
        # batch. Writers on other sessions never wait: each locks only its own ref's row.
        self._try_setting(conn, f"SET lock_timeout = {max(1, int(self._timeout * 1000))}")
        if self._durable:
            # The server's default is already `on`; a durable store insists on it, whatever
            # the server or the role was configured with.
            conn.execute("SET synchronous_commit = on")

    @staticmethod
    def _try_setting(conn: Conn, statement: str) -> None:
        try:
            conn.execute(statement)
        except psycopg.errors.UndefinedObject:
            pass  # SQLSTATE 42704: the engine has no such setting

    def _check_schema(self, conn: Conn, replay: bool) -> None:
        ensure_schema(conn, create=self._create, shown=self.url)

    @property
    def _db(self) -> Conn:
        """The current connection (tests use it to reach under the API)."""
        return self._conn.raw

    # -- writing -----------------------------------------------------------------------------

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        check_commit(nodes, updates)
        with self._lock:
            if (
                len(nodes) == 1 and len(updates) == 1
                and updates[0].new == nodes[0].id and updates[0].old == nodes[0].parent
            ):
                self._append(nodes[0], updates[0])
            elif self._batch_depth:
                # A savepoint: a lost compare-and-set undoes this commit and keeps the batch.
                self._run(lambda conn, replay: self._commit_in(conn, nodes, updates, False))
            else:
                self._run(lambda conn, replay: self._commit_in(conn, nodes, updates, replay))
            if not self._batch_depth:
                self._train_if_due()

    def _train_if_due(self) -> None:
        """Train the compression dictionary when due (see PgPayloads.train_if_due)."""
        try:
            self._payloads.train_if_due(
                objects.SAMPLES, lambda sql, params: self._read(sql, params, fetch=False)
            )
        except (CodecError, StoreError):
            pass  # only a saving of space: payloads stay plain, and it is tried again later

    def _append(self, node: RawNode, u: RefUpdate) -> None:
        params = objects.node_params(node, payloads=self._payloads)
        if self._batch_depth and u.fold and self._heads.get(u.name) is not None:
            # This batch holds the ref's row lock since it first moved it, so where the ref
            # is, is known here: decide the compare-and-set now, send the node with the rest
            # of the ref's run (one call for the run, when anything else needs the server).
            if self._heads[u.name] != u.old:
                raise self._conflict(u, "conflict:" + (self._heads[u.name] or ""))
            self._queue.setdefault(u.name, []).append((u.old, params))
            self._queue_reason[u.name] = u.reason
            self._heads[u.name] = u.new
            return

        def work(conn: Conn, replay: bool) -> str:
            row = conn.execute(refs.APPEND, (u.name, *params, u.reason, u.fold, replay)
                               ).fetchone()
            return str(row[0]) if row else "conflict:"

        status = self._run(work)
        if status != "ok":
            raise self._conflict(u, status)
        if self._batch_depth:
            self._heads[u.name] = u.new

    def _run(self, work: Callable[[Conn, bool], T]) -> T:
        """Run ``work`` on the server, after the batch's queued appends (it may read them)."""
        if self._queue:
            self._send_queue()
        return self._conn.run(work)

    def _send_queue(self) -> None:
        """Send each ref's queued run of appends, one call per ref."""
        queue, self._queue = self._queue, {}
        reasons, self._queue_reason = self._queue_reason, {}

        def work(conn: Conn, replay: bool) -> None:
            for name, run in queue.items():
                old = run[0][0]
                columns = list(zip(*(p for _, p in run), strict=True))
                row = conn.execute(refs.APPEND_RUN, (
                    name, bytes.fromhex(old) if old is not None else None,
                    list(columns[0]), list(columns[2]), list(columns[3]), list(columns[4]),
                    list(columns[5]), reasons[name],
                )).fetchone()
                if row is None or row[0] != "ok":  # pragma: no cover - the batch holds the lock
                    raise ConflictError(f"{name} moved during the batch")

        self._conn.run(work)

    def _commit_in(
        self, conn: Conn, nodes: Sequence[RawNode],
        updates: Sequence[RefUpdate], replay: bool,
    ) -> None:
        """One commit as one transaction (or, inside a batch, one savepoint)."""
        # Outside a batch this is the commit's transaction; inside one, a savepoint.
        with conn.transaction():
            if nodes:
                params = [objects.node_params(n, payloads=self._payloads) for n in nodes]
                with conn.cursor() as cur:
                    # Pipelined: the nodes go in one round trip, parents before children.
                    cur.executemany(objects.PUT_NODE, params, returning=True)
                    missing = 0
                    while True:
                        row = cur.fetchone()
                        missing += row is None or row[0] is None
                        if not cur.nextset():
                            break
                if missing:
                    bad = next(n for n in nodes if n.parent is not None
                               and not self._has_in(conn, n.parent, nodes))
                    raise MissingNodeError(
                        f"parent {describe(bad.parent)} of {bad.id[:12]} is not stored")
            # Refs in name order: two commits moving the same refs lock them in one order and
            # so cannot deadlock each other.
            for u in sorted(updates, key=lambda u: u.name):
                old = bytes.fromhex(u.old) if u.old is not None else None
                new = bytes.fromhex(u.new) if u.new is not None else None
                row = conn.execute(refs.MOVE_REF, (u.name, old, new, u.reason, u.fold, replay)
                                   ).fetchone()
                status = str(row[0]) if row else "conflict:"
                if status != "ok":
                    raise self._conflict(u, status)
        if self._batch_depth:
            for u in updates:
                self._heads[u.name] = u.new

    @staticmethod
    def _has_in(conn: Conn, id: NodeId, nodes: Sequence[RawNode]) -> bool:
        if any(n.id == id for n in nodes):
            return True
        return conn.execute(objects.HAS, ([bytes.fromhex(id)],)).fetchone() is not None

    def _conflict(self, u: RefUpdate, status: str) -> ConflictError | MissingNodeError:
        if status == "missing-target":
            return MissingNodeError(f"{u.name}: target {describe(u.new)} is not stored")
        found = status.partition(":")[2] or None
        return ConflictError(f"{u.name} moved: expected {describe(u.old)}, found {describe(found)}")

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock:
            outer = self._batch_depth == 0
            if not outer:
                self._batch_depth += 1
                try:
                    yield
                finally:
                    self._batch_depth -= 1
                return
            conn = self._conn.connection()
            txn = conn.transaction()
            try:
                txn.__enter__()
            except psycopg.Error as exc:
                self._conn.raise_translated(exc)
            self._batch_depth = 1
            self._conn.begin_batch(conn)
            try:
                yield
                if self._queue:
                    self._send_queue()
            except BaseException as exc:
                self._queue.clear()
                self._queue_reason.clear()
                self._end_batch()
                try:
                    txn.__exit__(type(exc), exc, exc.__traceback__)
                except psycopg.Error:
                    self._conn.discard()  # the connection went with the batch
                raise
            self._end_batch()
            try:
                txn.__exit__(None, None, None)
                self._train_if_due()
            except psycopg.Error as exc:
                if is_connection_lost(exc, conn):
                    self._conn.discard()
                    # The COMMIT was sent: whether the server ran it before the connection
                    # went cannot be known from here. Say so rather than guess.
                    raise StoreUnavailableError(
                        f"lost the connection to the store at {self.url} while the batch "
                        "committed: it may or may not be stored; look before writing it again"
                    ) from None
                self._conn.raise_translated(exc)

    def _end_batch(self) -> None:
        self._batch_depth = 0
        self._heads.clear()
        self._conn.end_batch()

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        check_commit((), [RefUpdate(old, target, None, reason), RefUpdate(new, None, target,
                                                                          reason)])
        with self._lock:
            self._flush_in_batch()

            def work(conn: Conn, replay: bool) -> str:
                row = conn.execute(refs.RENAME_REF, (old, new, bytes.fromhex(target), reason,
                                                     replay)).fetchone()
                return str(row[0]) if row else "conflict:"

            if self._run(work) != "ok":
                raise ConflictError(f"cannot rename {old} to {new}: one of them moved")

    def _flush_in_batch(self) -> None:
        """Send a batch's queued appends: an operation that rewrites the log must see them."""
        if self._queue:
            self._send_queue()
        self._heads.clear()  # a rename or gc may move refs: ask the server again

    def expire_reflog(self, name: str) -> int:
        if not storable(name):  # a name no store can hold names nothing
            return 0
        with self._lock:
            self._flush_in_batch()
            row = self._read(refs.EXPIRE, {"ref": name})
            return int(row[0][0])

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        text = check_session_meta(name, meta)

        def work(conn: Conn, replay: bool) -> None:
            with conn.transaction():  # inside a batch: a savepoint of it
                conn.execute(refs.UNSET_META, (LEGACY + name,))
                if text is None:
                    conn.execute(refs.UNSET_META, (SESSION + name,))
                else:
                    conn.execute(refs.SET_META, (SESSION + name, text))

        with self._lock:
            self._run(work)

    def set_head(self, value: str) -> None:
        check_head(value)
        with self._lock:
            self._read(refs.SET_META, (HEAD, value), fetch=False)

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        rows = self._read(objects.DELETE, {"ids": [bytes.fromhex(i) for i in ids]})
        return int(rows[0][0])

    # -- reading -----------------------------------------------------------------------------

    def _read(
        self, sql: str, params: Any = None, *, fetch: bool = True, binary: bool = False,
    ) -> list[Any]:
        """One statement (rerun after a lost connection), its rows."""

        def work(conn: Conn, replay: bool) -> list[Any]:
            # The SQL is one of this package's constants.
            cur = conn.execute(sql, params, binary=binary)
            return cur.fetchall() if fetch and cur.description is not None else []

        with self._lock:
            return self._run(work)

    # -- maintenance on the server -----------------------------------------------------------

    def collect_garbage(
        self, dry_run: bool, keep: NodeId | None = None
    ) -> tuple[list[NodeId], int, int]:
        """Find (and unless ``dry_run`` remove) what nothing reaches, walking on the server.

        Returns the unreachable ids (newest first), how many were removed and how many nodes
        are kept; only those ids come to the client. The walk reads a snapshot and blocks no
        one. The removal goes in chunks, each a short transaction that first waits for writers
        in progress and holds new ones back (SHARE locks) while it keeps whatever they made
        reachable since the snapshot, so a node being appended to, or a payload a new node
        shares, never goes.
        """

        # Walked on the server, removed in short slices: see postgres_scan.
        return self.sweep(dry_run, keep, None)

    @staticmethod
    def _gc_keep(conn: Conn, keep: NodeId | None) -> bytes | None:
        """The detached HEAD gc keeps: the caller's (a checkout's HEAD is kept on its own
        machine), or one a store of an older sesstree kept in its metadata."""
        if keep is not None:
            return bytes.fromhex(keep)
        head = conn.execute(refs.GET_META, (HEAD,)).fetchone()
        if head is not None and not str(head[0]).startswith("ref: "):
            return bytes.fromhex(str(head[0]))
        return None

    def server_stats(self) -> dict[str, int]:
        """Counts and bytes, computed on the server: no node is read."""
        rows = self._read(objects.STATS)
        nodes, sessions, tags, reflog, logical = (int(v) for v in rows[0])
        return {"nodes": nodes, "sessions": sessions, "tags": tags, "reflog_entries": reflog,
                "logical_bytes": logical, "physical_bytes": self.physical_bytes()}

    def close(self) -> None:
        with self._lock:
            try:
                if self._payloads.due_at_close():
                    self._train_if_due()
            except (CodecError, SesstreeError, psycopg.Error):
                pass  # only a saving of space: the next writer tries again
            self._conn.close()
