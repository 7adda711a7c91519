"""Nodes of an SQLite store by id: one node, a chain (a path read as one range, see
:mod:`sesstree.store.sqlite.paths`), which ids are stored, a prefix, every node, a delete.

Every node read is checked against its id: damage shows as an error, never as data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext

from ...errors import StoreCorruptError
from ...node import NodeId
from ..base import Chain, StoredNode
from .packing import trim_packs
from .paths import verify_node
from .scans import SLICE
from .sql import KEY_BYTES, LOOSE_JOIN, NODE_COLS, by_id, ids_in, in_params
from .state import ConnState
from .textindex import lower_mark, unindex
from .txn import Transactions

__all__ = ["SqliteNodes"]

# The ids in [?1, ?2] (up to ?3 of them), through the index on their first bytes (format 6).
_PREFIX = (f"SELECT id FROM nodes WHERE substr(id, 1, {KEY_BYTES}) BETWEEN substr(?1, 1, "
           f"{KEY_BYTES}) AND substr(?2, 1, {KEY_BYTES}) AND id BETWEEN ?1 AND ?2 LIMIT ?3")


class SqliteNodes:
    """The node reads (and the delete) of the backend's connection. Owns nothing: rows are
    found through the shared row cache of ``state``, payloads expanded by its path reader."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn
        self._lock = state.lock  # (the same lock for the connection's whole life)

    def _packed_snapshot(self) -> AbstractContextManager[None]:
        """A read snapshot for a read that goes from node rows to their packs (format 5): a
        gc of another connection may rebuild a pack under a new number between the two, and
        the rows' pack would be missing, which reads as damage."""
        return self._txn.snapshot() if self._state.packs else nullcontext()

    def get(self, id: NodeId) -> StoredNode | None:
        state = self._state
        with self._lock, state.errors(), self._packed_snapshot():
            row = state.db.execute(state.q(
                f"SELECT {NODE_COLS}, n.depth, p.id, p.depth FROM nodes n LEFT JOIN nodes p "
                f"ON p.seq = n.parent {LOOSE_JOIN} LEFT JOIN blobs b ON b.bid = n.bid "
                f"WHERE {by_id('n.id', '?1')}"),
                (bytes.fromhex(id),),
            ).fetchone()
            if row is None:
                return None
            type, encoded, body = state.paths.row(row[1], row[3], row[4], row[5], row[6], row[7],
                                                  row[8])
            # Checked against its id like every read: damage shows as an error, never as data.
            # (A parent row that is missing gives no parent id, and so fails the check.)
            if (row[2] is not None and row[9] is None) or not verify_node(row[1], row[9], body):
                raise StoreCorruptError(
                    f"store {state.path} is damaged: node {row[1].hex()[:12]} does not hash to its id"
                )
            # No hash covers the depth (an index): it must follow the parent's.
            up = row[10] + 1 if isinstance(row[10], int) else None
            if not isinstance(row[8], int) or row[8] != (1 if row[2] is None else up):
                raise StoreCorruptError(
                    f"store {state.path} is damaged: node {row[1].hex()[:12]} has a wrong depth index"
                )
            parent = state.hex(row[9]) if row[9] is not None else None
            return StoredNode(state.hex(row[1]), parent, row[8], type, encoded)

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        state = self._state
        with self._lock, state.errors():
            if not state.db.in_transaction:
                state.sync_cache()
            return {i for i in ids if state.seq_of(i) is not None}

    def recorded(self, ids: Sequence[NodeId]) -> dict[NodeId, float]:
        state = self._state
        out: dict[NodeId, float] = {}
        if not state.times:
            return out
        with self._lock, state.errors():
            for k in range(0, len(ids), 500):
                chunk = [bytes.fromhex(i) for i in ids[k : k + 500]]
                for key, ms in state.db.execute(
                        f"SELECT id, t FROM nodes WHERE {ids_in('id', len(chunk))} "
                        "AND t IS NOT NULL", in_params(chunk)):
                    if type(ms) is int:  # (anything else is damage, dated by the reflog)
                        out[state.hex(key)] = ms / 1000
        return out

    def chain(self, head: NodeId, limit: int | None = None) -> Chain:
        state = self._state
        with self._lock, state.errors():
            if not state.db.in_transaction:
                state.sync_cache()
            found = state.seq_of(head)
            if found is None:
                raise KeyError(head)
            seq, depth = found
            need = depth if limit is None else min(limit, depth)
            with self._packed_snapshot():
                types, datas, ids, base = state.paths.read(seq, need, need == depth)
            return Chain(types, datas, depth - need + 1,
                         state.hex(base) if base is not None else None, packed_ids=ids)

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        state = self._state
        lo = bytes.fromhex((prefix + "0" * 64)[:64])
        hi = bytes.fromhex((prefix + "f" * 64)[:64])
        with self._lock, state.errors():
            rows = state.db.execute(_PREFIX, (lo, hi, limit)).fetchall()
            if not rows and state.db.execute(
                "SELECT 1 FROM nodes NOT INDEXED WHERE id BETWEEN ? AND ? LIMIT 1", (lo, hi)
            ).fetchone():
                # Only on a miss (a mistyped id, usually): the table has what the index
                # does not, so the index is damaged. Saying "no such node" would be wrong.
                raise StoreCorruptError(
                    f"store {state.path} is damaged: its id index misses node {prefix}"
                )
        found = [state.hex(r[0]) for r in rows]
        if any(not i.startswith(prefix.lower()) for i in found):
            # The index gave a row outside the range it was asked for: it is damaged.
            raise StoreCorruptError(
                f"store {state.path} is damaged: its id index misses node {prefix}"
            )
        return found

    def iter_nodes(self) -> Iterator[StoredNode]:
        # A slice of rows per query: memory stays bounded whatever the store holds.
        state = self._state
        after = 0
        while True:
            with self._lock, state.errors():
                rows = state.db.execute(state.q(
                    "SELECT n.seq, n.id, p.id, n.depth, coalesce(l.data, n.data), b.data, "
                    "coalesce(l.codec, n.codec), b.codec, n.pack FROM nodes n "
                    "LEFT JOIN nodes p ON p.seq = n.parent LEFT JOIN loose l ON l.seq = n.seq "
                    "LEFT JOIN blobs b ON b.bid = n.bid WHERE n.seq > ? ORDER BY n.seq LIMIT ?"),
                    (after, SLICE),
                ).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            for r in rows:
                try:
                    with self._lock:
                        try:
                            type, encoded, _ = state.paths.row(r[1], r[4], r[5], r[6], r[7],
                                                               r[8], r[3])
                        except StoreCorruptError:
                            if r[8] is None:
                                raise
                            # A gc of another connection may have rebuilt its pack since
                            # the slice was read: the row as it is now says where it is.
                            with state.errors():
                                now = state.db.execute("SELECT pack FROM nodes WHERE seq = ?",
                                                       (r[0],)).fetchone()
                            if now is None:
                                continue  # removed since: it is not a node of the store now
                            if now[0] == r[8]:
                                raise
                            type, encoded, _ = state.paths.row(r[1], r[4], r[5], r[6], r[7],
                                                               now[0], r[3])
                except StoreCorruptError:
                    if r[8] is not None:
                        raise  # a damaged pack holds nothing to give: the error names it
                    # A loose row is given as it is: it will not hash to its id, and fsck
                    # reports it as such.
                    type, encoded = "", r[4] if isinstance(r[4], bytes) else b""
                yield StoredNode(
                    state.hex(r[1]), state.hex(r[2]) if r[2] is not None else None, r[3], type,
                    encoded,
                )

    def count_nodes(self) -> int:
        state = self._state
        with self._lock, state.errors():
            return int(state.db.execute("SELECT count(*) FROM nodes").fetchone()[0])

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        state = self._state
        with self._txn.write():
            db = state.db
            seqs = [found[0] for i in ids if (found := state.seq_of(i)) is not None]
            unindex(state, seqs)  # (read from the rows before they go)
            cur = db.executemany(
                f"DELETE FROM nodes WHERE {by_id('id', '?1')}", [(bytes.fromhex(i),) for i in ids]
            )
            lower_mark(state)
            # One seek in nodes_bid per payload (format 2), not a scan of nodes per payload.
            db.execute(
                "DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.bid = blobs.bid)"
            )
            db.execute("DELETE FROM path_bytes WHERE seq NOT IN (SELECT seq FROM nodes)")
            if state.packs:
                db.execute("DELETE FROM loose WHERE seq NOT IN (SELECT seq FROM nodes)")
            if state.packs:
                trim_packs(state, self._txn)
            state.known.clear()
            return cur.rowcount
