"""Text drawing of the session tree, newest first, as ``git log --graph`` draws branches.

Two ways in: :func:`draw_graph` draws a list of nodes held in memory; :func:`stream_graph`
draws every node that a set of tips reaches, straight from a store, in bounded memory. It
walks the links alone (pairs of integers, newest first: no payload) to find where the tips'
paths meet, which gives a tree of *segments* (runs of nodes without a fork) as small as the
number of tips, and reads each segment's nodes a slice at a time while it draws. It walks
only as far down as the lines drawn so far need (a node is drawn once every link above it is
read), so ``-n 20`` reads what was written since its oldest line, not the store. Both draw
the same picture for the same nodes.

A label may be None: the node is folded (not drawn), its lanes are kept, so a fork at a
folded node still shows where it joins, above the next node drawn.

The streamed drawing has paths meet only where they share history as
:mod:`sesstree.repo.related` reads it: paths that part after an opener (the same ``turn/start`` on
each) each draw their own copy of it and meet at the node before it, or are separate trees.
:func:`draw_graph` (nodes without their types) joins every shared node; the two draw the same
picture when no paths part after an opener.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import msgspec

from ..node import Node, NodeId
from ..repo import related

if TYPE_CHECKING:
    from ..repo.scan import Links
    from ..repo.store import Store

__all__ = ["GraphNode", "Label", "draw_graph", "stream_graph"]

#: The labels of a slice of nodes of one path (newest first); None for a node not drawn.
Label = Callable[[Sequence[Node]], Sequence["str | None"]]

#: Nodes read per slice of a path while drawing.
_PIECE = 1_000


class GraphNode(msgspec.Struct, frozen=True):
    """One node to draw: its id, its parent (None for a root, or one outside the drawing),
    its label (None: folded, not drawn)."""

    id: NodeId
    parent: NodeId | None
    label: str | None


def _order(nodes: Sequence[GraphNode]) -> list[GraphNode]:
    """Nodes so that each subtree is contiguous and directly precedes its root's parent.

    This is a pre-order walk, reversed, that visits the subtree with the newest node last:
    the newest branch is drawn on top, and at every fork the lanes that meet are the rightmost
    ones, side by side, so they join with a plain ``|/``.
    """
    index = {n.id: i for i, n in enumerate(nodes)}
    children: dict[NodeId, list[GraphNode]] = {}
    roots: list[GraphNode] = []
    for n in nodes:
        if n.parent is not None and n.parent in index:
            children.setdefault(n.parent, []).append(n)
        else:
            roots.append(n)
    newest: dict[NodeId, int] = {}
    for n in reversed(nodes):  # input is parents-first, so children are done before parents
        newest[n.id] = max([index[n.id], *(newest[c.id] for c in children.get(n.id, ()))])
    out: list[GraphNode] = []
    stack = sorted(roots, key=lambda n: newest[n.id], reverse=True)
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(sorted(children.get(n.id, ()), key=lambda c: newest[c.id], reverse=True))
    out.reverse()
    return out


def draw_graph(nodes: Sequence[GraphNode], limit: int | None = None) -> list[str]:
    """The lines of the drawing. ``nodes`` must list parents before children."""
    present = {n.id for n in nodes}
    ordered = (
        n if n.parent is None or n.parent in present else GraphNode(n.id, None, n.label)
        for n in _order(nodes)
    )
    lines: list[str] = []
    for line in _draw(ordered):
        lines.append(line)
        if limit is not None and len(lines) >= limit:
            break
    return lines


def _draw(nodes: Iterable[GraphNode]) -> Iterator[str]:
    """The lines for nodes in drawing order; a node's parent is None when it is not drawn."""
    lanes: list[NodeId] = []  # what each lane waits for: the parent of the node drawn above
    started = False
    apart = False  # a new tree began since the last line drawn
    for n in nodes:
        cols = [i for i, wanted in enumerate(lanes) if wanted == n.id]
        if not cols:
            if not lanes and started:
                apart = True  # a separate tree: unrelated root, drawn apart
            lanes.append(n.id)
            col = len(lanes) - 1
        else:
            col = cols[0]
            for _ in cols[1:]:
                # Join the lane right of `col` into it; lanes further right move one left.
                yield "| " * col + "|/" + " /" * (len(lanes) - col - 2)
                del lanes[col + 1]
        if n.label is not None:
            if apart:
                yield ""
                apart = False
            cells = ["*" if j == col else "|" for j in range(len(lanes))]
            yield " ".join(cells) + " " + n.label
            started = True
        if n.parent is not None:
            lanes[col] = n.parent
        else:
            del lanes[col]


