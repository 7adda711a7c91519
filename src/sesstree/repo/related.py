"""What two histories share, as a reader means it: the one rule behind ``diff``, ``log A..B``,
``log --graph`` and the web forest.

Content addressing makes equal events one node, and that is right: a re-imported file or a
re-sent prefix is stored once. But some events are written the same way whatever came before:
every agent turn opens with the same ``turn/start``, every step with the same ``step/start``,
and many sessions open with the same system prompt. Two sessions that were never forked from
each other then share their first nodes, and a fork made at the end of a turn shares the next
turn's ``turn/start``, written apart by each side. The stored graph is right about those nodes;
a reader is not told that two conversations met there.

The rule: two histories share their common prefix up to its last *mark*, any event but an
*opener* (``turn/start``, ``step/start``: the same at the start of every turn and step) or a
system prompt. Openers that both wrote after their last shared mark are two copies of the same
record, drawn and counted on each side; when no mark comes before the parting, the two are
unrelated. A history that is all of the other's prefix shares it whole (a session whose head
lies on another's path is on that path), and an identical one is the same history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["NOT_MARKS", "is_mark", "loose_nodes", "shared_depth", "shared_length"]

#: Event types written alike whatever came before, so equal nodes of them say nothing about
#: two histories meeting: the openers of a turn and of a step, and the system prompt.
NOT_MARKS = frozenset({"turn/start", "step/start", "system/message"})


def is_mark(type: str) -> bool:
    """True if an event of this type is a place a reader recognises (see the module)."""
    return type not in NOT_MARKS


def shared_length(types: Sequence[str], common: int, length_a: int, length_b: int) -> int:
    """How many events two histories share, given the types of their first ``common``
    events (their common prefix: ``types`` may be longer) and their lengths.

    ``common`` itself when one history is all of the common prefix; otherwise the common
    prefix up to its last mark (0: they are unrelated).
    """
    return shared_depth(common, length_a, length_b, lambda depth: types[depth - 1])


def shared_depth(common: int, length_a: int, length_b: int,
                 type_at: Callable[[int], str]) -> int:
    """:func:`shared_length` with the types read as needed: ``type_at(depth)`` is the type
    of the common prefix's event at ``depth`` (1 = the root); only the few from ``common``
    back to the last mark are asked for."""
    if common >= length_a or common >= length_b:
        return common
    k = common
    while k and not is_mark(type_at(k)):
        k -= 1
    return k


def loose_nodes(forks: Sequence[tuple[bytes, Sequence[bytes]]],
                type_of: Callable[[bytes], str]) -> set[bytes]:
    """The nodes that several histories hold but do not share, for views of many histories.

    ``forks`` are the nodes where the histories part (two or more of them go different ways
    after it), each with its path up to it (root first, itself last). A fork that is not a
    mark is loose, and so is each node before it back to the nearest mark: the histories that
    part there share only what comes before that mark. ``type_of`` gives a node's type; it is
    asked only about the few nodes before forks.
    """
    loose: set[bytes] = set()
    for node, path in forks:
        if node in loose or is_mark(type_of(node)):
            continue
        for raw in reversed(path):
            # A node already loose has its run back to the mark marked already (a node's id
            # names its whole path, so the run before it is the same on every path).
            if raw in loose or is_mark(type_of(raw)):
                break
            loose.add(raw)
    return loose
