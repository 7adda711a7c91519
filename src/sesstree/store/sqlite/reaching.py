"""Which refs reach a node: walked down from the node, not up from every ref.

A ref reaches a node when its target is the node or one of its descendants. The walk goes
from the nodes asked about to their children through ``nodes_parent`` (format 7), a level
per query for all of them at once, so it reads what hangs below them (the rest of their
sessions and the forks made after them), each row once, not the store; it stops after
``bound`` rows, and says so. The refs at the rows it found are read through
``reflog_new``, each kept only while the entry is its ref's newest (its value).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...node import NodeId
from ..base import Ref, RefsReaching
from .sql import ids_in, in_params
from .state import ConnState
from .txn import Transactions

__all__ = ["SqliteReaching"]

_MARKS = 500
_REFS = (
    "SELECT l.new, l.ref, d.id, l.time, d.depth FROM reflog l JOIN nodes d ON d.seq = l.new "
    "WHERE l.new IN ({marks}) AND substr(l.ref, 1, ?) = ? "
    "AND l.n = (SELECT max(n) FROM reflog WHERE ref = l.ref)"
)


class SqliteReaching:
    """``refs_reaching`` on the backend's connection."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        """See :meth:`sesstree.store.base.Reaching.refs_reaching`. The nodes are walked down
        together, a level per query: a node below several of them is read once, and a walk
        that reaches another of them stops there and takes that one's refs."""
        state = self._state
        with state.lock, state.errors(), self._txn.snapshot():
            self._txn.write_folds()
            db = state.db
            start: dict[int, NodeId] = {}
            wanted = list(dict.fromkeys(ids))
            for k in range(0, len(wanted), _MARKS):
                part = [bytes.fromhex(i) for i in wanted[k:k + _MARKS]]
                for key, seq in db.execute(f"SELECT id, seq FROM nodes WHERE {ids_in('id', len(part))}",
                                           in_params(part)):
                    start[int(seq)] = state.hex(key)
            # Which of the nodes asked about each row read lies below (shared, not copied:
            # a row with one parent takes its parent's set).
            below: dict[int, frozenset[int]] = {s: frozenset((s,)) for s in start}
            nested: dict[int, set[int]] = {s: set() for s in start}  # asked-about nodes below each
            frontier = dict(below)
            read = 0
            while frontier and read < bound:
                keys = list(frontier)
                found: dict[int, frozenset[int]] = {}
                for k in range(0, len(keys), _MARKS):
                    level = keys[k:k + _MARKS]
                    marks = ",".join("?" * len(level))
                    for seq, parent in db.execute(
                            f"SELECT seq, parent FROM nodes WHERE parent IN ({marks})", level):
                        if seq in start:  # another node asked about: its own walk covers below it
                            for origin in frontier[parent]:
                                nested[origin].add(seq)
                            continue
                        found[seq] = frontier[parent]
                read += len(found)
                below.update(found)
                frontier = found
            complete = not frontier
            direct: dict[int, list[tuple[Ref, int]]] = {s: [] for s in start}
            seqs = list(below)
            for k in range(0, len(seqs), _MARKS):
                at = seqs[k:k + _MARKS]
                for new, name, key, moved, depth in db.execute(
                        _REFS.format(marks=",".join("?" * len(at))), [*at, len(prefix), prefix]):
                    for origin in below[new]:
                        direct[origin].append((Ref(name, state.hex(key), moved), int(depth)))
        out: dict[NodeId, RefsReaching] = {}
        for seq, id in start.items():
            refs: dict[str, tuple[Ref, int]] = {}
            todo, seen = [seq], {seq}
            while todo:  # its own refs and those of the asked-about nodes below it
                s = todo.pop()
                refs.update((r.name, (r, d)) for r, d in direct[s])
                todo += [n for n in nested[s] if n not in seen]
                seen.update(nested[s])
            listed = sorted(refs.values(), key=lambda r: (-r[0].moved, r[0].name))
            out[id] = RefsReaching(listed, complete)
        return out
