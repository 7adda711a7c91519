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

from ..errors import InvalidEventError
from ..node import Node, NodeId, check_ref_name, make_node
from ..repo.store import Store
from ..sending import derive_messages
from .common import ImportResult, land
from .provenance import Origin, Provenance

__all__ = ["STILL_WRITTEN", "Entry", "Tree", "build_tree", "land_tree"]


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
    #: Written before the conversation's first record (Claude's leading summaries): the main
    #: line only while the file holds nothing else, and then not (see ``Tree.has_main``).
    prelude: bool = False
    #: For a ``compaction/marker`` event: the key of the first record it keeps.
    first_kept: str | None = None


class Tree(msgspec.Struct):
    """The nodes of one file, its leaves (main first) and what was worked around."""

    nodes: dict[NodeId, Node]
    leaves: list[NodeId]
    problems: list[str]
    #: False when the file holds only prelude records so far: no leaf is its main line yet, so
    #: that the main session, once there is one, only ever fast-forwards as the file grows.
    has_main: bool = True


#: The words of the notes about a file still being written (its last reply, its last tool
#: call): what a watch, which looks again as the file grows, does not repeat at every look.
STILL_WRITTEN = ("may still be being written", "with no result yet")

_PROBLEM_WORDS = {
    "orphan-call": "tool call with no result",
    "pending-call": f"tool call {STILL_WRITTEN[1]} (the last in the file)",
    "orphan-result": "tool result with no call",
}


def build_tree(entries: Sequence[Entry], path: Path) -> Tree:
    """Link ``entries`` into nodes, parents first; a parent that is missing makes a root.

    Hostile files are survived, never followed: a parent cycle (or a record that is its own
    parent) is broken at its first record in the file, which becomes a root; a record whose
    data the store cannot hold (nested too deep, an integer past 64 bits) is reported and
    skipped, its children taking its place. No recursion: a chain of any length in any order
    is linked with an explicit stack.
    """
    problems: list[str] = []
    nodes: dict[NodeId, Node] = {}
    children: dict[NodeId, int] = {}
    # key -> node its children attach to; None for a skipped root record (children: roots)
    tip: dict[str, NodeId | None] = {}
    first: dict[str, NodeId] = {}  # key -> first node of that record (for first_kept)
    group: dict[str, str] = {}  # spliced key -> the key whose tip it moves
    line_of: dict[NodeId, int] = {}
    known = {e.key for e in entries if e.key is not None}
    waiting: dict[str, list[Entry]] = {}
    placed: set[int] = set()  # id() of the entries placed
    prelude_nodes: set[NodeId] = set()
    main_node: NodeId | None = None
    main_line = -1

    def place(e: Entry) -> None:
        nonlocal main_node, main_line
        parent: NodeId | None = None
        if e.parent is not None:
            if e.parent in tip:
                parent = tip[e.parent]
            else:
                problems.append(
                    f"{path}:{e.line}: parent {e.parent} is not in this file; "
                    "imported as a new root"
                )
        try:
            made = _record_nodes(e, parent, first)
        except InvalidEventError as exc:
            problems.append(f"{path}:{e.line}: {exc}; skipped")
            if e.key is not None:
                tip[e.key] = parent  # transparent: its children hang where it would have
            return
        for node in made:
            if node.id not in nodes:
                nodes[node.id] = node
                line_of[node.id] = e.line
            if node.parent is not None:
                children[node.parent] = children.get(node.parent, 0) + 1
            if e.key is not None and e.key not in first:
                first[e.key] = node.id
        if not made:
            return
        node_parent = made[-1].id
        if e.key is not None:
            tip[e.key] = node_parent
        if e.splice and e.parent is not None and parent is not None:
            owner = group.get(e.parent, e.parent)
            tip[owner] = tip[e.parent] = node_parent
            if e.key is not None:
                group[e.key] = owner
        if e.prelude:
            prelude_nodes.update(n.id for n in made)
        elif not e.side and e.line >= main_line:
            main_node, main_line = node_parent, e.line

    def place_with_children(e: Entry) -> None:
        # Children that waited for this record are placed after it, depth first, by a stack.
        stack = [e]
        while stack:
            cur = stack.pop()
            if id(cur) in placed:
                continue
            placed.add(id(cur))
            place(cur)
            if cur.key is not None:
                stack.extend(reversed(waiting.pop(cur.key, [])))

    for e in entries:
        if e.parent is not None and e.parent not in tip and e.parent in known:
            waiting.setdefault(e.parent, []).append(e)  # its parent comes later in the file
            continue
        place_with_children(e)
    # What still waits hangs on a cycle of parents: break each at its first record in the
    # file, which becomes a root, and place what hangs below it.
    stuck = sorted((e for group_ in waiting.values() for e in group_), key=lambda x: x.line)
    for e in stuck:
        if id(e) in placed:
            continue  # placed meanwhile, below an earlier cycle breaker
        problems.append(f"{path}:{e.line}: parent {e.parent} is part of a cycle of parents; "
                        "imported as a new root")
        e.parent = None
        place_with_children(e)
    leaves = sorted((i for i in nodes if children.get(i, 0) == 0), key=lambda i: line_of[i])
    if main_node is not None and children.get(main_node, 0) > 0:
        # The newest main-line record got children (a spliced record): follow them down.
        main_node = next((leaf for leaf in reversed(leaves) if _reaches(nodes, leaf, main_node)),
                         None)
    if main_node is None:  # only side records: the first that is not prelude stands in
        main_node = next((leaf for leaf in leaves if leaf not in prelude_nodes), None)
    if main_node is not None and main_node in leaves:
        leaves.remove(main_node)
        leaves.insert(0, main_node)
    return Tree(nodes, leaves, problems, has_main=main_node is not None or not leaves)


