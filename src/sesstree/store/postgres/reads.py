"""Reads of a PostgreSQL store: nodes, paths, refs, the reflog and settings, one statement
each. A part the backend owns (:class:`~sesstree.store.postgres.backend.PostgresBackend`),
reading through its :class:`~sesstree.store.postgres.channel.Channel`. Every loose node read
is checked against its id, every pack against its checksum and its links (:mod:`.unpack`):
damage is an error naming the node or the pack, never data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import psycopg

from ...errors import StoreCorruptError
from ...node import NodeId
from ..base import Chain, Ref, ReflogEntry, SessionMeta, StoredNode, StoreFormat, WatchMark
from ..codec import CodecError, dict_hash
from ..meta_rows import HEAD, LEGACY, SESSION, WATCH, session_meta_of, watch_marks_of
from ..packs import describe
from ..rows import split_row
from ..storable import storable
from . import objects, packsql, pathsql, refs
from .channel import Channel
from .codec import PgPayloads
from .conn import Conn, is_connection_lost
from .unpack import PackReader, RawPack

__all__ = ["PgReads", "reflog_entries"]


def reflog_entries(rows: list[Any]) -> list[ReflogEntry]:
    """Reflog entries from rows of the reflog queries (ref, old id, new id, time, reason,
    started)."""
    return [ReflogEntry(r[0], objects.hex_id(r[1]), objects.hex_id(r[2]), r[3], r[4], r[5])
            for r in rows]

#: Nodes per fetch when every node is read (fsck, graph): bounded memory on a large store.
_ITER_CHUNK = 5000
#: Packs kept open while every node is read: a pack's rows are consecutive unless writers
#: interleaved, so a few dozen cover as many sessions written at once (about 16 MB at most).
_ITER_PACKS = 32


class PgReads:
    """The reads of one PostgreSQL backend (see the module docstring)."""

    def __init__(self, channel: Channel, payloads: PgPayloads) -> None:
        self._channel = channel
        self._conn = channel.conn
        self._payloads = payloads
        self._url = channel.url
        self.packs = PackReader(payloads.codec, channel.url)
        # Bound once: a read is a call to the channel, with no layer in between.
        self._read = channel.read

    def get(self, id: NodeId) -> StoredNode | None:
        """Node ``id`` as stored, checked, or None: one statement (a packed node comes with
        its pack)."""
        rows = self._read(objects.GET, (bytes.fromhex(id),), binary=True)
        if not rows:
            return None
        row = rows[0]
        if row[5] is not None:
            pid, depth, count, codec, sum, data = row[7:13]
            if pid is None:
                raise StoreCorruptError(f"the store at {self._url} is damaged: node {id[:12]} "
                                        f"is in pack {row[5]}, which is missing")
            pack = self.packs.raw(pid, depth, count, codec, bytes(sum), bytes(data),
                                  bytes(row[0]))
            return self._packed(row, pack, depth, count)
        try:
            body = self._payloads.body(bytes(row[3]))
        except CodecError as exc:
            raise StoreCorruptError(f"the store at {self._url} is damaged: node {id[:12]}: its "
                                    f"payload cannot be inflated ({exc})") from None
        if (row[1] is None and row[4] is not None) or not objects.row_is_intact(
                bytes(row[0]), None if row[1] is None else bytes(row[1]), body):
            raise StoreCorruptError(f"the store at {self._url} is damaged: node {id[:12]} does "
                                    "not hash to its id")
        return self._stored(row, body)

    def _packed(self, row: Any, pack: RawPack, depth: int, count: int) -> StoredNode:
        """A packed node's row (:data:`.objects.GET`'s first columns) read from its pack."""
        if row[1] is None and row[4] is not None:
            raise StoreCorruptError(f"the store at {self._url} is damaged: the parent of node "
                                    f"{bytes(row[0]).hex()[:12]} is missing")
        body = self.packs.node_body(pack, depth, count, bytes(row[0]), row[2],
                                    None if row[1] is None else bytes(row[1]),
                                    None if row[6] is None else bytes(row[6]))
        type, encoded = split_row(body)
        return StoredNode(NodeId(bytes(row[0]).hex()), objects.hex_id(row[1]), row[2], type,
                          encoded)

    def _stored(self, row: Any, body: bytes | None = None) -> StoredNode:
        try:
            if body is None:
                body = self._payloads.body(bytes(row[3]))
            type, encoded = split_row(body)
        except (ValueError, IndexError, UnicodeDecodeError, CodecError):
            # Give it back as it is: it will not hash to its id, and fsck says so.
            type, encoded = "", bytes(row[3])
        return StoredNode(NodeId(bytes(row[0]).hex()), objects.hex_id(row[1]), row[2], type,
                          encoded)

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        """Which of ``ids`` are stored: one statement."""
        rows = self._read(objects.HAS, ([bytes.fromhex(i) for i in ids],))
        return {NodeId(r[0].hex()) for r in rows}

    def chain(self, head: NodeId, limit: int | None = None) -> Chain:
        """The path ending at ``head`` (its newest ``limit`` nodes), oldest first: one statement
        (:data:`.pathsql.PATH`), every loose node checked against its id, every pack against
        its checksum and links."""
        params = {"id": bytes.fromhex(head), "limit": 2**31 - 1 if limit is None else limit}
        # binary: the path's bytes come as they are, not as hex text
        rows = self._read(pathsql.PATH, params, binary=True)
        if not rows or rows[0][0] is None:
            raise KeyError(head)
        depth, count, ids, data, base, lengths, *packed = rows[0]
        want = depth if limit is None else min(limit, depth)
        if want == 0:
            return Chain([], [], depth + 1, head, ids=[])
        base = None if base is None else bytes(base)
        types: list[str] = []
        datas: list[Any] = []
        ids = b"" if ids is None else bytes(ids)
        if count:
            types, datas = self._loose(ids, bytes(data), base, lengths or [], count)
        got = 0
        if count < want:
            parts, got, base = self.packs.path(
                packed, base if count else bytes.fromhex(head), want - count)
            if parts:
                types = [t for part in parts for t in part[0]] + types
                datas = [d for part in parts for d in part[1]] + datas
                ids = b"".join(part[2] for part in parts) + ids
        if count + got != want or (want == depth and base is not None):
            raise StoreCorruptError(f"the store at {self._url} is damaged: a path does not "
                                    "match its depth index")
        return Chain(types, datas, depth - want + 1, objects.hex_id(base), packed_ids=ids)

    def _loose(self, ids: bytes, data: bytes, base: bytes | None, lengths: list[int],
               count: int) -> tuple[list[str], list[Any]]:
        """The types and payloads of a path's loose rows (concatenated), each checked
        against its id (``base``: the oldest one's parent)."""
        if sum(lengths) != len(data) or len(lengths) != count:
            raise StoreCorruptError(f"the store at {self._url} is damaged: a node row is "
                                    "unreadable")
        bodies, unreadable = self._payloads.bodies(data, lengths)
        bad = unreadable if unreadable is not None else objects.first_bad_body(base, ids, bodies)
        if bad is not None:
            why = "does not hash to its id"
            if unreadable is not None:
                try:
                    self._payloads.body(bodies[bad])
                except CodecError as exc:
                    why = f"its payload cannot be inflated ({exc})"
            raise StoreCorruptError(f"the store at {self._url} is damaged: node "
                                    f"{ids[32 * bad : 32 * bad + 32].hex()[:12]} {why}")
        del data
        try:
            return objects.decode_path(b"".join(bodies), count)
        except (msgspec.DecodeError, ValueError):
            raise StoreCorruptError(f"the store at {self._url} is damaged: a node row is "
                                    "unreadable") from None

    def recorded(self, ids: Sequence[NodeId]) -> dict[NodeId, float]:
        """When each of ``ids`` was first recorded, for the nodes that keep a time."""
        rows = self._read(objects.RECORDED, ([bytes.fromhex(i) for i in ids],))
        return {NodeId(r[0].hex()): r[1] / 1000 for r in rows if type(r[1]) is int}

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        """Up to ``limit`` stored ids that start with ``prefix``, through the id index."""
        lo = bytes.fromhex((prefix + "0" * 64)[:64])
        hi = bytes.fromhex((prefix + "f" * 64)[:64])
        return [NodeId(r[0].hex()) for r in self._read(objects.PREFIX, (lo, hi, limit))]

    def get_ref(self, name: str) -> Ref | None:
        """Ref ``name``, or None."""
        if not storable(name):  # a name no store can hold names nothing
            return None
        rows = self._read(refs.GET_REF, (name,))
        return Ref(name, NodeId(rows[0][0].hex()), rows[0][1]) if rows else None

    def list_refs(self, prefix: str) -> list[Ref]:
        """Every ref under ``prefix``, sorted by name."""
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        rows = self._read(refs.LIST_REFS, (len(prefix), prefix))
        return [Ref(r[0], NodeId(r[1].hex()), r[2]) for r in rows]

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        """The moves of ref ``name`` (of every ref if None), oldest first."""
        if not storable(name or ''):  # a name no store can hold names nothing
            return []
        rows = self._read(refs.REFLOG_ALL) if name is None else self._read(refs.REFLOG, (name,))
        return reflog_entries(rows)

    def _meta_rows(self, prefix: str) -> list[tuple[str, str]]:
        return [(str(k), str(v)) for k, v in self._read(refs.LIST_META, (len(prefix), prefix))]

    def get_session_meta(self, name: str) -> SessionMeta | None:
        """Session ``name``'s metadata, or None."""
        if not storable(name):  # a name no store can hold names nothing
            return None
        rows = self._read(refs.GET_METAS, ([SESSION + name, LEGACY + name],))
        return session_meta_of((str(k), str(v)) for k, v in rows).get(name)

    def list_session_meta(self) -> dict[str, SessionMeta]:
        """Every session's metadata, by name."""
        return session_meta_of(self._meta_rows(SESSION) + self._meta_rows(LEGACY))

    def list_watch_marks(self) -> dict[str, WatchMark]:
        """Every watched file's mark, by path."""
        return watch_marks_of(self._meta_rows(WATCH))

    def get_head(self) -> str | None:
        """HEAD's stored value, or None."""
        rows = self._read(refs.GET_META, (HEAD,))
        return str(rows[0][0]) if rows else None

    def store_format(self) -> StoreFormat:
        """The store's format version and id scheme."""
        rows = dict(self._read(refs.GET_METAS, (["format", "ids"],)))
        return StoreFormat(int(rows.get("format", 0)), str(rows.get("ids", "")))

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside the block see one state of the store: one REPEATABLE READ, READ ONLY
        transaction (inside a batch, the batch's own transaction)."""
        with self._channel.lock:
            if self._channel.depth or self._conn.in_batch:
                yield
                return
            conn = self._conn.connection()
            try:
                txn = conn.transaction()
                txn.__enter__()
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            except psycopg.Error as exc:
                self._conn.raise_translated(exc)
            # Pinned like a batch: a read must not run again on a new connection, outside the
            # snapshot.
            self._conn.begin_batch(conn)
            try:
                yield
            except BaseException as exc:
                self._conn.end_batch()
                try:
                    txn.__exit__(type(exc), exc, exc.__traceback__)
                except psycopg.Error:
                    self._conn.discard()
                raise
            self._conn.end_batch()
            try:
                txn.__exit__(None, None, None)
            except psycopg.Error as exc:
                self._conn.discard()
                self._conn.raise_translated(exc)

    def iter_nodes(self) -> Iterator[StoredNode]:
        """Every node, parents first, fetched in chunks from one snapshot (bounded memory):
        the open snapshot's, or a read-only transaction of its own."""
        with self._channel.lock:
            if self._channel.depth:
                rows = self._read(objects.ITER, binary=True)  # (sends the queued appends)
                yield from self._nodes(rows, lambda pid: self._read(
                    packsql.ONE_PACK, (pid,), binary=True))
                return
            conn = self._conn.connection()
            try:
                if self._conn.in_batch:  # inside snapshot(): read through its transaction
                    yield from self._iter_cursor(conn)
                    return
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    yield from self._iter_cursor(conn)
            except psycopg.Error as exc:
                if is_connection_lost(exc, conn):
                    self._conn.discard()
                self._conn.raise_translated(exc)

    def _iter_cursor(self, conn: Conn) -> Iterator[StoredNode]:
        # A server-side cursor: the rows come _ITER_CHUNK at a time, not all at once.
        with conn.cursor(name="sesstree_iter_nodes", binary=True) as cur:
            cur.itersize = _ITER_CHUNK
            cur.execute(objects.ITER)
            yield from self._nodes(cur, lambda pid: conn.execute(
                packsql.ONE_PACK, (pid,), binary=True).fetchall())

    def _nodes(self, rows: Iterable[Any],
               fetch: Callable[[int], list[Any]]) -> Iterator[StoredNode]:
        """Nodes from rows of :data:`.objects.ITER`; a packed one's pack read with ``fetch``
        (once while its rows come: a few packs are kept open)."""
        for _, node in self.nodes_of_rows(rows, fetch):
            assert node is not None
            yield node

    def nodes_of_rows(self, rows: Iterable[Any], fetch: Callable[[int], list[Any]],
                      tolerant: bool = False) -> Iterator[tuple[Any, StoredNode | None]]:
        """Each row (its first columns :data:`.objects.NODE_COLS`) with its node; a packed
        one's pack read with ``fetch`` (once while its rows come: a few packs are kept open).
        ``tolerant``: a node that cannot be read comes as None instead of raising (the text
        index indexes it empty; fsck names the damage)."""
        opened: dict[int, tuple[RawPack, int, int]] = {}
        for row in rows:
            if row[5] is None:
                yield row, self._stored(row)
                continue
            try:
                found = opened.pop(row[5], None)  # (put back last: the least recent goes first)
                if found is None:
                    got = fetch(row[5])
                    if not got:
                        raise StoreCorruptError(f"the store at {self._url} is damaged: node "
                                                f"{bytes(row[0]).hex()[:12]} is in pack {row[5]}, "
                                                "which is missing")
                    pid, depth, count, codec, sum, data = got[0][:6]
                    found = (self.packs.raw(pid, depth, count, codec, bytes(sum), bytes(data),
                                            bytes(row[0])), depth, count)
                    if len(opened) >= _ITER_PACKS:
                        del opened[next(iter(opened))]
                opened[row[5]] = found
                node = self._packed(row, *found)
            except StoreCorruptError:
                if not tolerant:
                    raise
                yield row, None
                continue
            yield row, node

    def count_nodes(self) -> int:
        """How many nodes are stored (counted on the server)."""
        return int(self._read(objects.COUNT)[0][0])

    def check(self) -> list[str]:
        """fsck's checks on the server (links, derived indexes, the packs' index, refs and the
        reflog, the compression dictionaries), up to 20 faults per check."""
        faults: list[str] = []
        for what, sql in objects.CHECKS.items():
            for (key,) in self._read(sql + " LIMIT 20"):
                faults.append(f"{what}: {key.hex()[:12]}")
        for what, sql in packsql.PACK_CHECKS.items():
            for (key,) in self._read(sql + " LIMIT 20"):
                faults.append(f"{what}: {key.hex()[:12]}")
        for what, sql in packsql.PACKS_WITHOUT.items():
            for pid, depth, count in self._read(sql + " LIMIT 20"):
                faults.append(f"{what}: {describe(pid, depth, count)}")
        for what, sql in refs.REF_CHECKS.items():
            for (key,) in self._read(sql + " LIMIT 20"):
                faults.append(f"{what}: {key}")
        for dict_id, digest, data in self._read("SELECT id, hash, data FROM dicts", binary=True):
            if dict_hash(bytes(data)) != bytes(digest):
                faults.append(f"compression dictionary {dict_id} does not match its hash")
        return faults

    def physical_bytes(self) -> int:
        """The bytes the store's tables and indexes take on the server."""
        return int(self._read(objects.PHYSICAL_BYTES)[0][0] or 0)
