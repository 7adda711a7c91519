"""What the loop sends: the session's *sending view*, not the exact stored history.

A stored history can be one the API refuses: after a failed turn the session ends with the
user's message, and the next prompt makes two user messages in a row, which strict chat
templates reject ("roles must alternate") on every request after. The core's sending view
(:mod:`sesstree.repo.sending`) repairs that (consecutive user messages joined, a synthetic result
for a tool call that has none) and reports what it repaired; the stored events stay exactly
as they were.
"""

from __future__ import annotations

from typing import Any

from ..repo.session import Session

__all__ = ["has_pending_turn", "sending_messages"]


def sending_messages(session: Session) -> list[dict[str, Any]]:
    """The messages to send for ``session``: its repaired sending view
    (:meth:`sesstree.Session.sending_view`)."""
    return session.sending_view().messages


def has_pending_turn(session: Session) -> bool:
    """Whether the session is waiting for the model: its history does not end with an answer.

    True after a turn that failed, stopped incomplete or ran out of turns (the history ends
    with the user's message or a tool result), or a run that died mid-call (the last assistant
    message has calls); False after an answer, or on an empty session.
    """
    messages = session.messages()
    if not messages:
        return False
    last = messages[-1]
    role = last.get("role")
    return role in ("user", "tool") or (role == "assistant" and bool(last.get("tool_calls")))
