"""Finding what the receiver lacks, as git does: walk back from each tip, ask which ids the
receiver has, in growing batches.

Every node has one parent, so the path back from a tip is a line, and a receiver that holds a
node holds everything before it (a node is stored only after its parent). The newest id on
the line that the receiver has is therefore the boundary: everything after it is missing,
nothing before it is. Batches grow four-fold (16, 64, 256, ...), so finding the boundary
takes a few round trips, and the ids exchanged stay within a small multiple of the nodes
missing, whatever the size of either store.

Two tips whose lines meet (a fork) are walked once: the walk that reaches a node another walk
already claimed stops there, and the chains are sent oldest first, so parents always travel
before their children.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from ..errors import RemoteError
from ..node import NodeId
from .peer import Walk

__all__ = ["FIRST_BATCH", "GROWTH", "MAX_BATCH", "MAX_WALKED", "Missing", "find_missing", "segments"]

FIRST_BATCH = 16
GROWTH = 4
#: Largest batch asked for; a server may answer with fewer ids (the walk then goes on).
MAX_BATCH = 65536
#: Most ids one negotiation accepts from the sender's walks, whatever depths it reports: a
#: peer that lists ids back forever ends in one error instead of growing memory (read when
#: called).
MAX_WALKED = 10_000_000


class Missing(msgspec.Struct):
    """What one tip needs sent: ``ids`` newest first; the oldest has depth ``oldest_depth``."""

    tip: NodeId
    ids: list[NodeId]
    oldest_depth: int


class _Line:
    __slots__ = ("batch", "depth", "done", "ids", "listed", "next", "tip")

    def __init__(self, tip: NodeId) -> None:
        self.tip = tip
        self.next: NodeId | None = tip
        self.batch = FIRST_BATCH
        self.ids: list[NodeId] = []
        self.depth = 0
        self.listed = 0
        self.done = False


def find_missing(
    tips: Sequence[NodeId],
    walk: Callable[[list[tuple[NodeId, int]]], list[Walk]],
    has: Callable[[list[NodeId]], set[NodeId]],
    known: set[NodeId] | None = None,
    peer: str = "the other store",
) -> list[Missing]:
    """The nodes the receiver lacks to hold every tip: one entry per tip that needs any,
    sorted so that sending them in order sends parents first.

    ``walk`` reads the sender's lines, ``has`` asks the receiver; ``known`` holds ids the
    receiver is known to have (the refs it advertised) without asking. ``peer`` names the
    sender in errors.

    Raises:
        RemoteError: the sender listed more ids than asked for, more back from a tip than the
            depth it reported for it, or more than MAX_WALKED in all.
    """
    known = known or set()
    claimed: set[NodeId] = set()
    lines = []
    walked = 0
    for tip in dict.fromkeys(tips):
        if tip not in known:
            lines.append(_Line(tip))
    while active := [line for line in lines if not line.done]:
        walks = walk([(line.next, line.batch) for line in active])  # type: ignore[misc]
        # Cut each batch at the first id known without asking, then ask about the rest at once.
        cut: list[list[NodeId]] = []
        for line, w in zip(active, walks, strict=True):
            if not line.ids and w.depth:
                line.depth = w.depth
            # Trust no count the sender gives: a line holds at most its depth's ids, and the
            # whole negotiation at most MAX_WALKED, so a lying sender ends in one error.
            line.listed += len(w.ids)
            walked += len(w.ids)
            if len(w.ids) > line.batch:
                raise RemoteError(f"{peer} listed {len(w.ids)} ids back from "
                                  f"{(line.next or line.tip)[:12]} "
                                  f"when asked for at most {line.batch}: refused")
            if line.listed > max(line.depth, 0):
                raise RemoteError(f"{peer} listed more than {line.depth} ids back from "
                                  f"{line.tip[:12]}, the depth it reported for it: refused")
            if walked > MAX_WALKED:
                raise RemoteError(f"{peer} listed more than {MAX_WALKED} ids to walk: refused "
                                  "(more than one fetch can hold)")
            ids = w.ids
            for k, i in enumerate(ids):
                if i in known:
                    ids = ids[:k]
                    line.done = True
                    break
            cut.append(ids)
            if w.base is None or len(line.ids) + len(w.ids) >= line.depth:
                # Reached the root (or the start is not stored); the depth bound also stops
                # a peer that would list ids back forever.
                line.done = True
            line.next = w.base
            line.batch = min(line.batch * GROWTH, MAX_BATCH)
        asked = [i for ids in cut for i in ids if i not in claimed]
        present = has(asked) if asked else set()
        for line, ids in zip(active, cut, strict=True):
            for i in ids:
                if i in present or i in claimed:
                    line.done = True
                    break
                claimed.add(i)
                line.ids.append(i)
    out = [Missing(line.tip, line.ids, line.depth - len(line.ids) + 1)
           for line in lines if line.ids]
    out.sort(key=lambda m: m.oldest_depth)
    return out


def segments(missing: Sequence[Missing], per_request: int) -> list[list[tuple[NodeId, int]]]:
    """The chains to read, oldest first, grouped into requests of at most ``per_request``
    nodes (a long chain is cut into pieces, each named by its newest id)."""
    groups: list[list[tuple[NodeId, int]]] = [[]]
    room = per_request
    for m in missing:
        oldest_first = m.ids[::-1]
        start = 0
        while start < len(oldest_first):
            if room == 0:
                groups.append([])
                room = per_request
            piece = oldest_first[start : start + room]
            groups[-1].append((piece[-1], len(piece)))
            room -= len(piece)
            start += len(piece)
    return [g for g in groups if g]
