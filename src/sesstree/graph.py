"""Text drawing of the session tree, newest first, as ``git log --graph`` draws branches."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .node import NodeId

__all__ = ["GraphNode", "draw_graph"]


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
    lines: list[str] = []
    lanes: list[NodeId] = []  # what each lane waits for: the parent of the node drawn above
    for n in _order(nodes):
        cols = [i for i, wanted in enumerate(lanes) if wanted == n.id]
        if not cols:
            if not lanes and lines:
                lines.append("")  # a separate tree: unrelated root, drawn apart
            lanes.append(n.id)
            col = len(lanes) - 1
        else:
            col = cols[0]
            for _ in cols[1:]:
                # Join the lane right of `col` into it; lanes further right move one left.
                lines.append("| " * col + "|/" + " /" * (len(lanes) - col - 2))
                del lanes[col + 1]
        cells = ["*" if j == col else "|" for j in range(len(lanes))]
        lines.append(" ".join(cells) + " " + n.label)
        if n.parent is not None and n.parent in present:
            lanes[col] = n.parent
        else:
            del lanes[col]
        if limit is not None and len(lines) >= limit:
            break
    return lines

