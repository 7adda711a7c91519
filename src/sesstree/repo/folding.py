"""A session as a person reads it: the conversation, with each agent turn's bookkeeping folded.

An agent turn records a dozen events for two or three messages (``turn/start``,
``step/start``, ``usage``, ``tool/call``, streamed ``assistant/chunk`` records, ``step/end``,
``turn/end``). Every reading view (``sess log``, ``sess log --graph``, the web session and diff
pages) shows the messages and one row per turn that sums the rest up, by the one rule here:
:func:`fold_turns` for a path held in memory, :class:`PathFolder` for a path read newest first
a slice at a time (the graph, which streams). Each view unfolds with the same switch
(``--all-events``, ``?all-events=1``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import msgspec

from ..node import Node, NodeId

__all__ = ["CONVERSATION_TYPES", "PathFolder", "Row", "TurnStats", "fold_or_every", "fold_turns",
           "is_shown", "turn_start_index"]

#: The events shown folded; the rest is the loop's bookkeeping, summed into its turn's row.
CONVERSATION_TYPES = frozenset({
    "system/message", "user/message", "assistant/message", "tool/result", "message",
    "steering/message", "context/message", "compaction/marker", "error",
})


class TurnStats(msgspec.Struct):
    """What the bookkeeping of one agent turn says, summed."""

    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish: str | None = None  # the last step's finish_reason
    reason: str | None = None  # why the turn ended (turn/end's reason kind); None: unfinished
    seconds: float | None = None  # from the reflog: when turn/start and turn/end were recorded
    retries: int = 0

    def line(self) -> str:
        """``turn: answer (stop), 2 steps, 335 in/35 out tokens, 4.2 s``."""
        parts = [(self.reason or "unfinished")
                 + (f" ({self.finish})" if self.finish and self.finish != self.reason else "")]
        if self.steps:
            parts.append(f"{self.steps} step{'s' if self.steps != 1 else ''}")
        if self.prompt_tokens or self.completion_tokens:
            parts.append(f"{self.prompt_tokens} in/{self.completion_tokens} out tokens")
        if self.seconds is not None:
            parts.append(f"{self.seconds:.1f} s")
        if self.retries:
            parts.append(f"{self.retries} retr{'y' if self.retries == 1 else 'ies'}")
        return "turn: " + ", ".join(parts)


class Row(msgspec.Struct):
    """One row of a folded view: an event, or (``turn`` set) a turn's summary at its last
    event (at its ``turn/start`` for a turn that has not ended)."""

    node: Node
    turn: TurnStats | None = None


#: The bookkeeping a turn's row sums (the rest of it only needs to be passed over).
_COUNTED = frozenset({"step/end", "usage", "error"})


def is_shown(node: Node) -> bool:
    """Whether ``node`` has a row of its own when folded: a message, a note such as a
    compaction, an error other than a retry the turn's row counts, a model call that failed."""
    data = node.data
    if node.type == "step/end" and isinstance(data, dict):
        # A model call recorded cut short or refused (``sess proxy`` records no turns: its
        # steps are the calls) stands out whatever the view.
        status = data.get("status")
        return data.get("incomplete") is True or (
            isinstance(status, int) and not isinstance(status, bool) and status >= 400)
    if node.type not in CONVERSATION_TYPES:
        return False
    return not (node.type == "error" and isinstance(data, dict) and data.get("kind") == "retry")


def fold_turns(nodes: Sequence[Node], times: Mapping[NodeId, float]) -> list[Row]:
    """The rows of ``nodes`` (a path, oldest first) folded, oldest first.

    Messages are kept; turn/step/usage/chunk/tool-call events are summed into a row for the
    turn, placed at its ``turn/end`` (or, for a turn that has not ended, at its
    ``turn/start``). A ``turn/end`` whose start is older than ``nodes`` (a range, one side
    of a diff) sums what ``nodes`` hold of its turn. Events of other types (an importer's raw
    records, extensions) are bookkeeping too. ``times`` (when each node was recorded, where
    known) gives a turn its duration.
    """
    index = {n.id: i for i, n in enumerate(nodes)}
    rows: list[Row] = []
    # Before the first turn/start, the events may belong to a turn that began further back.
    turn: TurnStats | None = TurnStats()
    start: Node | None = None
    for node in nodes:
        data = node.data if isinstance(node.data, dict) else {}
        kind = node.type
        if kind == "turn/start":
            if turn is not None and start is not None:
                rows.append(Row(start, turn))  # the previous turn never ended
            turn, start = TurnStats(), node
        elif kind == "turn/end" and turn is not None:
            reason = data.get("reason")
            turn.reason = str(reason.get("kind", "?")) if isinstance(reason, dict) else "ended"
            # Known only when the reflog recorded the start and the end apart: one entry for
            # the whole turn (a batch, an import) says when it ended, not how long it took.
            if start is not None and start.id in times and \
                    times[start.id] < times.get(node.id, 0.0):
                turn.seconds = times[node.id] - times[start.id]
            rows.append(Row(node, turn))
            turn, start = None, None
        elif turn is not None and kind == "step/end":
            turn.steps = max(turn.steps, _int(data.get("step")))
            if isinstance(data.get("finish_reason"), str):
                turn.finish = data["finish_reason"]
            if is_shown(node):
                rows.append(Row(node))
        elif turn is not None and kind == "usage" and isinstance(data.get("usage"), dict):
            usage = data["usage"]
            turn.prompt_tokens += _int(usage.get("prompt_tokens"))
            turn.completion_tokens += _int(usage.get("completion_tokens"))
        elif kind == "error" and data.get("kind") == "retry":
            if turn is not None:
                turn.retries += 1
        elif is_shown(node):
            rows.append(Row(node))
    if turn is not None and start is not None:
        # A turn still running, or cut off: its row sits where it started (its last event
        # may be a message, shown on its own row).
        rows.append(Row(start, turn))
    rows.sort(key=lambda r: index[r.node.id])  # an unfinished turn's row was added late
    return rows


