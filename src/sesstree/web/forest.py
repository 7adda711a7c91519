"""The forest of one page of sessions: shared prefixes drawn once, laid out in lanes.

Only the nodes that matter for the picture are drawn: each session's head, each root, and each
fork point (a node after which two of the page's sessions go different ways). A run of events
between two drawn nodes is one edge, labelled with how many events it holds. The rows come
newest subtree first and each fork's branches meet on the rightmost lanes, as
``git log --graph`` draws them; every row carries the lanes that pass it, so the browser only
draws lines (see ``graph.svg.html``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import msgspec

from ..node import NodeId
from ..repo.related import loose_nodes
from .catalog import SessionEntry
from .paths import ID_BYTES, PathCache

__all__ = ["Forest", "GraphRow", "Segment", "build_forest"]


class Segment(msgspec.Struct, frozen=True):
    """A line in a row's graph cell, from lane ``x1`` at ``y1`` to lane ``x2`` at ``y2``
    (0 = top of the row, 1 = middle, 2 = bottom)."""

    x1: int
    y1: int
    x2: int
    y2: int


class GraphRow(msgspec.Struct, frozen=True):
    """One drawn node and the lines around it."""

    id: NodeId
    parent: NodeId | None  # the drawn node below it on its path, if any
    depth: int  # events from the root to this node, itself included
    hidden: int  # events between it and ``parent`` that are not drawn
    lane: int
    segments: list[Segment]
    width: int  # lanes in use in this row
    sessions: list[str]  # sessions whose head this is
    tags: list[str]  # tags that point here
    fork: bool  # two or more of the drawn sessions go different ways after it
    root: bool
    moved: float | None  # newest move of a session that heads here
    separate: bool = False  # the first row of another tree (nothing joins it to the rows above)
    #: 0 for a node's first drawing, 1, 2, ... for the copies of a node that sessions hold but
    #: do not share (a ``turn/start`` each repeats; see :mod:`sesstree.repo.related`).
    copy: int = 0


class Forest(msgspec.Struct, frozen=True):
    """The rows and the widest row (to size the graph column)."""

    rows: list[GraphRow]
    lanes: int


class _Drawn:
    __slots__ = ("children", "copy", "depth", "fork", "id", "moved", "newest", "parent",
                 "sessions")

    def __init__(self, id: NodeId, depth: int) -> None:
        self.id = id
        self.depth = depth
        self.parent: _Drawn | None = None
        self.children: list[_Drawn] = []
        self.sessions: list[str] = []
        self.moved: float | None = None
        self.newest = 0.0
        self.fork = False
        self.copy = 0


def build_forest(paths: PathCache, sessions: Sequence[SessionEntry],
                 tags: dict[NodeId, list[str]],
                 type_of: Callable[[bytes], str] | None = None) -> Forest:
    """The forest of ``sessions`` (their paths read through ``paths``), with ``tags`` by node.

    Sessions meet only where they share history as :mod:`sesstree.repo.related` reads it: where
    they part after records of the run that each repeats (the same ``turn/start``), those
    records are drawn on each branch and the branches meet at the last message or turn end
    before them, or not at all. ``type_of`` gives a node's type by its raw id (asked only
    about the nodes before such a parting); without it, every shared node is shared.
    """
    split = []
    for s in sessions:
        path = paths.path(s.head, s.name)
        split.append([path[i * ID_BYTES : (i + 1) * ID_BYTES]
                      for i in range(len(path) // ID_BYTES)])
    successors = _successors(split)
    loose = _loose(split, successors, type_of) if type_of is not None else set()
    keyed = split
    if loose:  # the drawing is of keys: a loose node is one key per branch
        keyed = [_keys(ids, loose) for ids in split]
        successors = _successors(keyed)
    # A session's head is drawn on every path through it, so a session whose head lies on
    # another's trunk is drawn there, not on a branch of its own.
    heads = {keys[-1] for keys in keyed}
    drawn: dict[bytes, _Drawn] = {}
    copies: dict[bytes, int] = {}  # drawings of each node so far (a loose node has several)
    for s, ids, keys in zip(sessions, split, keyed, strict=True):
        n = len(keys)
        below: _Drawn | None = None
        for i, key in enumerate(keys):
            is_fork = len(successors.get(key, ())) > 1
            if i == 0 or i == n - 1 or is_fork or key in heads:
                node = drawn.get(key)
                if node is None:
                    raw = ids[i]
                    node = drawn[key] = _Drawn(NodeId(raw.hex()), i + 1)
                    node.copy = copies.get(raw, 0)
                    copies[raw] = node.copy + 1
                    node.fork = is_fork
                    if below is not None:
                        node.parent = below
                        below.children.append(node)
                below = node
        assert below is not None  # a session has at least one event
        below.sessions.append(s.name)
        below.moved = s.moved if below.moved is None else max(below.moved, s.moved)
    return _lay_out(list(drawn.values()), tags)


def _successors(paths: list[list[bytes]]) -> dict[bytes, set[bytes]]:
    successors: dict[bytes, set[bytes]] = {}
    for keys in paths:
        for a, b in itertools.pairwise(keys):
            nxt = successors.get(a)
            if nxt is None:
                successors[a] = {b}
            else:
                nxt.add(b)
    return successors


def _loose(split: list[list[bytes]], successors: dict[bytes, set[bytes]],
           type_of: Callable[[bytes], str]) -> set[bytes]:
    """The nodes the paths hold but do not share (see :func:`sesstree.repo.related.loose_nodes`)."""
    forks: list[tuple[bytes, list[bytes]]] = []
    seen: set[bytes] = set()
    for ids in split:
        for i, raw in enumerate(ids):
            if raw not in seen and len(successors.get(raw, ())) > 1:
                seen.add(raw)
                forks.append((raw, ids[: i + 1]))
    return loose_nodes(forks, type_of)


def _keys(ids: list[bytes], loose: set[bytes]) -> list[bytes]:
    """What each node of a path is drawn as: itself, or for a loose node, its copy on the
    branch that the first node after its loose run starts (or, if the path ends in the run,
    on a branch of the path's own)."""
    keys = list(ids)
    after = b"$" + ids[-1]
    for i in range(len(ids) - 1, -1, -1):
        raw = ids[i]
        if raw in loose:
            keys[i] = raw + after
        else:
            after = raw
    return keys


def _newest(node: _Drawn) -> float:
    """The newest activity under ``node`` (iteratively: a forest can be deep)."""
    order: list[_Drawn] = []
    stack = [node]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(n.children)
    for n in reversed(order):
        n.newest = max([n.moved or 0.0, *(c.newest for c in n.children)])
    return node.newest


def _lay_out(nodes: list[_Drawn], tags: dict[NodeId, list[str]]) -> Forest:
    roots = [n for n in nodes if n.parent is None]
    for r in roots:
        _newest(r)
    # A pre-order walk that visits the newest subtree last, reversed: children come before
    # their parent, and the newest branch is on top.
    order: list[_Drawn] = []
    stack = sorted(roots, key=lambda n: n.newest, reverse=True)
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(sorted(n.children, key=lambda c: c.newest, reverse=True))
    order.reverse()
    rows: list[GraphRow] = []
    # What each lane waits for: the parent of a node drawn above (by identity: a node that
    # sessions hold but do not share is drawn once per branch).
    lanes: list[_Drawn] = []
    widest = 1
    for n in order:
        before = list(lanes)
        cols = [i for i, wanted in enumerate(lanes) if wanted is n]
        segments: list[Segment] = []
        if cols:
            col = cols[0]
            for extra in reversed(cols[1:]):
                del lanes[extra]
        else:
            lanes.append(n)
            col = len(lanes) - 1
        if n.parent is not None:
            lanes[col] = n.parent
        else:
            del lanes[col]
        # Lines: lanes from above into the node, the node down to its parent, and the lanes
        # that pass by (they may shift left where a lane ended).
        after_index = _after_positions(before, n, col, n.parent is not None)
        for i, wanted in enumerate(before):
            if wanted is n:
                segments.append(Segment(i, 0, col, 1))
            else:
                segments.append(Segment(i, 0, after_index[i], 2))
        if n.parent is not None:
            segments.append(Segment(col, 1, col, 2))
        widest = max(widest, len(before), len(lanes), col + 1)
        rows.append(GraphRow(
            id=n.id, parent=n.parent.id if n.parent else None, depth=n.depth,
            hidden=n.depth - (n.parent.depth if n.parent else 0) - 1, lane=col,
            segments=segments, width=max(len(before), len(lanes), col + 1),
            sessions=sorted(n.sessions), tags=sorted(tags.get(n.id, [])),
            fork=n.fork, root=n.parent is None, moved=n.moved,
            separate=bool(rows) and not before, copy=n.copy,
        ))
    return Forest(rows, widest)


def _after_positions(before: list[_Drawn], node: _Drawn, col: int, keeps: bool) -> dict[int, int]:
    """Where each lane that passes the node is below it: lanes equal to ``node`` are gone
    (merged into ``col``), ``col`` itself is gone if the node has no drawn parent."""
    out: dict[int, int] = {}
    j = 0
    merged_first = True
    for i, wanted in enumerate(before):
        if wanted is node:
            if merged_first:
                merged_first = False
                if keeps:
                    j += 1
            continue
        out[i] = j
        j += 1
    return out
