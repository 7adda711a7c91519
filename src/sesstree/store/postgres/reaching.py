"""Which refs reach a node, on PostgreSQL: walked down from the node, on the server.

A ref reaches a node when its target is the node or one of its descendants. One recursive
statement walks from the nodes asked about down through their children (``nodes_parent``,
format 7), all of them together, each row it reaches carrying the node it started from;
the walk stops after ``bound`` rows below them (PostgreSQL evaluates a recursive query only
as far as its reader asks), and the refs whose current target is a row reached come back in
the same round trip. A walk that reaches another node asked about stops there and takes
that one's refs (so a page of hits along one path reads what hangs below them once, not once
per hit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...node import NodeId
from ..base import IndexHit, Ref, RefsReaching, SearchQuery
from .channel import Channel

__all__ = ["REACHING", "PgReaching"]

#: (%(ids)s: the nodes asked about; %(bound)s: the most rows read below them; %(p)s: the
#: ref prefix, %(np)s its length.) Rows (kind, start id, ...): 0, the rows walked; 1, a ref
#: at a row walked from the start (name, target id, moved, target depth); 2, another start
#: right below a row walked from this one (its id).
REACHING = """
WITH RECURSIVE
starts AS MATERIALIZED (SELECT seq, id FROM nodes WHERE id = ANY(%(ids)s)),
down(seq, origin) AS (
    SELECT seq, seq FROM starts
    UNION ALL
    SELECT c.seq, d.origin FROM down d
    CROSS JOIN LATERAL (SELECT seq FROM nodes WHERE parent = d.seq OFFSET 0) c
    WHERE NOT EXISTS (SELECT 1 FROM starts s WHERE s.seq = c.seq)
),
walked AS MATERIALIZED (SELECT seq, origin FROM down LIMIT %(bound)s)
SELECT 0, NULL::bytea, NULL::text, NULL::bytea, NULL::float8, (SELECT count(*) FROM walked)::int
UNION ALL
SELECT 1, s.id, r.name, n.id, r.moved, n.depth FROM walked w
JOIN starts s ON s.seq = w.origin
JOIN refs r ON r.target = w.seq AND left(r.name, %(np)s) = %(p)s
JOIN nodes n ON n.seq = w.seq
UNION ALL
SELECT 2, s.id, NULL, b.id, NULL, NULL FROM walked w
JOIN starts s ON s.seq = w.origin
JOIN nodes c ON c.parent = w.seq
JOIN starts b ON b.seq = c.seq
"""
# (Each step looks up the children of the rows it just reached through nodes_parent:
# `OFFSET 0` keeps the lookup a subquery, so the planner cannot hash the whole nodes table at
# every step, as it did without (8 s for a page of hits at 100,000 nodes; see objects.GC_DEAD).)


# The newest row a ref under the prefix points at (a range of the refs' primary key).
_NEWEST = "SELECT max(target) FROM refs WHERE name >= %(p)s AND substr(name, 1, %(np)s) = %(p)s"
Searching = Callable[[SearchQuery, int, int | None], list[IndexHit]]


class PgReaching:
    """``refs_reaching`` and ``search_reaching`` through the backend's channel."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def search_reaching(self, search: Searching, query: SearchQuery, limit: int,
                        before: int | None, prefix: str,
                        bound: int) -> list[tuple[IndexHit, RefsReaching]]:
        """See :meth:`sesstree.store.base.ReachingSearch.search_reaching`. A parent is always
        stored before its child (its ``seq`` is smaller), so nothing above the newest ref's
        target is reached: the search starts below it, and an import nothing names that is
        newer than every session is not read at all. Below it, each page of hits is walked
        down to its sessions and what no ref reaches is left out, page after page."""
        rows = self._channel.read(_NEWEST, {"p": prefix, "np": len(prefix)})
        if not rows or rows[0][0] is None:
            return []  # no ref: nothing is reached
        ceiling = int(rows[0][0]) + 1
        before = ceiling if before is None else min(before, ceiling)
        out: list[tuple[IndexHit, RefsReaching]] = []
        while len(out) < limit:
            want = limit - len(out)
            page = search(query, want, before)
            reach = self.refs_reaching([h.id for h in page], prefix, bound)
            out += [(h, reach[h.id]) for h in page if h.id in reach and reach[h.id].refs]
            if len(page) < want:
                break
            before = page[-1].key
        return out

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        """See :meth:`sesstree.store.base.Reaching.refs_reaching`."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        # (The starts themselves are rows of the walk: the bound counts the rows below them.)
        params = {"ids": [bytes.fromhex(i) for i in wanted], "bound": bound + len(wanted) + 1,
                  "p": prefix, "np": len(prefix)}
        rows = self._channel.read(REACHING, params)
        walked = next((int(r[5]) for r in rows if r[0] == 0), 0)
        complete = walked < bound + len(wanted) + 1
        direct: dict[NodeId, dict[str, tuple[Ref, int]]] = {}
        nested: dict[NodeId, set[NodeId]] = {}
        present: set[NodeId] = set()
        for kind, start, name, target, moved, depth in rows:
            if kind == 0:
                continue
            origin = NodeId(bytes(start).hex())
            present.add(origin)
            if kind == 2:  # another node asked about, below this one: its refs reach this one
                nested.setdefault(origin, set()).add(NodeId(bytes(target).hex()))
                continue
            direct.setdefault(origin, {})[str(name)] = (
                Ref(str(name), NodeId(bytes(target).hex()), float(moved)), int(depth))
        out: dict[NodeId, RefsReaching] = {}
        stored = present | self._stored(wanted, present)
        total = _closed(direct, nested)
        for id in wanted:
            if id not in stored:
                continue
            listed = sorted(total.get(id, {}).values(), key=lambda r: (-r[0].moved, r[0].name))
            out[id] = RefsReaching(listed, complete)
        return out

    def _stored(self, ids: list[NodeId], known: set[NodeId]) -> set[NodeId]:
        """Which of ``ids`` not in ``known`` are stored (a node no ref reaches has no row)."""
        rest = [bytes.fromhex(i) for i in ids if i not in known]
        if not rest:
            return set()
        return {NodeId(bytes(r[0]).hex()) for r in self._channel.read(
            "SELECT id FROM nodes WHERE id = ANY(%s)", (rest,))}


def _closed(direct: dict[NodeId, dict[str, tuple[Ref, int]]],
            nested: dict[NodeId, set[NodeId]]) -> dict[NodeId, dict[str, tuple[Ref, int]]]:
    """Each start's refs: its own and those of the starts below it, each start's computed
    once, children first (the starts below others form a forest: each row has one parent)."""
    total: dict[NodeId, dict[str, tuple[Ref, int]]] = {}
    for root in [*direct, *nested]:
        stack: list[tuple[NodeId, bool]] = [(root, False)]
        while stack:
            at, done = stack.pop()
            if at in total:
                continue
            if not done:
                stack.append((at, True))
                stack += [(b, False) for b in nested.get(at, ()) if b not in total]
                continue
            refs = dict(direct.get(at, {}))
            for b in nested.get(at, ()):
                refs.update(total.get(b, {}))
            total[at] = refs
    return total
