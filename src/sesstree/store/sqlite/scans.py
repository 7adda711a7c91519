"""Reads of an SQLite store whose cost follows what they touch.

- ``list_refs_with_depth``: the refs and their targets' depths in one query (``sess branch``
  does not fetch and verify each session's head).
- ``refs_at``: the refs at a few nodes, found through the ``reflog_new`` index (labels of a
  ``log -n 20`` read a few rows, not every ref).
- ``iter_links`` / ``node_keys`` / ``ids_of_keys``: reachability from integers only.
- ``verify_nodes``: every node re-hashed, a slice of rows at a time (bounded memory).
- ``counts``: ``stats`` from index-only counts and the ``path_bytes`` index of each node's
  path size as JSONL, which ``counts`` itself brings up to date, a slice at a time, for the
  rows written since it last looked (so only the first ``stats`` of a large store reads every
  payload).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import msgspec

from ...node import SESSIONS, TAGS, NodeId
from ..base import Counts, Progress, Ref, ReflogEntry, ReflogStamp
from ..storable import storable
from .paths import verify_node
from .refs import RefReads
from .sql import LIST_REFS, ids_in, in_params
from .state import ConnState
from .txn import Transactions

__all__ = ["SLICE", "SqliteScans"]

#: Rows read per query by the streaming reads (bounded memory, and short read statements).
SLICE = 2_000
_MARKS = 500  # values per IN (...) list

_LIST_REFS_DEPTH = LIST_REFS.replace("SELECT l.ref, d.id, l.time", "SELECT l.ref, d.id, l.time, d.depth")
assert _LIST_REFS_DEPTH != LIST_REFS
# The newest entry of each ref is its value; the index on reflog(new) finds the entries that
# name a node, and only those that are still their ref's newest count.
_REFS_AT = (
    "SELECT l.ref, d.id, l.time FROM nodes d JOIN reflog l ON l.new = d.seq "
    "WHERE {ids} AND l.n = (SELECT max(n) FROM reflog WHERE ref = l.ref)"
)
_VERIFY = (
    "SELECT n.seq, n.id, n.parent, p.id, coalesce(l.data, n.data), b.data, "
    "coalesce(l.codec, n.codec), b.codec, n.pack, n.depth FROM nodes n "
    "LEFT JOIN nodes p ON p.seq = n.parent LEFT JOIN loose l ON l.seq = n.seq "
    "LEFT JOIN blobs b ON b.bid = n.bid "
    "WHERE n.seq > ? ORDER BY n.seq LIMIT ?"
)
# Count every session and tag: one index seek per ref name (names are few next to entries).
_LIVE_REFS = """
WITH RECURSIVE names(ref) AS (
    SELECT (SELECT ref FROM reflog ORDER BY ref LIMIT 1)
    UNION ALL
    SELECT (SELECT ref FROM reflog WHERE ref > names.ref ORDER BY ref LIMIT 1)
    FROM names WHERE names.ref IS NOT NULL
)
SELECT substr(names.ref, 1, 5), l.new FROM names
JOIN reflog l ON l.ref = names.ref
    AND l.n = (SELECT n FROM reflog WHERE ref = names.ref ORDER BY n DESC LIMIT 1)
