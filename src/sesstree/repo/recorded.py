"""When each event happened: its own time where it carries one, else when the store recorded it.

The agent loop's events hold no wall-clock time; an importer's raw records (Claude Code's,
Codex's, pi's entries) hold the ``timestamp`` the tool wrote, and the messages derived from one
follow it. Where an event carries no time, the store says when it recorded it: the time it
keeps with each node (format 6: the commit that first wrote it; :func:`stored_dates`), or,
for a node written before it kept one, the reflog: the entry that moved the session onto it,
the earliest such (a later reset back and forth, a fast-forward to a node already written,
dates nothing new). Those times are the store's, not the event's, and a view says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone

from ..node import Node, NodeId
from ..store.base import ReflogEntry

__all__ = ["MOVES_ONLY", "event_time", "events_times", "reflog_dates", "stored_dates"]

#: Reflog reasons of moves that record no new node: a fork, a rename, a reset, a tag.
MOVES_ONLY = ("branch:", "reset:", "tag:")
#: How the store names a batch's reflog entry (see sesstree.repo.policy).
_BATCH = "(batch of "
#: How far past the clock an event's own time may lie (clocks differ a little) and still be
#: believed: an event cannot have happened after the store recorded it.
_SKEW = 86_400.0
#: Derived events that take the time of the timed record just before them.
_DERIVED = frozenset({"system/message", "user/message", "assistant/message", "tool/result",
                      "message", "compaction/marker", "context/message"})


def event_time(node: Node) -> float | None:
    """The time ``node`` itself carries (Unix seconds): a ``timestamp`` as ISO 8601 text or as
    seconds (milliseconds past the year 5138 are read as such); None when it has none, or one
    no clock could have written (not a number, before 1970, later than now): such a record
    is dated as one that carries none, by the store."""
    data = node.data
    raw = data.get("timestamp") if isinstance(data, dict) else None
    seconds: float | None = None
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        seconds = float(raw)
        if seconds > 1e11:
            seconds /= 1000
    elif isinstance(raw, str) and raw:
        try:
            when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            seconds = when.timestamp()
        except (ValueError, OverflowError):
            return None
    if seconds is None or not math.isfinite(seconds) or not 0 <= seconds <= time.time() + _SKEW:
        return None
    return seconds


def events_times(nodes: Sequence[Node]) -> dict[NodeId, float]:
    """The own time of each of ``nodes`` (a path, oldest first) that has one; the messages an
    importer derived from a timed record, which follow it, take its time."""
    out: dict[NodeId, float] = {}
    last: float | None = None
    for n in nodes:
        own = event_time(n)
        if own is not None:
            last = own
            out[n.id] = own
        elif last is not None and n.type in _DERIVED:
            out[n.id] = last
        else:
            last = None  # something else came between: the record's time stops here
    return out


def stored_dates(recorded: Callable[[Sequence[NodeId]], dict[NodeId, float]],
                 order: Sequence[Node], times: dict[NodeId, float]) -> bool:
    """Add to ``times`` when the store first recorded each node of ``order`` as it keeps it
    with the node (``recorded``: :meth:`~sesstree.store.base.ObjectStore.recorded`). True when
    every node has a time now; else the reflog dates the rest (:func:`reflog_dates`, which
    keeps the earlier of two times, so a node's own time stands)."""
    for id, when in recorded([n.id for n in order if n.id not in times]).items():
        if id not in times or when < times[id]:
            times[id] = when
    return all(n.id in times for n in order)


def reflog_dates(order: Sequence[Node], entries: Iterable[ReflogEntry],
                 times: dict[NodeId, float]) -> None:
    """Add to ``times`` when each node of ``order`` (a path, oldest first) was recorded, as
    ``entries`` say: an entry that moved a ref from ``old`` to ``new`` recorded every node
    after ``old`` up to ``new`` (one append, a batch, an import or a whole agent turn) at its
    time; the earliest entry wins; moves that record nothing (a reset, a fork) are skipped."""
    index = {n.id: i for i, n in enumerate(order)}
    for e in entries:
        if e.new is None or e.new not in index or e.reason.startswith(MOVES_ONLY):
            continue
        hi = index[e.new]
        lo = 0 if e.old is None else index[e.old] + 1 if e.old in index else hi
        for i in range(lo, hi + 1):
            node = order[i].id
            # A turn logged as one entry made its first node when it started. A batch's
            # moves all landed when it committed: its start dates nothing.
            first = i == lo and e.started is not None and _BATCH not in e.reason
            when = e.started if first and e.started is not None else e.time
            if node not in times or when < times[node]:
                times[node] = when
