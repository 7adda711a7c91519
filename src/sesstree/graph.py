"""Text drawing of the session tree, newest first, as ``git log --graph`` draws branches.

Two ways in: :func:`draw_graph` draws a list of nodes held in memory; :func:`stream_graph`
draws every node that a set of tips reaches, straight from a store, in bounded memory. It
first walks the links alone (pairs of integers, newest first: no payload) to find where the
tips' paths meet, which gives a tree of *segments* (runs of nodes without a fork) as small as
the number of tips; then it reads each segment's nodes a slice at a time while it draws. Both
draw the same picture for the same nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import msgspec

from .node import Node, NodeId
from .scan import Links

if TYPE_CHECKING:
    from .repo import Store

__all__ = ["GraphNode", "draw_graph", "stream_graph"]

#: Nodes read per slice of a segment while drawing.
_PIECE = 1_000


class GraphNode(msgspec.Struct, frozen=True):
    """One node to draw: its id, its parent (None for a root, or one outside the drawing)."""

    id: NodeId
    parent: NodeId | None
    label: str


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
    for n in nodes:
        cols = [i for i, wanted in enumerate(lanes) if wanted == n.id]
        if not cols:
            if not lanes and started:
                yield ""  # a separate tree: unrelated root, drawn apart
            lanes.append(n.id)
            col = len(lanes) - 1
        else:
            col = cols[0]
            for _ in cols[1:]:
                # Join the lane right of `col` into it; lanes further right move one left.
                yield "| " * col + "|/" + " /" * (len(lanes) - col - 2)
                del lanes[col + 1]
        cells = ["*" if j == col else "|" for j in range(len(lanes))]
        yield " ".join(cells) + " " + n.label
        started = True
        if n.parent is not None:
            lanes[col] = n.parent
        else:
            del lanes[col]


class _Segment:
    """A run of nodes without a fork: from ``top`` (a tip, or a node where paths meet) down
    to ``bottom``, ``length`` nodes; ``children`` are the segments that end on ``top``."""

    __slots__ = ("bottom", "children", "length", "newest", "rooted", "top")

    def __init__(self, top: int) -> None:
        self.top = top
        self.bottom = top
        self.length = 0
        self.children: list[_Segment] = []
        self.newest = top
        self.rooted = False  # its bottom is a root (nothing of the drawing below it)


def _segments(links: Links, tips: set[int]) -> list[_Segment]:
    """The segment trees of everything ``tips`` reach, as their bottom segments (roots)."""
    waiting: dict[int, list[_Segment]] = {}  # key -> the segments whose next node it is
    order = sorted(tips, reverse=True)
    i = 0  # order[i:] are the tips not reached yet
    roots: list[_Segment] = []
    for key, parent in links.newest_first():
        while i < len(order) and order[i] > key:
            i += 1  # (removed meanwhile: nothing to draw there)
        is_tip = i < len(order) and order[i] == key
        if is_tip:
            i += 1
        arriving = waiting.pop(key, None)
        if arriving is None and not is_tip:
            if not waiting and i == len(order):
                break
            continue
        if arriving is None:
            seg = _Segment(key)
        elif len(arriving) == 1:
            seg = arriving[0]
        else:
            seg = _Segment(key)
            seg.children = arriving
            seg.newest = max(a.newest for a in arriving)
        seg.bottom = key
        seg.length += 1
        if parent is None:
            seg.rooted = True
            roots.append(seg)
        else:
            waiting.setdefault(parent, []).append(seg)
        if i == len(order) and len(waiting) == 1:
            (segs,) = waiting.values()
            if len(segs) == 1:
                # One path left and no tip below: the rest is that path, down to its root,
                # read with the nodes (no need to walk the links any further).
                segs[0].length = -1
                segs[0].rooted = True
                roots.append(segs[0])
                waiting.clear()
                break
    for segs in waiting.values():  # a parent that is not stored (damage): draw what there is
        for seg in segs:
            seg.rooted = True
            roots.append(seg)
    return roots


def stream_graph(
    store: Store, tips: Sequence[NodeId], label: Callable[[Sequence[Node]], list[str]],
) -> Iterator[str]:
    """The drawing of every node ``tips`` reach, line by line, in bounded memory.

    ``label`` gives the text of each node of a slice of nodes (a slice at a time, so that
    the refs at them can be looked up together)."""
    links = Links(store.backend)
    keys = links.keys(tips)
    roots = _segments(links, set(keys.values()))
    tops = links.ids([s.top for s in _walk(roots)])
    return _draw(_nodes(store, sorted(roots, key=lambda s: s.newest, reverse=True), tops, label))


def _walk(segs: list[_Segment]) -> Iterator[_Segment]:
    stack = list(segs)
    while stack:
        seg = stack.pop()
        yield seg
        stack.extend(seg.children)


def _nodes(
    store: Store, roots: list[_Segment], tops: dict[int, NodeId],
    label: Callable[[Sequence[Node]], list[str]],
) -> Iterator[GraphNode]:
    """Each segment's children (newest subtree first), then its own nodes, newest first."""
    # (segment, expanded?) on an explicit stack: trees of sessions can be deep.
    stack: list[tuple[_Segment, bool]] = [(s, False) for s in reversed(roots)]
    while stack:
        seg, expanded = stack.pop()
        if not expanded:
            stack.append((seg, True))
            for child in sorted(seg.children, key=lambda c: c.newest):
                stack.append((child, False))
            continue
        yield from _segment_nodes(store, seg, tops[seg.top], label)


def _segment_nodes(
    store: Store, seg: _Segment, top: NodeId, label: Callable[[Sequence[Node]], list[str]],
) -> Iterator[GraphNode]:
    left = seg.length  # -1: down to the root
    head: NodeId | None = top
    while head is not None and left != 0:
        want = _PIECE if left < 0 else min(_PIECE, left)
        chain = store.chain(head, want)
        ids = chain.ids
        parents: list[NodeId | None] = [chain.base, *ids[:-1]]
        nodes = [Node(ids[i], parents[i], chain.types[i], chain.datas[i])
                 for i in range(len(ids) - 1, -1, -1)]
        for node, text in zip(nodes, label(nodes), strict=True):
            last = left == 1 or (left < 0 and node.parent is None)
            yield GraphNode(node.id, None if last and seg.rooted else node.parent, text)
            if left > 0:
                left -= 1
        head = chain.base
