"""Reads of a PostgreSQL store whose cost follows what they touch, and gc in short slices: a
part the backend owns (:class:`~sesstree.store.postgres.backend.PostgresBackend`), reading
through its :class:`~sesstree.store.postgres.channel.Channel`.

- ``list_refs_with_depth``: the refs and their targets' depths in one statement.
- ``refs_at``: the refs at a few nodes, through the ``reflog_new`` index (every move of a ref
  is logged with its new target, so a ref's current target is named by one of its entries).
- ``iter_links`` / ``node_keys`` / ``ids_of_keys``: reachability from integers.
- ``verify_nodes``: fsck's re-hash, a slice of rows (then of packs) per statement.
- ``counts`` / ``server_stats``: the server counts (``path_bytes`` is kept by every append).
- ``sweep``: gc. What is reachable is walked on the server (a recursive query over ``seq``
  and ``parent``: no payload leaves the server, and only the unreachable ids come back); the
  removal goes in chunks of :data:`CHUNK`, each a short transaction that holds writers back
  (SHARE locks) only while it looks at what they wrote since the walk and removes its chunk
  (and packs again what is left of the packs its nodes were in).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from ...node import SESSIONS, TAGS, NodeId, parse_symbolic
from ..base import Counts, Progress, Ref, ReflogEntry, ReflogStamp
from ..codec import CodecError
from ..meta_rows import HEAD
from ..storable import storable
from . import objects, refs
from .channel import Channel
from .codec import PgPayloads
from .conn import Conn
from .packer import PgPacker
from .packfsck import verify_packs
from .reads import PgReads, reflog_entries

__all__ = ["CHUNK", "SLICE", "GcPlan", "PgScans"]

#: Rows per statement of the streaming reads.
SLICE = 5_000
#: Nodes removed per gc transaction.
CHUNK = 500

_LIST_REFS_DEPTH = (
    "SELECT r.name, n.id, r.moved, n.depth FROM refs r JOIN nodes n ON n.seq = r.target "
    "WHERE left(r.name, %s) = %s ORDER BY r.name"
)
_REFS_AT = (
    "SELECT DISTINCT r.name, n.id, r.moved FROM nodes n JOIN reflog l ON l.new = n.seq "
    "JOIN refs r ON r.name = l.ref AND r.target = n.seq WHERE n.id = ANY(%s) ORDER BY r.name"
)
_NEWEST_REFS = (
    "SELECT r.name, n.id, r.moved FROM refs r JOIN nodes n ON n.seq = r.target "
    "WHERE left(r.name, %s) = %s ORDER BY r.moved DESC, r.name LIMIT %s OFFSET %s"
)
_REFLOG_STAMP = "SELECT count(*), coalesce(max(time), 0) FROM reflog"
# One ref's entries through its (ref, n) key: their count, and when it moved to nodes.
_REFLOG_COUNT = "SELECT count(*) FROM reflog WHERE ref = %s"
_REFLOG_TIMES = (
    "SELECT d.id, l.time FROM nodes d JOIN reflog l ON l.new = d.seq "
    "WHERE d.id = ANY(%s) AND l.ref = %s ORDER BY l.n"
)
_LINKS = "SELECT seq, parent FROM nodes WHERE seq < %s ORDER BY seq DESC LIMIT %s"
# Under the chunk's locks: what was written since the walk that could reach a candidate.
_NEW_PARENTS = "SELECT DISTINCT parent FROM nodes WHERE seq > %s AND parent IS NOT NULL"
_NAMED = (
    "SELECT new FROM reflog WHERE new = ANY(%(chunk)s) "
    "UNION SELECT target FROM refs WHERE target = ANY(%(chunk)s) "
    "UNION SELECT seq FROM nodes WHERE id = %(head)s"
)
_ANCESTORS = """
WITH RECURSIVE up(seq) AS (
    SELECT unnest(%s::int8[])
    UNION
    SELECT n.parent FROM up JOIN nodes n ON n.seq = up.seq WHERE n.parent IS NOT NULL
)
SELECT seq FROM up
"""
_REMOVE = """
WITH gone AS (DELETE FROM nodes WHERE seq = ANY(%(chunk)s) RETURNING seq, blob, pack),
unused AS (
    DELETE FROM blobs b WHERE b.hash IN (SELECT blob FROM gone WHERE blob IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.blob = b.hash
                    AND n.seq NOT IN (SELECT seq FROM gone))
)
SELECT seq, pack FROM gone
"""


class GcPlan:
    """What gc's walk found: the unreachable nodes by seq, the newest seq then, how many are
    kept."""

    __slots__ = ("ids", "kept", "max_seq")

    def __init__(self, ids: dict[int, NodeId], max_seq: int, kept: int) -> None:
        self.ids = ids
        self.max_seq = max_seq
        self.kept = kept


class PgScans:
    """The bounded reads and the gc of one PostgreSQL backend (see the module docstring)."""

    def __init__(self, channel: Channel, payloads: PgPayloads, reads: PgReads,
                 packer: PgPacker) -> None:
        self._channel = channel
        self._payloads = payloads
        self._reads = reads
        self._packer = packer
        self._read = channel.read

    def list_refs_with_depth(self, prefix: str) -> list[tuple[Ref, int]]:
        """Every ref under ``prefix`` with its target's depth: one statement."""
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        rows = self._read(_LIST_REFS_DEPTH, (len(prefix), prefix))
        return [(Ref(r[0], NodeId(bytes(r[1]).hex()), r[2]), int(r[3])) for r in rows]

    def refs_at(self, targets: Sequence[NodeId]) -> list[Ref]:
        """The refs at ``targets``, through the ``reflog_new`` index (inside a batch, from the
        refs themselves: the batch's moves are logged when it ends)."""
        wanted = list(dict.fromkeys(targets))
        with self._channel.lock:
            if self._channel.depth:
                # Inside a batch the moves are logged when it ends: ask the refs themselves.
                return [r for r in self._reads.list_refs("") if r.target in set(wanted)]
            rows = self._read(_REFS_AT, ([bytes.fromhex(t) for t in wanted],))
        return [Ref(r[0], NodeId(bytes(r[1]).hex()), r[2]) for r in rows]

    def node_keys(self, ids: Sequence[NodeId]) -> dict[NodeId, int]:
        """Each stored node's ``seq`` among ``ids``."""
        rows = self._read("SELECT id, seq FROM nodes WHERE id = ANY(%s)",
                          ([bytes.fromhex(i) for i in dict.fromkeys(ids)],))
        return {NodeId(bytes(r[0]).hex()): int(r[1]) for r in rows}

    def ids_of_keys(self, keys: Sequence[int]) -> dict[int, NodeId]:
        """The id of each ``seq`` among ``keys`` that is stored."""
        rows = self._read("SELECT seq, id FROM nodes WHERE seq = ANY(%s)",
                          (list(dict.fromkeys(keys)),))
        return {int(r[0]): NodeId(bytes(r[1]).hex()) for r in rows}

    def iter_links(self) -> Iterator[tuple[int, int | None]]:
        """Every node's ``seq`` and its parent's, newest first, :data:`SLICE` rows a statement."""
        below = 2**63 - 1
        while True:
            rows = self._read(_LINKS, (below, SLICE))
            if not rows:
                return
            for seq, parent in rows:
                yield int(seq), None if parent is None else int(parent)
            below = int(rows[-1][0])

    def verify_nodes(self, progress: Progress | None = None) -> Iterator[str]:
        """Re-hash every node against its id: the loose rows :data:`SLICE` a statement, then
        every pack (:func:`.packfsck.verify_packs`); one fault line per damage."""
        top, packed = (int(v) for v in self._read(
            "SELECT coalesce(max(seq), 0), (SELECT coalesce(sum(count), 0) FROM packs) "
            "FROM nodes")[0])
        total = top + packed
        after = 0
        while True:
            rows = self._read(objects.VERIFY, (after, SLICE), binary=True)
            if not rows:
                break
            for _seq, key, parent, parent_seq, row in rows:
                if parent_seq is not None and parent is None:
                    continue  # a missing parent: the link checks name it
                try:
                    body = self._payloads.body(bytes(row or b""))
                except CodecError:
                    body = b""  # a frame that cannot be read: damage, reported below
                if not objects.row_is_intact(
                    bytes(key), None if parent is None else bytes(parent), body
                ):
                    yield f"node {bytes(key).hex()[:12]} does not hash to its id (content damaged)"
            after = int(rows[-1][0])
            if progress is not None:
                progress(min(after, top), total)
        checked = [top]

        def done(n: int) -> None:
            checked[0] += n
            if progress is not None:
                progress(min(checked[0], total), total)

        yield from verify_packs(self._read, self._reads.packs, done)

    def newest_refs(self, prefix: str, limit: int, offset: int = 0) -> list[Ref]:
        """The refs under ``prefix`` that moved last, newest first, through ``refs_moved``."""
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        rows = self._read(_NEWEST_REFS, (len(prefix), prefix, limit, offset))
        return [Ref(r[0], NodeId(bytes(r[1]).hex()), r[2]) for r in rows]

    def reflog_stamp(self) -> ReflogStamp:
        """The reflog's entry count and newest time, from one aggregate."""
        entries, newest = self._read(_REFLOG_STAMP)[0]
        return ReflogStamp(int(entries), float(newest))

    def reflog_page(self, name: str, limit: int, offset: int = 0) -> tuple[list[ReflogEntry], int]:
        """A page of ref ``name``'s moves, newest first, and how many it has, through its
        (ref, n) key."""
        if not storable(name):  # a name no store can hold names nothing
            return [], 0
        with self._channel.lock:
            total = int(self._read(_REFLOG_COUNT, (name,))[0][0])
            rows = self._read(refs.REFLOG_PAGE, (name, limit, offset))
        return reflog_entries(rows), total

    def reflog_times(self, name: str, targets: Sequence[NodeId]) -> dict[NodeId, float]:
        """When ref ``name`` last moved to each of ``targets``, through ``reflog_new``."""
        if not storable(name):  # a name no store can hold names nothing
            return {}
        wanted = [bytes.fromhex(t) for t in dict.fromkeys(targets)]
        rows = self._read(_REFLOG_TIMES, (wanted, name))
        return {NodeId(bytes(r[0]).hex()): float(r[1]) for r in rows}

    def server_stats(self) -> dict[str, int]:
        """Counts and bytes, computed on the server: no node is read."""
        rows = self._read(objects.STATS, {"sessions": SESSIONS, "ns": len(SESSIONS),
                                          "tags": TAGS, "nt": len(TAGS)})
        nodes, sessions, tags, reflog, logical = (int(v) for v in rows[0])
        return {"nodes": nodes, "sessions": sessions, "tags": tags, "reflog_entries": reflog,
                "logical_bytes": logical, "physical_bytes": self._reads.physical_bytes()}

    def counts(self, progress: Progress | None = None) -> Counts:
        """The server counts (:meth:`server_stats`), as the store reports them."""
        # (Sizes are kept on every node as it is written: there is nothing to catch up on.)
        s = self.server_stats()
        return Counts(s["nodes"], s["sessions"], s["tags"], s["reflog_entries"],
                      s["logical_bytes"])

    def sweep(
        self, dry_run: bool, keep: NodeId | None, progress: Progress | None
    ) -> tuple[list[NodeId], int, int]:
        """Find (and unless ``dry_run`` remove) what nothing reaches; see the module docstring.

        Returns the unreachable ids (newest first), how many were removed, how many are kept.
        """
        plan = self.gc_walk(keep)
        if dry_run or not plan.ids:
            return list(plan.ids.values()), 0, plan.kept
        return self.gc_remove(plan, keep, progress)

    def gc_walk(self, keep: NodeId | None) -> GcPlan:
        """gc's first step: what one snapshot says nothing reaches (walked on the server)."""

        def walk(conn: Conn, replay: bool) -> GcPlan:
            with conn.transaction():
                if not self._channel.conn.in_batch:  # (a batch reads its own view)
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                detached = _gc_keep(conn, keep)
                marks = conn.execute(objects.GC_MARKS).fetchone()
                dead = conn.execute(objects.GC_DEAD, (detached,)).fetchall()
                total = conn.execute(objects.COUNT).fetchone()
            assert marks is not None and total is not None
            ids = {int(r[0]): NodeId(bytes(r[1]).hex()) for r in dead}
            return GcPlan(ids, int(marks[0]), int(total[0]) - len(ids))

        with self._channel.lock:
            self._channel.flush()
            return self._channel.run(walk)

    def gc_remove(
        self, plan: GcPlan, keep: NodeId | None, progress: Progress | None
    ) -> tuple[list[NodeId], int, int]:
        """gc's second step: remove the plan's nodes, a chunk per short transaction, keeping
        whatever was written since the walk reaches."""
        candidates = set(plan.ids)
        order = sorted(candidates, reverse=True)  # children first
        removed: list[NodeId] = []
        for k in range(0, len(order), CHUNK):
            chunk = order[k:k + CHUNK]

            def remove(conn: Conn, replay: bool, chunk: list[int] = chunk) -> list[int]:
                with conn.transaction():
                    conn.execute("LOCK TABLE nodes, blobs, refs, reflog, packs IN SHARE MODE")
                    head = _gc_keep(conn, keep)
                    saved = [int(r[0]) for r in conn.execute(_NEW_PARENTS, (plan.max_seq,))
                             if int(r[0]) in candidates]
                    saved += [int(r[0]) for r in conn.execute(
                        _NAMED, {"chunk": chunk, "head": head})]
                    if saved:
                        # Saved with its ancestors (rare: something named a node meanwhile).
                        for (seq,) in conn.execute(_ANCESTORS, (saved,)).fetchall():
                            candidates.discard(int(seq))
                    doomed = [s for s in chunk if s in candidates]
                    if not doomed:
                        return []
                    gone = conn.execute(_REMOVE, {"chunk": doomed}).fetchall()
                    # What is left of their packs is packed again, in this transaction.
                    self._packer.rebuild(conn, [r[1] for r in gone if r[1] is not None])
                    return [int(r[0]) for r in gone]

            with self._channel.lock:
                gone = self._channel.run(remove)
            removed += [plan.ids[s] for s in sorted(gone, reverse=True)]
            candidates.difference_update(gone)
            if progress is not None:
                progress(min(k + CHUNK, len(order)), len(order))
            time.sleep(0)  # let a waiting writer in between chunks
        return removed, len(removed), plan.kept + len(plan.ids) - len(removed)


def _gc_keep(conn: Conn, keep: NodeId | None) -> bytes | None:
    """The detached HEAD gc keeps: the caller's (a checkout's HEAD is kept on its own machine),
    or one a store of an older sesstree kept in its metadata."""
    if keep is not None:
        return bytes.fromhex(keep)
    head = conn.execute(refs.GET_META, (HEAD,)).fetchone()
    if head is not None and parse_symbolic(str(head[0])) is None:
        return bytes.fromhex(str(head[0]))
    return None
