"""Whether a session is waiting for the model: what ``sess run`` asks again after a turn that
did not end with an answer.

The loop sends the session's sending view (:mod:`sesstree.sending`), which makes such a
history acceptable to the API; this module only says that a turn is still to be answered.
"""

from __future__ import annotations

from ..repo.session import Session

__all__ = ["has_pending_turn"]


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
