"""Which refs reach a node: walked down from the node, not up from every ref.

A ref reaches a node when its target is the node or one of its descendants. The walk goes
from the node to its children through ``nodes_parent`` (format 7), so it reads what hangs
below the node (the rest of its session and the forks made after it), not the store; it stops
after ``bound`` rows, and says so. The refs at the rows it found are read through
``reflog_new``, each kept only while the entry is its ref's newest (its value).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...node import NodeId
from ..base import Ref, RefsReaching
from .sql import by_id
from .state import ConnState
from .txn import Transactions

__all__ = ["SqliteReaching"]

_MARKS = 500
_BELOW = (
    "WITH RECURSIVE d(seq) AS (SELECT seq FROM nodes WHERE {node} "
    "UNION ALL SELECT n.seq FROM nodes n JOIN d ON n.parent = d.seq LIMIT ?2) SELECT seq FROM d"
)
_REFS = (
    "SELECT l.ref, d.id, l.time, d.depth FROM reflog l JOIN nodes d ON d.seq = l.new "
    "WHERE l.new IN ({marks}) AND substr(l.ref, 1, ?) = ? "
    "AND l.n = (SELECT max(n) FROM reflog WHERE ref = l.ref)"
)


class SqliteReaching:
    """``refs_reaching`` on the backend's connection."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        """See :meth:`sesstree.store.base.Reaching.refs_reaching`."""
        state = self._state
        out: dict[NodeId, RefsReaching] = {}
        below = _BELOW.format(node=by_id("id", "?1"))
        with state.lock, state.errors(), self._txn.snapshot():
            self._txn.write_folds()
            db = state.db
            for id in dict.fromkeys(ids):
                seqs = [r[0] for r in db.execute(below, (bytes.fromhex(id), bound + 1))]
                if not seqs:
                    continue
                complete = len(seqs) <= bound
                refs: list[tuple[Ref, int]] = []
                for k in range(0, len(seqs[:bound]), _MARKS):
                    part = seqs[k:min(k + _MARKS, bound)]
                    for name, key, moved, depth in db.execute(
                            _REFS.format(marks=",".join("?" * len(part))), [*part, len(prefix), prefix]):
                        refs.append((Ref(name, state.hex(key), moved), int(depth)))
                refs.sort(key=lambda r: (-r[0].moved, r[0].name))
                out[id] = RefsReaching(refs, complete)
        return out
