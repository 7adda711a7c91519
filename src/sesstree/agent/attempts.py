"""A model call's failed attempts as they are stored: its retries, and its cut streams.

A provider retries a failed request itself and says so before each retry (its ``on_retry``);
:class:`Attempts` is that callback for one step of the loop. A retry is an ``error`` event of
kind ``retry``. A stream cut before its reply was whole (no ``finish_reason``, no ``[DONE]``, no
error) has already recorded its chunks: that attempt is ended as an *incomplete step*
(:func:`end_cut_step`) and the retry opens the step again, so the chunks of each attempt sit
between their own ``step/start`` and ``step/end`` and none of them is read as the reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..repo.session import Session
from .chunks import ChunkWriter

__all__ = ["Attempts", "end_cut_step"]

#: ``step/end``'s mark for a stream that was cut, in the words ``sess proxy`` records a cut
#: call with (``upstream``: the server, or the network between, stopped it).
_CUT_STEP = {"finish_reason": None, "incomplete": True, "cut_by": "upstream"}


def end_cut_step(session: Session, step: int) -> None:
    """End step ``step`` as a cut attempt: its chunks are part of a reply, never the reply."""
    session.append("step/end", {"step": step, **_CUT_STEP})


class Attempts:
    """The ``on_retry`` of one step: records each retry, and ends a cut attempt's step.

    ``writer`` holds the step's streamed chunks, written out before the cut attempt's end so
    that they stay with it; ``redact`` scrubs the provider's secrets from the messages.
    """

    def __init__(self, session: Session, step: int, writer: ChunkWriter,
                 redact: Callable[[str], str]) -> None:
        self.session = session
        self.step = step
        self.writer = writer
        self.redact = redact

    def __call__(self, attempt: int, status: int | None, message: str, *,
                 delay: float | None = None, attempts: int | None = None,
                 cut: int | None = None) -> None:
        """Record that ``attempt`` failed and another is coming (see ``RetryNotice``)."""
        s = self.session
        if cut is not None:
            self.writer.restart()
            end_cut_step(s, self.step)
        data: dict[str, Any] = {"kind": "retry", "attempt": attempt, "status": status,
                                "message": self.redact(message)}
        if attempts is not None:
            data["max_attempts"] = attempts
        if delay is not None:
            data["delay"] = round(delay, 3)
        if cut is not None:
            data["cut_after"] = cut  # chunks received before the cut
        s.append("error", data)
        if cut is not None:
            # The same step again, its request sent again as it was: `attempt` says which.
            s.append("step/start", {"step": self.step, "attempt": attempt + 1})
