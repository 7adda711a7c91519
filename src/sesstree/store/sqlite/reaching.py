"""Which refs reach a node: walked down from the node, not up from every ref.

A ref reaches a node when its target is the node or one of its descendants. The walk goes
from the nodes asked about to their children through ``nodes_parent`` (format 7), for all of
them at once in one recursive statement, so it reads what hangs below them (the rest of their
sessions and the forks made after them), each row once, not the store, and never a row per
level from Python (a chain of 5,000 rows below a hit is one statement, not 5,000). A walk that
reaches another node asked about stops there and takes that one's refs. The walk stops after
``bound`` rows, and says so. The refs at the rows it found are read through ``reflog_new``,
each kept only while the entry is its ref's newest (its value).

A search (:meth:`SqliteReaching.search_reaching`) starts below the newest ref's target
(nothing newer is reached) and walks its matches down as it finds them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ...node import NodeId
from ..base import IndexHit, Ref, RefsReaching, SearchQuery
from .sql import ids_in, in_params
from .state import ConnState
from .textquery import SqliteSearch
from .txn import Transactions

__all__ = ["Found", "SqliteReaching", "reaching"]

_MARKS = 500
# ``below``: (row, the node asked about whose walk reached it). A row that is another node
# asked about, or one whose refs are known already (``stops``), is kept (an edge to it) but
# not walked past: what is below it is covered by its own walk.
# (``UNION``, not ``UNION ALL``: a row two walks reach through a merge is read once a walk.)
_WALK = """
WITH RECURSIVE
  starts(seq) AS (SELECT value FROM json_each(?1)),
  stops(seq) AS (SELECT value FROM json_each(?5)),
  below(seq, origin) AS (
    SELECT seq, seq FROM starts
    UNION
    SELECT n.seq, b.origin FROM below b JOIN nodes n ON n.parent = b.seq
    WHERE b.seq = b.origin OR b.seq NOT IN stops
    LIMIT ?2
  )
SELECT b.origin, b.seq, l.ref, d.id, l.time, d.depth
FROM below b
LEFT JOIN reflog l ON l.new = b.seq AND substr(l.ref, 1, ?3) = ?4
  AND l.n = (SELECT max(n) FROM reflog WHERE ref = l.ref)