class _Segment:
    """A run of nodes without a fork: from ``top`` (a tip, or a node where paths meet) down
    to ``bottom``, ``length`` nodes; ``children`` are the segments that end on ``top``;
    ``next`` is the key of the node below ``bottom`` (None at a root)."""

    __slots__ = ("bottom", "children", "length", "newest", "next", "rooted", "state", "top")

    def __init__(self, top: int) -> None:
        self.top = top
        self.bottom = top
        self.length = 0
        self.children: list[_Segment] = []
        self.newest = top
        self.next: int | None = None
        self.rooted = False  # its bottom is a root (nothing of the drawing below it)
        self.state = _PENDING


# What became of a segment: still walked down (pending), joined into a segment below it
# (merged), complete down to a root and not drawn yet (finished), or drawn.
_PENDING, _MERGED, _FINISHED, _DRAWN = range(4)


class _Walk:
    """The links, newest first, merged into segments only as far as the drawing needs.

    A node can be drawn once every link above it has been read: then every path that reaches
    it is known. So the walk reads down to the oldest node of the lines asked for (what was
    written since), not to the bottom of the store, as ``git log --graph`` walks its commit
    queue; the segments it leaves behind are as few as the tips.
    """

    def __init__(self, links: Links, tips: set[int],
                 is_mark: Callable[[int], bool] = lambda key: True) -> None:
        self._rows = links.newest_first()
        self.is_mark = is_mark
        self._held: tuple[int, int | None] | None = None
        self._tips = sorted(tips, reverse=True)
        self._i = 0  # self._tips[self._i:] are the tips not reached yet
        self.waiting: dict[int, list[_Segment]] = {}  # key -> the segments it continues
        # Trees to draw next, the newest first (stale entries are skipped when popped).
        self._trees: list[tuple[int, int, _Segment]] = []
        self._made = 0

    def tips_left(self) -> bool:
        return self._i < len(self._tips)

    def _candidate(self, seg: _Segment) -> None:
        self._made += 1
        heapq.heappush(self._trees, (-seg.newest, self._made, seg))

    def next_tree(self) -> _Segment | int | None:
        """What to draw next: the tree holding the newest tip not drawn yet, as its newest
        segment known so far, or as that tip's key when the walk has not reached it."""
        while self._trees and self._trees[0][2].state not in (_PENDING, _FINISHED):
            heapq.heappop(self._trees)
        tip = self._tips[self._i] if self.tips_left() else None
        if self._trees and (tip is None or -self._trees[0][0] > tip):
            return heapq.heappop(self._trees)[2]
        return tip

    def until(self, x: int) -> tuple[bool, int | None, list[_Segment]]:
        """Read the links down to key ``x``, merging every other path on the way: whether
        ``x`` is stored, its parent's key and the segments that arrive at it."""
        while True:
            row: tuple[int, int | None] | None
            if self._held is not None:
                row, self._held = self._held, None
            else:
                row = next(self._rows, None)
            if row is None or row[0] < x:  # x is not stored (damage)
                self._held = row
                arriving = self.waiting.pop(x, [])
                for seg in arriving:
                    self._finish(seg)
                return False, None, arriving
            key, parent = row
            is_tip = self._take_tip(key)
            if key == x:
                return True, parent, self.waiting.pop(x, [])
            self._merge(key, parent, is_tip)

    def alone(self, tip: int) -> bool:
        """Whether ``tip`` is the last tip to draw and nothing else is being walked: then its
        drawing is its path, with no walk at all (the tip is taken if so)."""
        if self.waiting or self._i != len(self._tips) - 1 or self._tips[self._i] != tip:
            return False
        self._i += 1
        return True

    def wait(self, seg: _Segment, key: int | None) -> None:
        """``seg`` (the line being drawn) continues at ``key``."""
        seg.next = key
        if key is not None:
            self.waiting.setdefault(key, []).append(seg)

    def carry(self, segs: Sequence[_Segment], key: int, parent: int | None) -> None:
        """Each of ``segs`` takes node ``key`` as its own copy and continues at ``parent``
        (or ends there, a tree of its own, at a root)."""
        for seg in segs:
            seg.bottom = key
            seg.length += 1
            seg.next = parent
            if parent is None:
                self._finish(seg)
            else:
                self.waiting.setdefault(parent, []).append(seg)

    def _tip_segment(self, key: int) -> _Segment:
        seg = _Segment(key)
        self._candidate(seg)
        return seg

    def _take_tip(self, key: int) -> bool:
        tips = self._tips
        while self._i < len(tips) and tips[self._i] > key:
            self._i += 1  # (removed meanwhile: nothing to draw there)
        if self._i < len(tips) and tips[self._i] == key:
            self._i += 1
            return True
        return False

    def _merge(self, key: int, parent: int | None, is_tip: bool) -> None:
        arriving = self.waiting.pop(key, None)
        if arriving is None and not is_tip:
            return  # on no path being drawn
        if arriving is None:
            seg = self._tip_segment(key)
        elif len(arriving) > 1 and not self.is_mark(key):
            # Paths that part after an opener (the same turn/start on each) do not meet
            # there: each draws its own copy and goes on down to where they do meet.
            self.carry(arriving, key, parent)
            if is_tip:
                self.carry([self._tip_segment(key)], key, parent)
            return
        elif len(arriving) == 1:
            seg = arriving[0]
        else:
            seg = _Segment(key)
            seg.children = arriving
            seg.newest = max(a.newest for a in arriving)
            for a in arriving:
                a.state = _MERGED
            self._candidate(seg)
        self.carry([seg], key, parent)

    def _finish(self, seg: _Segment) -> None:
        seg.rooted = True
        seg.state = _FINISHED


