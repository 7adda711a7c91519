"""Turning a transcript's records into a tree of nodes and landing each leaf as a session.

Every format module reduces its file to a list of :class:`Entry`: a source key (``uuid``, pi
``id``, or a line number for formats without ids), the key of its parent, and the events the
record becomes (first the raw record as an extension event, then the vocabulary events derived
from it). This module links them, reports dangling parents, finds the leaves and lands each one
with :func:`~sesstree.interop.common.land`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..events import derive_messages
from ..node import Node, NodeId, check_ref_name, make_node
from ..repo import Store
from .common import ImportResult, land

__all__ = ["Entry", "Tree", "build_tree", "land_tree"]


class Entry(msgspec.Struct):
    """One source record on its way into the tree."""

    line: int
    #: The record's own key; None when nothing can point at it.
    key: str | None
    #: The key of its parent; None for a root.
    parent: str | None
    #: ``(type, data)`` events, chained in this order.
    events: list[tuple[str, Any]]
    #: A record that has no place in the source tree (a title, a snapshot) is spliced in after
    #: its parent: later children of the parent hang below it, so it does not fork the path.
    splice: bool = False
    #: Kept apart from the main line (sub-agent sidechains): never the main session.
    side: bool = False
    #: For a ``compaction/marker`` event: the key of the first record it keeps.
    first_kept: str | None = None


class Tree(msgspec.Struct):
    """The nodes of one file, its leaves (main first) and what was worked around."""

    nodes: dict[NodeId, Node]
    leaves: list[NodeId]
    problems: list[str]


_PROBLEM_WORDS = {
    "orphan-call": "tool call with no result",
    "pending-call": "tool call with no result yet (the last in the file)",
    "orphan-result": "tool result with no call",
}


def build_tree(entries: Sequence[Entry], path: Path) -> Tree:
    """Link ``entries`` into nodes, parents first; a parent that is missing makes a root."""
    problems: list[str] = []
    nodes: dict[NodeId, Node] = {}
    children: dict[NodeId, int] = {}
    tip: dict[str, NodeId] = {}  # key -> node its children attach to
    first: dict[str, NodeId] = {}  # key -> first node of that record (for first_kept)
    group: dict[str, str] = {}  # spliced key -> the key whose tip it moves
    line_of: dict[NodeId, int] = {}
    known = {e.key for e in entries if e.key is not None}
    waiting: dict[str, list[Entry]] = {}
    main_node: NodeId | None = None
    main_line = -1

    def place(e: Entry) -> None:
        nonlocal main_node, main_line
        parent: NodeId | None = None
        if e.parent is not None:
            parent = tip.get(e.parent)
            if parent is None:
                problems.append(
                    f"{path}:{e.line}: parent {e.parent} is not in this file; "
                    "imported as a new root"
                )
        node_parent = parent
        for type, data in e.events:
            if type == "compaction/marker" and e.first_kept is not None:
                kept = first.get(e.first_kept)
                if kept is not None:
                    data = {**data, "first_kept": kept}
            node = make_node(node_parent, type, data)
            if node.id not in nodes:
                nodes[node.id] = node
                line_of[node.id] = e.line
            if node_parent is not None:
                children[node_parent] = children.get(node_parent, 0) + 1
            if e.key is not None and e.key not in first:
                first[e.key] = node.id
            node_parent = node.id
        if node_parent is None:
            return
        if e.key is not None:
            tip[e.key] = node_parent
        if e.splice and e.parent is not None and parent is not None:
            owner = group.get(e.parent, e.parent)
            tip[owner] = tip[e.parent] = node_parent
            if e.key is not None:
                group[e.key] = owner
        if not e.side and e.line >= main_line:
            main_node, main_line = node_parent, e.line
        for child in waiting.pop(e.key or "", []):
            place(child)

    for e in entries:
        if e.parent is not None and e.parent not in tip and e.parent in known:
            waiting.setdefault(e.parent, []).append(e)  # its parent comes later in the file
            continue
        place(e)
    for stuck in waiting.values():  # a cycle of parents: import what is left as roots
        for e in stuck:
            e.parent = None
            place(e)
    leaves = sorted((i for i in nodes if children.get(i, 0) == 0), key=lambda i: line_of[i])
    if main_node is not None and children.get(main_node, 0) > 0:
        # The newest main-line record got children (a spliced record): follow them down.
        main_node = next((leaf for leaf in reversed(leaves) if _reaches(nodes, leaf, main_node)),
                         None)
    if main_node is not None and main_node in leaves:
        leaves.remove(main_node)
        leaves.insert(0, main_node)
    return Tree(nodes, leaves, problems)


def _reaches(nodes: dict[NodeId, Node], leaf: NodeId, target: NodeId) -> bool:
    cur: NodeId | None = leaf
    while cur is not None:
        if cur == target:
            return True
        cur = nodes[cur].parent
    return False


def path_to(nodes: dict[NodeId, Node], leaf: NodeId) -> list[Node]:
    """The nodes from the root to ``leaf``, oldest first."""
    out: list[Node] = []
    cur: NodeId | None = leaf
    while cur is not None:
        node = nodes[cur]
        out.append(node)
        cur = node.parent
    out.reverse()
    return out


def land_tree(
    store: Store,
    tree: Tree,
    *,
    path: Path,
    base: str,
    explicit: bool,
    meta: dict[str, Any] | None,
    problems: list[str],
    format: str,
) -> list[ImportResult]:
    """Land every leaf: the main one as ``base``, the others as ``base/branch-N``.

    File problems and tool calls left without a result are reported on the first result.
    """
    check_ref_name(base)
    source = str(path.resolve())
    results: list[ImportResult] = []
    seen: set[tuple[str, str]] = set()
    all_problems = [*problems, *tree.problems]
    with store.batch():
        for n, leaf in enumerate(tree.leaves, 1):
            name = base if n == 1 else f"{base}/branch-{n}"
            nodes = path_to(tree.nodes, leaf)
            derived = derive_messages(
                [x.type for x in nodes], [x.data for x in nodes], [x.id for x in nodes]
            )
            for p in derived.problems:
                if (p.kind, p.tool_call_id) not in seen:
                    seen.add((p.kind, p.tool_call_id))
                    what = _PROBLEM_WORDS.get(p.kind, p.kind)
                    all_problems.append(f"{path}: {what}: {p.tool_call_id} (in {name})")
            result = land(store, name, nodes, source=source, explicit_name=explicit, format=format)
            if meta is not None and result.outcome in ("created", "fast-forward", "rewritten"):
                store.set_session_meta(result.session, meta)
            results.append(result)
    if not results:
        results.append(ImportResult(source, base, "empty", 0, 0))
    results[0].problems.extend(all_problems)
    return results