def _record_nodes(e: Entry, parent: NodeId | None, first: dict[str, NodeId]) -> list[Node]:
    """The chain of nodes of one record under ``parent``. Raises InvalidEventError."""
    made: list[Node] = []
    node_parent = parent
    for type, data in e.events:
        if type == "compaction/marker" and e.first_kept is not None:
            kept = first.get(e.first_kept)
            if kept is not None:
                data = {**data, "first_kept": kept}
        node = make_node(node_parent, type, data)
        made.append(node)
        node_parent = node.id
    return made


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
    owners: Provenance | None = None,
    force: bool = False,
) -> list[ImportResult]:
    """Land every leaf: the main one as ``base`` (or wherever this file's import already is),
    the others as ``MAIN/branch-N`` (or on the session of this file they extend).

    File problems and tool calls left without a result are reported on the first result.
    ``explicit`` (``--as``) and ``force`` apply to the main session only: a branch never takes
    over another session, it lands on a fresh name.
    """
    check_ref_name(base)
    source = str(path.resolve())
    owners = owners if owners is not None else Provenance(store)
    results: list[ImportResult] = []
    seen: set[tuple[str, str]] = set()
    all_problems = [*problems, *tree.problems]
    used: list[str] = []
    main = base
    with store.batch():
        for n, leaf in enumerate(tree.leaves, 1 if tree.has_main else 2):
            nodes = path_to(tree.nodes, leaf)
            derived = derive_messages(
                [x.type for x in nodes], [x.data for x in nodes], [x.id for x in nodes]
            )
            name = main if n == 1 else f"{main}/branch-{n}"
            for p in derived.problems:
                if (p.kind, p.tool_call_id) not in seen:
                    seen.add((p.kind, p.tool_call_id))
                    what = _PROBLEM_WORDS.get(p.kind, p.kind)
                    all_problems.append(f"{path}: {what}: {p.tool_call_id} (in {name})")
            result = land(store, name, nodes, origin=Origin(format, source, main=n == 1),
                          owners=owners, explicit_name=explicit and n == 1,
                          force=force and n == 1, meta=meta, file_nodes=tree.nodes,
                          exclude=used)
            used.append(result.session)
            if n == 1:
                main = result.session
            results.append(result)
    if not results:
        results.append(ImportResult(source, base, "empty", 0, 0))
    results[0].problems.extend(all_problems)
    return results