def stream_graph(
    store: Store, tips: Sequence[NodeId], label: Label | None = None,
    *, lines: int | None = None, path_label: Callable[[NodeId], Label] | None = None,
) -> Iterator[str]:
    """The drawing of every node ``tips`` reach, line by line, in bounded memory.

    ``label`` gives the text of each node of a slice of nodes (a slice at a time, so that
    the refs at them can be looked up together). What is read follows what is drawn: the
    first lines read the links of the nodes newer than the oldest of them, and the nodes
    they show. ``lines``, when only the first lines will be drawn, sizes the first slice of
    each path read to them (then slices double); without it, slices are whole.

    ``path_label`` instead of ``label``: called with the top of each path as it is read, it
    gives the labeller of that path's slices, which may keep what it saw above (a fold)."""
    if (label is None) == (path_label is None):
        raise TypeError("give label or path_label")
    links = store.links()
    keys = links.keys(tips)
    first = _PIECE if lines is None else max(1, min(_PIECE, lines))
    if path_label is None:
        assert label is not None
        path_label = _same(label)
    paths = _Paths(store, path_label, first)
    marks: dict[int, bool] = {}

    def is_mark(key: int) -> bool:
        # Asked only where paths meet, and about the openers before such a place: a few
        # nodes per fork, each read once.
        if key not in marks:
            stored = store.get_node(links.ids([key])[key])
            marks[key] = stored is None or related.is_mark(stored.type)
        return marks[key]

    return _draw(_graph_nodes(links, _Walk(links, set(keys.values()), is_mark), paths))


def _same(label: Label) -> Callable[[NodeId], Label]:
    return lambda top: label


