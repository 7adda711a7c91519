"""Which refs reach a node, on PostgreSQL: walked down from the node, on the server.

A ref reaches a node when its target is the node or one of its descendants. One recursive
statement walks from the nodes asked about down through their children (``nodes_parent``,
format 7), all of them together, each row it reaches carrying the node it started from;
the walk stops after ``bound`` rows below them (PostgreSQL evaluates a recursive query only
as far as its reader asks), and the refs whose current target is a row reached come back in
the same round trip. A node asked about below another is walked from both (the walk is a
tree: each row has one parent, so nothing is reached twice from one start).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...node import NodeId
from ..base import Ref, RefsReaching
from .channel import Channel

__all__ = ["REACHING", "PgReaching"]

#: (%(ids)s: the nodes asked about; %(bound)s: the most rows read below them; %(p)s: the
#: ref prefix, %(np)s its length.) The first row counts what was walked; the others are
#: (start, ref, target id, moved, target depth).
REACHING = """
WITH RECURSIVE down(seq, origin) AS (
    SELECT seq, seq FROM nodes WHERE id = ANY(%(ids)s)
    UNION ALL
    SELECT n.seq, d.origin FROM down d JOIN nodes n ON n.parent = d.seq
),
walked AS MATERIALIZED (SELECT seq, origin FROM down LIMIT %(bound)s),
starts AS (SELECT seq, id FROM nodes WHERE id = ANY(%(ids)s))
SELECT NULL::bytea, NULL::text, NULL::bytea, NULL::float8, (SELECT count(*) FROM walked)::int
UNION ALL
SELECT s.id, r.name, n.id, r.moved, n.depth FROM walked w
JOIN starts s ON s.seq = w.origin
JOIN refs r ON r.target = w.seq AND left(r.name, %(np)s) = %(p)s
JOIN nodes n ON n.seq = w.seq
"""


class PgReaching:
    """``refs_reaching`` through the backend's channel."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        """See :meth:`sesstree.store.base.Reaching.refs_reaching`."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        # (The starts themselves are rows of the walk: the bound counts the rows below them.)
        params = {"ids": [bytes.fromhex(i) for i in wanted], "bound": bound + len(wanted) + 1,
                  "p": prefix, "np": len(prefix)}
        rows = self._channel.read(REACHING, params)
        walked = int(rows[0][4]) if rows else 0
        complete = walked < bound + len(wanted) + 1
        found: dict[NodeId, dict[str, tuple[Ref, int]]] = {}
        present = {NodeId(bytes(r[0]).hex()) for r in rows[1:]}
        for start, name, target, moved, depth in rows[1:]:
            refs = found.setdefault(NodeId(bytes(start).hex()), {})
            refs[str(name)] = (Ref(str(name), NodeId(bytes(target).hex()), float(moved)), int(depth))
        out: dict[NodeId, RefsReaching] = {}
        stored = present | self._stored(wanted, present)
        for id in wanted:
            if id not in stored:
                continue
            listed = sorted(found.get(id, {}).values(), key=lambda r: (-r[0].moved, r[0].name))
            out[id] = RefsReaching(listed, complete)
        return out

    def _stored(self, ids: list[NodeId], known: set[NodeId]) -> set[NodeId]:
        """Which of ``ids`` not in ``known`` are stored (a node no ref reaches has no row)."""
        rest = [bytes.fromhex(i) for i in ids if i not in known]
        if not rest:
            return set()
        return {NodeId(bytes(r[0]).hex()) for r in self._channel.read(
            "SELECT id FROM nodes WHERE id = ANY(%s)", (rest,))}