WHERE names.ref IS NOT NULL
"""
# The refs under ?1 (?2: its length) that moved last, through reflog_time: entries newest
# first, each kept only if it is still its ref's newest (its value), a live one.
_NEWEST_REFS = (
    "SELECT l.ref, d.id, l.time FROM reflog l JOIN nodes d ON d.seq = l.new "
    "WHERE substr(l.ref, 1, ?2) = ?1 "
    "AND l.n = (SELECT n FROM reflog WHERE ref = l.ref ORDER BY n DESC LIMIT 1) "
    "ORDER BY l.time DESC, l.ref LIMIT ?3 OFFSET ?4"
)
# _LIVE_REFS gives the first five characters of each ref name (as many as TAGS has): its kind.
_SESSION_KIND = SESSIONS[:5]
assert len(TAGS) == 5
_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Decoder()


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SqliteScans:
    """The bounded reads of the backend's connection (see the module docstring). Owns
    nothing: the ``path_bytes`` index it keeps is written through ``txn``, and reflog rows
    are read as ``refs`` reads them."""

    def __init__(self, state: ConnState, txn: Transactions, refs: RefReads) -> None:
        self._state = state
        self._txn = txn
        self._refs = refs

    def list_refs_with_depth(self, prefix: str) -> list[tuple[Ref, int]]:
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        with self._state.lock, self._state.errors():
            self._txn.write_folds()  # (moves of an open batch, so that the log is the truth)
            rows = self._state.db.execute(_LIST_REFS_DEPTH, (prefix, len(prefix))).fetchall()
        return [(Ref(r[0], self._state.hex(r[1]), r[2]), int(r[3])) for r in rows]

    def refs_at(self, targets: Sequence[NodeId]) -> list[Ref]:
        wanted = list(dict.fromkeys(targets))
        found: dict[str, Ref] = {}
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            for k in range(0, len(wanted), _MARKS):
                part = [bytes.fromhex(t) for t in wanted[k:k + _MARKS]]
                for ref, key, moved in self._state.db.execute(
                    _REFS_AT.format(ids=ids_in("d.id", len(part))), in_params(part)
                ):
                    found[ref] = Ref(ref, self._state.hex(key), moved)
        return [found[k] for k in sorted(found)]

    def node_keys(self, ids: Sequence[NodeId]) -> dict[NodeId, int]:
        out: dict[NodeId, int] = {}
        unique = list(dict.fromkeys(ids))
        with self._state.lock, self._state.errors():
            for k in range(0, len(unique), _MARKS):
                part = [bytes.fromhex(i) for i in unique[k:k + _MARKS]]
                for key, seq in self._state.db.execute(
                    f"SELECT id, seq FROM nodes WHERE {ids_in('id', len(part))}", in_params(part)
                ):
                    out[self._state.hex(key)] = int(seq)
        return out

    def ids_of_keys(self, keys: Sequence[int]) -> dict[int, NodeId]:
        out: dict[int, NodeId] = {}
        unique = list(dict.fromkeys(keys))
        with self._state.lock, self._state.errors():
            for k in range(0, len(unique), _MARKS):
                part = unique[k:k + _MARKS]
                for seq, key in self._state.db.execute(
                    f"SELECT seq, id FROM nodes WHERE seq IN ({_marks(len(part))})", part
                ):
                    out[int(seq)] = self._state.hex(key)
        return out

    def iter_links(self) -> Iterator[tuple[int, int | None]]:
        below: int | None = None
        while True:
            with self._state.lock, self._state.errors():
                if below is None:
                    rows = self._state.db.execute(
                        "SELECT seq, parent FROM nodes ORDER BY seq DESC LIMIT ?", (SLICE,)
                    ).fetchall()
                else:
                    rows = self._state.db.execute(
                        "SELECT seq, parent FROM nodes WHERE seq < ? ORDER BY seq DESC LIMIT ?",
                        (below, SLICE),
                    ).fetchall()
            if not rows:
                return
            yield from rows
            below = rows[-1][0]

    def verify_nodes(self, progress: Progress | None = None) -> Iterator[str]:
        with self._state.lock, self._state.errors():
            top = int(self._state.db.execute("SELECT coalesce(max(seq), 0) FROM nodes").fetchone()[0])
        after = 0
        while True:
            with self._state.lock, self._state.errors():
                rows = self._state.db.execute(self._state.q(_VERIFY), (after, SLICE)).fetchall()
            if not rows:
                return
            for seq, key, parent_seq, parent, data, blob, codec, bcodec, pack, depth in rows:
                if parent_seq is not None and parent is None:
                    continue  # a missing parent: the link checks name it
                if pack is not None:
                    continue  # checked with its pack, once per pack (packcheck.py, in check())
                try:
                    with self._state.lock:
                        body = self._state.paths.row(key, data, blob, codec, bcodec, pack,
                                                     depth)[2]
                    intact = isinstance(key, bytes) and verify_node(key, parent, body)
                except Exception:  # damage of any kind is a finding, not a crash
                    intact = False
                if not intact:
                    shown = key.hex()[:12] if isinstance(key, bytes) else f"row {seq}"
                    yield f"node {shown} does not hash to its id (content damaged)"
            if not isinstance(rows[-1][0], int) or rows[-1][0] <= after:
                # A damaged table can list rows out of order: going on would read the same
                # slice for ever. SQLite's integrity check names the damage.
                yield f"nodes after row {after} are out of order (the table is damaged)"
                return
            after = int(rows[-1][0])
            if progress is not None:
                progress(min(after, top), top)

    def newest_refs(self, prefix: str, limit: int, offset: int = 0) -> list[Ref]:
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            rows = self._state.db.execute(_NEWEST_REFS, (prefix, len(prefix), limit, offset)).fetchall()
        return [Ref(r[0], self._state.hex(r[1]), r[2]) for r in rows]

    def reflog_stamp(self) -> ReflogStamp:
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            entries, newest = self._state.db.execute("SELECT count(*), max(time) FROM reflog").fetchone()
        return ReflogStamp(int(entries), float(newest or 0.0))

    def reflog_page(self, name: str, limit: int, offset: int = 0) -> tuple[list[ReflogEntry], int]:
        if not storable(name):  # a name no store can hold names nothing
            return [], 0
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            total = int(self._state.db.execute("SELECT count(*) FROM reflog WHERE ref = ?",
                                         (name,)).fetchone()[0])
            rows = self._state.db.execute(self._state.reflog_sql + " WHERE l.ref = ? ORDER BY l.n DESC "
                                    "LIMIT ? OFFSET ?", (name, limit, offset)).fetchall()
        return self._refs.entries(rows), total

    def reflog_times(self, name: str, targets: Sequence[NodeId]) -> dict[NodeId, float]:
        if not storable(name):  # a name no store can hold names nothing
            return {}
        wanted = list(dict.fromkeys(targets))
        out: dict[NodeId, float] = {}
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            for k in range(0, len(wanted), _MARKS):
                part = [bytes.fromhex(t) for t in wanted[k:k + _MARKS]]
                # Oldest first, so that the newest move to a node is the one kept.
                for key, time in self._state.db.execute(
                    "SELECT d.id, l.time FROM nodes d JOIN reflog l ON l.new = d.seq "
                    f"WHERE {ids_in('d.id', len(part))} AND l.ref = ? ORDER BY l.n",
                    [*in_params(part), name],
                ):
                    out[self._state.hex(key)] = float(time)
        return out

    def counts(self, progress: Progress | None = None) -> Counts:
        with self._state.lock, self._state.errors():
            db = self._state.db
            nodes = int(db.execute("SELECT count(*) FROM nodes").fetchone()[0])
            entries = int(db.execute("SELECT count(*) FROM reflog").fetchone()[0])
            sessions = tags = 0
            heads: list[int] = []
            for kind, new in db.execute(_LIVE_REFS):
                if new is None:
                    continue  # a deleted ref
                if kind == _SESSION_KIND:
                    sessions += 1
                    heads.append(int(new))
                elif kind == TAGS:
                    tags += 1
        logical = self._logical_bytes(heads, progress)
        return Counts(nodes, sessions, tags, entries, logical)

    def _logical_bytes(self, heads: list[int], progress: Progress | None) -> int:
        """The sum of the sessions' paths as JSONL lines, from the ``path_bytes`` index."""
        if self._has_path_bytes() and not self._state.read_only:
            self._update_path_bytes(progress)
            total = 0
            with self._state.lock, self._state.errors():
                for k in range(0, len(heads), _MARKS):
                    part = heads[k:k + _MARKS]
                    row = self._state.db.execute(
                        f"SELECT coalesce(sum(bytes), 0) FROM path_bytes "
                        f"WHERE seq IN ({_marks(len(part))})", part
                    ).fetchone()
                    total += int(row[0])
                # A head repeated by several sessions counts once per session.
                seen: dict[int, int] = {}
                for h in heads:
                    seen[h] = seen.get(h, 0) + 1
                for h, times in seen.items():
                    if times > 1:
                        row = self._state.db.execute(
                            "SELECT bytes FROM path_bytes WHERE seq = ?", (h,)
                        ).fetchone()
                        total += (times - 1) * (int(row[0]) if row else 0)
            return total
        # A read-only store (or one of an older format): one pass, sizes kept in memory.
        sizes: dict[int, int] = {}
        report = self._sizing(0, progress)
        for seq, parent, line in self._lines(0):
            sizes[seq] = line + (sizes.get(parent, 0) if parent is not None else 0)
            report(seq)
        report(None)
        return sum(sizes.get(h, 0) for h in heads)

    def _sizing(self, after: int, progress: Progress | None) -> Callable[[int | None], None]:
        """A ``report(seq)`` for a pass over the rows after ``after``: it calls ``progress``
        once a slice, and only for a pass of more than one slice (a usual ``stats`` catches
        up on a few rows, and draws nothing); ``report(None)`` marks the end."""
        with self._state.lock, self._state.errors():
            top = int(self._state.db.execute("SELECT coalesce(max(seq), 0) FROM nodes").fetchone()[0])
        if progress is None or top - after <= SLICE:
            return lambda seq: None
        mark = [after]

        def report(seq: int | None) -> None:
            if seq is None:
                progress(top - after, top - after)
            elif seq - mark[0] >= SLICE:
                mark[0] = seq
                progress(min(seq, top) - after, top - after)

        return report

    def _has_path_bytes(self) -> bool:
        with self._state.lock, self._state.errors():
            return self._state.db.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'path_bytes'"
            ).fetchone() is not None

    def _lines(self, after: int) -> Iterator[tuple[int, int | None, int]]:
        """(seq, parent seq, size as one JSONL line) of every row after ``after``, in slices."""
        while True:
            with self._state.lock, self._state.errors():
                rows = self._state.db.execute(self._state.q(
                    "SELECT n.seq, n.parent, coalesce(l.data, n.data), b.data, "
                    "coalesce(l.codec, n.codec), b.codec, n.id, n.pack, n.depth FROM nodes n "
                    "LEFT JOIN loose l ON l.seq = n.seq LEFT JOIN blobs b ON b.bid = n.bid "
                    "WHERE n.seq > ? "
                    "ORDER BY n.seq LIMIT ?"),
                    (after, SLICE),
                ).fetchall()
            if not rows:
                return
            for seq, parent, data, blob, codec, bcodec, key, pack, depth in rows:
                try:
                    with self._state.lock:
                        encoded = self._state.paths.row(key, data, blob, codec, bcodec, pack,
                                                        depth)[1]
                    line = len(_json.encode(_msgpack.decode(encoded))) + 1
                except Exception:  # damaged: fsck reports it; stats counts it as empty
                    line = 1
                yield int(seq), parent, line
            after = int(rows[-1][0])

    def _update_path_bytes(self, progress: Progress | None = None) -> None:
        """Bring ``path_bytes`` up to date with the rows written since it was last updated,
        one short write transaction per slice (a derived index: fsck-free, rebuilt if lost)."""
        with self._state.lock, self._state.errors():
            row = self._state.db.execute("SELECT coalesce(max(seq), 0) FROM path_bytes").fetchone()
        after = int(row[0])
        report = self._sizing(after, progress)
        batch: list[tuple[int, int]] = []
        known: dict[int, int] = {}
        for seq, parent, line in self._lines(after):
            report(seq)
            base = 0
            if parent is not None:
                if parent in known:
                    base = known[parent]
                else:
                    with self._state.lock, self._state.errors():
                        found = self._state.db.execute(
                            "SELECT bytes FROM path_bytes WHERE seq = ?", (parent,)
                        ).fetchone()
                    base = int(found[0]) if found else 0
            known[seq] = base + line
            batch.append((seq, base + line))
            if len(batch) >= SLICE:
                self._store_path_bytes(batch)
                batch = []
                known = dict(list(known.items())[-SLICE:])  # recent rows: most parents are here
        if batch:
            self._store_path_bytes(batch)
        report(None)

    def _store_path_bytes(self, rows: list[tuple[int, int]]) -> None:
        with self._txn.write():
            self._state.db.executemany("INSERT OR REPLACE INTO path_bytes VALUES (?, ?)", rows)