def fold_or_every(nodes: Sequence[Node], times: Mapping[NodeId, float]) -> list[Row]:
    """:func:`fold_turns`, or every event where all of ``nodes`` fold away (a range, a side
    of a diff, a page inside one turn begun before it): a view that holds events never
    comes out empty."""
    return fold_turns(nodes, times) or [Row(n) for n in nodes]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def turn_start_index(nodes: Sequence[Node]) -> int | None:
    """Where to begin showing ``nodes`` (a window of a path, oldest first, that may begin
    mid-turn) so that it begins with a whole turn: the index of its first ``turn/start``, 0
    when what comes before that is messages standing alone (no bookkeeping of a turn begun
    further back), None when it holds no ``turn/start`` and more than messages (it may lie
    inside one turn: what lies behind it says)."""
    for i, n in enumerate(nodes):
        if n.type == "turn/start":
            return 0 if all(is_shown(m) for m in nodes[:i]) else i
    return 0 if all(is_shown(m) for m in nodes) else None


class PathFolder:
    """Folds one path read newest first, a slice at a time, for a drawing that streams.

    Each node's row depends only on the path below it (a ``turn/end`` sums its turn, read
    back to its ``turn/start``) except a ``turn/start``'s, which is a row only when its turn
    did not end: what lay above it on this read says so. ``keep`` (the tips: where a ref
    points) always has a row; ``older(id, n)`` reads the ``n`` nodes of the path down from
    ``id``, newest first, when a turn reaches below the slice.
    """

    def __init__(self, top_is_tip: bool, keep: Collection[NodeId],
                 older: Callable[[NodeId, int], Sequence[Node]]) -> None:
        self._keep = keep
        self._older = older
        # What lay above on this read: None (nothing yet: the top), "start" or "end" (the
        # last turn boundary passed); a read from a fork point knows nothing of what is above.
        self._above: str | None = None if top_is_tip else "unknown"
        self._since: list[Node] = []  # newest first: what a row sums, above since that boundary

    def rows(self, nodes: Sequence[Node]) -> list[Row | None]:
        """The row of each of ``nodes`` (the next slice, newest first), None for folded."""
        out: list[Row | None] = []
        for i, node in enumerate(nodes):
            row: Row | None = None
            if node.type == "turn/end":
                row = self._ended(node, nodes[i + 1:])
                self._above, self._since = "end", []
            elif node.type == "turn/start":
                if self._above in (None, "start"):  # a newer turn began, or the tip: unfinished
                    row = fold_turns([node, *reversed(self._since)], {})[0]
                self._above, self._since = "start", []
            else:
                if self._above in (None, "start") and node.type in _COUNTED:
                    self._since.append(node)  # (only what a turn's row sums: memory stays small)
                if is_shown(node):
                    row = Row(node)
            if row is None and node.id in self._keep:
                row = Row(node)
            out.append(row)
        return out

    def _ended(self, end: Node, below: Sequence[Node]) -> Row | None:
        """The row of ``end``: its turn summed down to its turn/start (read on when the slice
        ends first); None for an end that ends no turn (another end comes first below it:
        ``fold_turns`` gives it no row either)."""
        turn = [end]
        rest: Sequence[Node] = below
        last = end
        want = 64
        while True:
            for n in rest:
                if n.type == "turn/end":
                    return None
                if n.type == "turn/start":
                    turn.append(n)
                    return fold_turns(turn[::-1], {})[-1]
                if n.type in _COUNTED:
                    turn.append(n)  # (only what the row sums: a streamed turn is long)
                last = n
            if last.parent is None:
                return fold_turns(turn[::-1], {})[-1]
            rest = self._older(last.parent, want)
            if not rest:
                return fold_turns(turn[::-1], {})[-1]
            want = min(4 * want, 4096)
