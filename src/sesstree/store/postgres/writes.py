"""Writes to a PostgreSQL store: commits, batches, renames, settings, in round trips.

A part the backend owns (:class:`~sesstree.store.postgres.backend.PostgresBackend`): it
writes through the backend's :class:`~sesstree.store.postgres.channel.Channel` and compresses
rows with its :class:`~sesstree.store.postgres.codec.PgPayloads`.

Round trips: an append (one node on the session's head) is one statement, a server-side
function, in autocommit, so one round trip and one commit; other commits are one transaction
(the nodes pipelined, then one statement per ref moved). A batch is one transaction: once it
has moved a ref it holds that ref's row lock, so its later appends to it (folded into one
reflog entry, as the store asks) are decided here and sent as one call per ref (before
anything else reaches the server, and at the end).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from ...errors import ConflictError, MissingNodeError, SesstreeError, StoreError
from ...node import NodeId
from ..base import (
    RawNode,
    RefUpdate,
    SessionMeta,
    WatchMark,
    decode_watch_mark,
    describe,
    encode_watch_mark,
)
from ..codec import CodecError
from ..meta_rows import HEAD, LEGACY, SESSION, WATCH
from ..storable import check_commit, check_head, check_session_meta, check_text, storable
from . import objects, refs
from .channel import Channel
from .codec import PgPayloads
from .conn import Conn, StoreUnavailableError, is_connection_lost
from .packer import PgPacker

__all__ = ["PgWrites"]


class PgWrites:
    """Every write of one PostgreSQL backend (see the module docstring)."""

    def __init__(self, channel: Channel, payloads: PgPayloads, packer: PgPacker) -> None:
        self._channel = channel
        self._payloads = payloads
        self._packer = packer

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """See :meth:`sesstree.store.base.Backend.commit`."""
        check_commit(nodes, updates)
        channel = self._channel
        with channel.lock:
            if (
                len(nodes) == 1 and len(updates) == 1
                and updates[0].new == nodes[0].id and updates[0].old == nodes[0].parent
            ):
                self._append(nodes[0], updates[0])
            elif channel.depth:
                # A savepoint: a lost compare-and-set undoes this commit and keeps the batch.
                channel.run(lambda conn, replay: self._commit_in(conn, nodes, updates, False))
            else:
                channel.run(lambda conn, replay: self._commit_in(conn, nodes, updates, replay))
            if not channel.depth:
                self.train_if_due()
                self._packer.after_commit()

    def train_if_due(self) -> None:
        """Train the compression dictionary when due (see PgPayloads.train_if_due)."""
        try:
            self._payloads.train_if_due(
                objects.SAMPLES, lambda sql, params: self._channel.read(sql, params, fetch=False),
                self._packer.samples,
            )
        except (CodecError, StoreError):
            pass  # only a saving of space: payloads stay plain, and it is tried again later

    def train_at_close(self) -> None:
        """Train the dictionary if a closing writer should (see PgPayloads.due_at_close)."""
        try:
            if self._payloads.due_at_close():
                self.train_if_due()
        except (CodecError, SesstreeError, psycopg.Error):
            pass  # only a saving of space: the next writer tries again

    def _append(self, node: RawNode, u: RefUpdate) -> None:
        channel = self._channel
        params = objects.node_params(node, payloads=self._payloads)
        if channel.depth and u.fold and channel.heads.get(u.name) is not None:
            # This batch holds the ref's row lock since it first moved it, so where the ref
            # is, is known here: decide the compare-and-set now, send the node with the rest
            # of the ref's run (one call for the run, when anything else needs the server).
            if channel.heads[u.name] != u.old:
                raise _conflict(u, "conflict:" + (channel.heads[u.name] or ""))
            channel.queue.setdefault(u.name, []).append((u.old, params))
            channel.queue_reason[u.name] = u.reason
            channel.heads[u.name] = u.new
            self._packer.moved(u.name, u.old, u.new, True)
            return

        def work(conn: Conn, replay: bool) -> str:
            row = conn.execute(refs.APPEND, (u.name, *params, u.reason, u.fold, replay)
                               ).fetchone()
            return str(row[0]) if row else "conflict:"

        status = channel.run(work)
        if status != "ok":
            raise _conflict(u, status)
        self._packer.moved(u.name, u.old, u.new, True)
        if channel.depth:
            channel.heads[u.name] = u.new

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
                               and not _has_in(conn, n.parent, nodes))
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
                    raise _conflict(u, status)
        for u in updates:
            self._packer.moved(u.name, u.old, u.new, False)
        if self._channel.depth:
            for u in updates:
                self._channel.heads[u.name] = u.new

    @contextmanager
    def batch(self) -> Iterator[None]:
        """See :meth:`sesstree.store.base.Backend.batch`: one transaction."""
        channel = self._channel
        with channel.lock:
            if channel.depth:
                channel.depth += 1
                try:
                    yield
                finally:
                    channel.depth -= 1
                return
            conn = channel.conn.connection()
            txn = conn.transaction()
            try:
                txn.__enter__()
            except psycopg.Error as exc:
                channel.conn.raise_translated(exc)
            channel.depth = 1
            channel.conn.begin_batch(conn)
            try:
                yield
                if channel.queue:
                    channel.send_queue()
            except BaseException as exc:
                channel.drop_queue()
                self._packer.forget(list(channel.heads))
                channel.end_batch()
                try:
                    txn.__exit__(type(exc), exc, exc.__traceback__)
                except psycopg.Error:
                    channel.conn.discard()  # the connection went with the batch
                raise
            channel.end_batch()
            try:
                txn.__exit__(None, None, None)
            except psycopg.Error as exc:
                if is_connection_lost(exc, conn):
                    channel.conn.discard()
                    # The COMMIT was sent: whether the server ran it before the connection
                    # went cannot be known from here. Say so rather than guess.
                    raise StoreUnavailableError(
                        f"lost the connection to the store at {channel.url} while the batch "
                        "committed: it may or may not be stored; look before writing it again"
                    ) from None
                channel.conn.raise_translated(exc)
            self.train_if_due()
            self._packer.after_commit()

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        """See :meth:`sesstree.store.base.RefStore.rename_ref`."""
        check_commit((), [RefUpdate(old, target, None, reason), RefUpdate(new, None, target,
                                                                          reason)])
        with self._channel.lock:
            self._channel.flush()

            def work(conn: Conn, replay: bool) -> str:
                row = conn.execute(refs.RENAME_REF, (old, new, bytes.fromhex(target), reason,
                                                     replay)).fetchone()
                return str(row[0]) if row else "conflict:"

            if self._channel.run(work) != "ok":
                raise ConflictError(f"cannot rename {old} to {new}: one of them moved")
            self._packer.moved(old, target, None, False)
            self._packer.moved(new, None, target, False)

    def expire_reflog(self, name: str) -> int:
        """See :meth:`sesstree.store.base.RefStore.expire_reflog`."""
        if not storable(name):  # a name no store can hold names nothing
            return 0
        with self._channel.lock:
            self._channel.flush()
            row = self._channel.read(refs.EXPIRE, {"ref": name})
            return int(row[0][0])

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        """See :meth:`sesstree.store.base.RefStore.set_session_meta`."""
        text = check_session_meta(name, meta)

        def work(conn: Conn, replay: bool) -> None:
            with conn.transaction():  # inside a batch: a savepoint of it
                conn.execute(refs.UNSET_META, (LEGACY + name,))
                if text is None:
                    conn.execute(refs.UNSET_META, (SESSION + name,))
                else:
                    conn.execute(refs.SET_META, (SESSION + name, text))

        with self._channel.lock:
            self._channel.run(work)

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        """See :meth:`sesstree.store.base.RefStore.set_watch_mark`: the row is locked (or,
        absent, claimed by its insert) before it is compared, so of two watchers one waits
        for the other and then finds the mark moved."""
        key = WATCH + check_text(path, "watched path")

        def conflict() -> ConflictError:
            return ConflictError(f"the watch mark of {path} moved: another watcher read it")

        def work(conn: Conn, replay: bool) -> None:
            with conn.transaction():  # inside a batch: a savepoint of it
                if old is None:
                    if new is None:
                        if conn.execute(refs.GET_META + " FOR UPDATE", (key,)).fetchall():
                            raise conflict()
                        return
                    cur = conn.execute(
                        "INSERT INTO meta(key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        (key, encode_watch_mark(new)))
                    if cur.rowcount != 1:
                        raise conflict()
                    return
                rows = conn.execute(refs.GET_META + " FOR UPDATE", (key,)).fetchall()
                if not rows or decode_watch_mark(str(rows[0][0])) != old:
                    raise conflict()
                if new is None:
                    conn.execute(refs.UNSET_META, (key,))
                else:
                    conn.execute(refs.SET_META, (key, encode_watch_mark(new)))

        with self._channel.lock:
            self._channel.run(work)

    def set_head(self, value: str) -> None:
        """See :meth:`sesstree.store.base.RefStore.set_head`."""
        check_head(value)
        with self._channel.lock:
            self._channel.read(refs.SET_META, (HEAD, value), fetch=False)

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        """See :meth:`sesstree.store.base.ObjectStore.delete_nodes`."""
        def work(conn: Conn, replay: bool) -> int:
            with conn.transaction():
                row = conn.execute(objects.DELETE, {"ids": [bytes.fromhex(i) for i in ids]}
                                   ).fetchone()
                assert row is not None
                self._packer.rebuild(conn, row[1] or [])  # what is left of their packs
            return int(row[0])

        with self._channel.lock:
            return self._channel.run(work)


def _has_in(conn: Conn, id: NodeId, nodes: Sequence[RawNode]) -> bool:
    if any(n.id == id for n in nodes):
        return True
    return conn.execute(objects.HAS, ([bytes.fromhex(id)],)).fetchone() is not None


def _conflict(u: RefUpdate, status: str) -> ConflictError | MissingNodeError:
    if status == "missing-target":
        return MissingNodeError(f"{u.name}: target {describe(u.new)} is not stored")
    found = status.partition(":")[2] or None
    return ConflictError(f"{u.name} moved: expected {describe(u.old)}, found {describe(found)}")
