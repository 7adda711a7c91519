"""A streamed reply as it is stored: ``assistant/chunk`` events, batched by time.

The agent loop (:mod:`sesstree.agent.loop`) hands every delta of a streamed reply to a
:class:`ChunkWriter` and flushes it before the ``assistant/message`` that holds the whole
reply, so what was received survives a crash mid-stream.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import SesstreeError
from ..repo.session import Session
from .wire import Delta

__all__ = ["ChunkWriter", "merge_deltas"]


class ChunkWriter:
    """Persists a streamed reply as ``assistant/chunk`` events, batched by time.

    The first delta is written at once; later ones are merged and written when
    ``interval`` seconds have passed since the last write, and whatever is left when the
    stream ends is written before the ``assistant/message``. So the chunks of a step always
    add up to the whole streamed reply, a crash loses at most ``interval`` seconds of it, and
    a long reply costs a few nodes a second, not one per token. ``interval=0`` writes every
    delta as it comes (deterministic ids for the same stream, at one node per delta).
    """

    def __init__(self, session: Session, interval: float) -> None:
        self.session = session
        self.interval = interval
        self.pending: list[Delta] = []
        self.last = float("-inf")

    def __call__(self, delta: Delta) -> None:
        """Take one delta; write what is pending if ``interval`` has passed."""
        self.pending.append(delta)
        if time.monotonic() - self.last >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Write what is pending as one ``assistant/chunk``."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        before = self.session.head
        try:
            self.session.append("assistant/chunk", merge_deltas(pending))
        except BaseException:
            # Ctrl-C (or a subscriber's error) can land after the chunk is stored, while it
            # is shown: then it must not be written again on the way out. Not stored: kept.
            if self.session.head == before:
                self.pending[:0] = pending
            raise
        self.last = time.monotonic()

    def restart(self) -> None:
        """Write what is pending; the next delta, the first of a new attempt's reply, is
        written at once, as a step's first is."""
        self.flush()
        self.last = float("-inf")

    def flush_quietly(self) -> None:
        """Flush on the way out of a failed call: a store error here must not hide that one."""
        try:
            self.flush()
        except SesstreeError:
            pass


def merge_deltas(deltas: list[Delta]) -> dict[str, Any]:
    """One chunk's data from consecutive deltas: text fields concatenated, the fragments of
    each tool call (by ``index``) joined into one call."""
    out: dict[str, Any] = {}
    calls: list[dict[str, Any]] = []
    for delta in deltas:
        for key, value in delta.items():
            if key == "tool_calls":
                for frag in value:
                    last = calls[-1] if calls else None
                    if last is not None and last["index"] == frag["index"] and "id" not in frag:
                        last["arguments"] = last.get("arguments", "") + frag.get("arguments", "")
                        if "name" in frag:
                            last["name"] = frag["name"]
                    else:
                        calls.append(dict(frag))
            else:
                out[key] = out.get(key, "") + value
    if calls:
        out["tool_calls"] = calls
    return out