LEFT JOIN nodes d ON d.seq = l.new
WHERE l.ref IS NOT NULL OR (b.seq <> b.origin AND b.seq IN stops)
UNION ALL SELECT NULL, count(*), NULL, NULL, NULL, NULL FROM below
"""
# The newest row a ref under the prefix points at (the reflog_new index read from its end).
_NEWEST = (
    "SELECT l.new FROM reflog l WHERE l.new IS NOT NULL AND substr(l.ref, 1, ?1) = ?2 "
    "AND l.n = (SELECT max(n) FROM reflog WHERE ref = l.ref) ORDER BY l.new DESC LIMIT 1"
)
#: A node's refs by name (each with its target's depth), and whether its walk was whole.
Found = tuple[dict[str, tuple[Ref, int]], bool]


class SqliteReaching:
    """``refs_reaching`` and ``search_reaching`` on the backend's connection."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        """See :meth:`sesstree.store.base.Reaching.refs_reaching`. The nodes are walked down
        together: a node below several of them is read once, and a walk that reaches
        another of them stops there and takes that one's refs."""
        state = self._state
        with state.lock, state.errors(), self._txn.snapshot():
            self._txn.write_folds()
            db = state.db
            start: dict[int, NodeId] = {}
            wanted = list(dict.fromkeys(ids))
            for k in range(0, len(wanted), _MARKS):
                part = [bytes.fromhex(i) for i in wanted[k : k + _MARKS]]
                for key, seq in db.execute(
                    f"SELECT id, seq FROM nodes WHERE {ids_in('id', len(part))}", in_params(part)
                ):
                    start[int(seq)] = state.hex(key)
            known: dict[int, Found] = {}
            self.reach(list(start), prefix, bound, known)
        return {id: reaching(known[seq]) for seq, id in start.items()}

    def search_reaching(
        self,
        search: SqliteSearch,
        query: SearchQuery,
        limit: int,
        before: int | None,
        prefix: str,
        bound: int,
    ) -> list[tuple[IndexHit, RefsReaching]]:
        """See :meth:`sesstree.store.base.ReachingSearch.search_reaching`.

        A parent is always stored before its child, so its row number is smaller: nothing
        above the newest ref's target is reached by any ref. The search therefore starts
        below it, and an import nothing names that is newer than every session (or a branch
        rewound away at the newest end of the store) is not even read from the index. Below
        it, the matches are walked down a few at a time (as many as the page still wants),
        inside the search's snapshot, sharing what the walks found (``known``): a match no
        ref reaches is left out there, and the search goes on to the next."""
        known: dict[int, Found] = {}
        state = self._state
        with state.lock, state.errors(), self._txn.snapshot():
            self._txn.write_folds()
            top = state.db.execute(_NEWEST, (len(prefix), prefix)).fetchone()
        if top is None:
            return []  # no ref: nothing is reached
        before = int(top[0]) + 1 if before is None else min(before, int(top[0]) + 1)
        folds = [self._txn.write_folds]  # (once more, inside the search's snapshot)

        def keep(seqs: list[int]) -> set[int]:
            while folds:
                folds.pop()()
            self.reach(seqs, prefix, bound, known)
            return {s for s in seqs if known[s][0]}

        hits = search.search_nodes(query, limit, before, keep)
        return [(h, reaching(known[h.key])) for h in hits]

    def reach(self, seqs: Sequence[int], prefix: str, bound: int, known: dict[int, Found]) -> None:
        """Add to ``known`` the refs under ``prefix`` reaching each row of ``seqs`` (not
        already in it). A walk stops at a row ``known`` holds and takes its refs, so pages
        of hits asked about one after another read the rows below them once in all. The
        caller holds the connection's lock and a snapshot."""
        new = [s for s in dict.fromkeys(seqs) if s not in known]
        if not new:
            return
        direct: dict[int, list[tuple[Ref, int]]] = {s: [] for s in new}
        nested: dict[int, list[int]] = {s: [] for s in new}  # asked-about or known rows below
        complete = True
        limit = bound + len(new)  # (the walk's limit counts the starts themselves too)
        state = self._state
        for origin, seq, name, key, moved, depth in state.db.execute(
            _WALK, (json.dumps(new), limit, len(prefix), prefix, json.dumps([*new, *known]))
        ):
            if origin is None:
                complete = int(seq) < limit
            elif name is None:
                nested[int(origin)].append(int(seq))
            else:
                direct[int(origin)].append((Ref(name, state.hex(key), moved), int(depth)))
        for s in new:
            _closure(s, direct, nested, complete, known)


def _closure(
    seq: int,
    direct: dict[int, list[tuple[Ref, int]]],
    nested: dict[int, list[int]],
    complete: bool,
    done: dict[int, Found],
) -> None:
    """The refs of ``seq`` and of the rows below it that were asked about or known, each
    row's worked out once (``done``), deepest first, so a chain of hits costs its length,
    not its square."""
    todo = [seq]
    while todo:
        s = todo[-1]
        if s in done:
            todo.pop()
            continue
        pending = [n for n in nested[s] if n not in done]
        if pending:
            todo += pending
            continue
        todo.pop()
        refs: dict[str, tuple[Ref, int]] = {}
        whole = complete
        for n in nested[s]:
            below, below_whole = done[n]
            refs.update(below)
            whole = whole and below_whole
        refs.update((r.name, (r, d)) for r, d in direct[s])
        done[s] = (refs, whole)


def reaching(found: Found) -> RefsReaching:
    """What :meth:`SqliteReaching.reach` found for one row, as the seam gives it: the most
    recently moved first, ties by name."""
    refs, whole = found
    return RefsReaching(sorted(refs.values(), key=lambda r: (-r[0].moved, r[0].name)), whole)