class _Paths:
    """Reads paths of nodes with their labels, a slice at a time (the first ``first``
    nodes, then slices twice as large, up to ``_PIECE``)."""

    def __init__(self, store: Store, label: Callable[[NodeId], Label], first: int) -> None:
        self.store = store
        self.label = label
        self.first = first

    def read(self, top: NodeId, count: int | None) -> Iterator[tuple[Node, str | None]]:
        """``count`` nodes (None: down to the root) of the path down from ``top``, newest
        first, with their labels."""
        label = self.label(top)
        left = count
        head: NodeId | None = top
        piece = self.first
        while head is not None and (left is None or left > 0):
            want = piece if left is None else min(piece, left)
            chain = self.store.chain(head, want)
            ids = chain.ids
            parents: list[NodeId | None] = [chain.base, *ids[:-1]]
            nodes = [Node(ids[i], parents[i], chain.types[i], chain.datas[i])
                     for i in range(len(ids) - 1, -1, -1)]
            yield from zip(nodes, label(nodes), strict=True)
            if left is not None:
                left -= len(nodes)
            head = chain.base
            piece = min(2 * piece, _PIECE)


def _graph_nodes(links: Links, walk: _Walk, paths: _Paths) -> Iterator[GraphNode]:
    """The nodes in drawing order: tree after tree, the newest first. In each tree, the
    newest tip's path is drawn down to the root as the walk confirms it; a segment that joins
    it is drawn whole (all of it is known by then), the newest first, just above the join."""
    while (start := walk.next_tree()) is not None:
        if isinstance(start, _Segment) and start.state == _FINISHED:
            yield from _subtree(links, start, paths)
            continue
        main: _Segment | None
        if isinstance(start, _Segment):
            main = start
            yield from _subtree(links, main, paths)
            x = main.next
        else:
            main, x = None, start
            if walk.alone(x):  # (`sess log --graph`: one session, read as one path)
                for node, text in paths.read(links.ids([x])[x], None):
                    yield GraphNode(node.id, node.parent, text)
                continue
        if x is None:
            continue
        line: Iterator[tuple[Node, str | None]] | None = None
        while x is not None:
            if main is not None and not walk.tips_left() and walk.waiting.keys() == {x} \
                    and walk.waiting[x] == [main]:
                # One path left and no tip below: the rest is that path, down to its root,
                # read with the nodes (no need to walk the links any further).
                walk.waiting.clear()
                if line is None:
                    line = paths.read(links.ids([x])[x], None)
                for node, text in line:
                    yield GraphNode(node.id, node.parent, text)
                break
            found, parent, arriving = walk.until(x)
            if not found:
                break  # damage: x is not stored; what joined it was drawn as rooted
            if len(arriving) > (main is not None) and not walk.is_mark(x):
                # Others hold x but part after it, an opener: they meet the line further
                # down, each with its own copy of x (see sesstree.repo.related).
                walk.carry([s for s in arriving if s is not main], x, parent)
                arriving = [main] if main is not None else []
            if len(arriving) > (main is not None):  # others join the line here
                for seg in sorted((s for s in arriving if s is not main),
                                  key=lambda s: s.newest, reverse=True):
                    yield from _subtree(links, seg, paths)
            if line is None:
                line = paths.read(links.ids([x])[x], None)
            node, text = next(line)
            yield GraphNode(node.id, node.parent if parent is not None else None, text)
            if main is None:
                main = _Segment(x)
            main.state = _DRAWN
            walk.wait(main, parent)
            x = parent
        if main is not None:
            main.state = _DRAWN


def _subtree(links: Links, top: _Segment, paths: _Paths) -> Iterator[GraphNode]:
    """A segment's children (newest subtree first), then its own nodes, newest first."""
    segs = list(_walk(top))
    tops = links.ids([s.top for s in segs])
    # (segment, expanded?) on an explicit stack: trees of sessions can be deep.
    stack: list[tuple[_Segment, bool]] = [(top, False)]
    while stack:
        seg, expanded = stack.pop()
        if not expanded:
            stack.append((seg, True))
            for child in sorted(seg.children, key=lambda c: c.newest):
                stack.append((child, False))
            continue
        seg.state = _DRAWN
        for i, (node, text) in enumerate(paths.read(tops[seg.top], seg.length)):
            last = i == seg.length - 1
            yield GraphNode(node.id, None if last and seg.rooted else node.parent, text)


def _walk(top: _Segment) -> Iterator[_Segment]:
    stack = [top]
    while stack:
        seg = stack.pop()
        yield seg
        stack.extend(seg.children)
