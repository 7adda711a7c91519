"""The sending view: a session's messages made acceptable to a model API.

What a store gives back is exact (:func:`sesstree.events.derive_exact`). What an API accepts
is narrower: every tool call answered right after its assistant message, no tool result
without a call, and (for strict chat templates) no two user messages in a row. This module
builds that view from the exact messages, reports every change it made as a
:class:`~sesstree.events.Problem`, and never touches what is stored. The agent loop sends it;
``sess messages --sending`` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .events import PENDING_DETAIL, Derived, Ids, Problem, call_ids, derive_exact, pending_at

__all__ = ["ORPHAN_RESULT", "PENDING_RESULT", "derive_messages", "repair_messages"]

#: What an unanswered tool call is given in the sending view.
ORPHAN_RESULT = "[sesstree: no result was recorded for this tool call]"
#: What a call at the tail that has no result yet is given (it may still be running).
PENDING_RESULT = "[sesstree: this tool call has no result yet]"


def derive_messages(
    types: Sequence[str],
    datas: Sequence[Any],
    ids: Ids | None = None,
    *,
    repair: bool = False,
) -> Derived:
    """Derive the chat messages from a session's events, oldest first, exactly as stored.

    ``ids`` (hex node ids, or a function that gives them) are needed only to honour a
    compaction marker's ``first_kept``. ``problems`` lists tool calls and results that are
    not paired; the messages are not changed for them (:func:`sesstree.events.derive_exact`).
    With ``repair=True`` the result is the sending view instead (:func:`repair_messages`).
    """
    if repair:  # the view says what it changed: the exact pairing check would be thrown away
        return repair_messages(derive_exact(types, datas, ids, problems=False).messages)
    return derive_exact(types, datas, ids)


def repair_messages(messages: Sequence[dict[str, Any]]) -> Derived:
    """The messages a model API accepts, built from ``messages`` (which are not changed).

    - results that came later (after other messages) are moved up to follow their call;
    - a call with no result gets a synthetic one (``orphan-call``, or ``pending-call`` at the
      tail of the session);
    - a result with no call before it is left out (``orphan-result``);
    - consecutive user messages are joined into one (``merged-user``), as strict chat templates
      require alternating roles.
    """
    paired, problems = _pair_tool_calls(messages)
    return Derived(_merge_users(paired, problems), problems)


def _pair_tool_calls(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Problem]]:
    problems: list[Problem] = []
    results: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            results.setdefault(str(m.get("tool_call_id")), i)
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    pending_index = pending_at(messages)
    i = 0
    n = len(messages)
    while i < n:
        m = messages[i]
        i += 1
        if i - 1 in used:
            continue
        if m.get("role") == "tool":
            problems.append(Problem("orphan-result", str(m.get("tool_call_id")),
                                    "no tool call before it has this id; not sent"))
            continue
        out.append(m)
        calls = call_ids(m)
        if not calls:
            continue
        pending = i - 1 == pending_index
        # Results that follow directly keep their order; missing ones are pulled forward
        # from later in the history or, if there are none, synthesised.
        answered: set[str] = set()
        while i < n and messages[i].get("role") == "tool":
            cid = str(messages[i].get("tool_call_id"))
            if cid in calls and cid not in answered:
                answered.add(cid)
                used.add(i)
                out.append(messages[i])
                i += 1
            else:
                break
        for cid in calls:
            if cid in answered:
                continue
            later = results.get(cid)
            if later is not None and later >= i and later not in used:
                used.add(later)
                out.append(messages[later])
                continue
            if pending:
                problems.append(Problem("pending-call", cid, PENDING_DETAIL))
                out.append({"role": "tool", "tool_call_id": cid, "content": PENDING_RESULT})
            else:
                problems.append(Problem("orphan-call", cid, "no result was recorded"))
                out.append({"role": "tool", "tool_call_id": cid, "content": ORPHAN_RESULT})
    return out, problems


def _merge_users(messages: list[dict[str, Any]], problems: list[Problem]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        prev = out[-1] if out else None
        if prev is not None and m.get("role") == "user" and prev.get("role") == "user":
            joined = _join_user(prev, m)
            if joined is not None:
                out[-1] = joined
                problems.append(Problem("merged-user", "", "two user messages in a row sent as one"))
                continue
        out.append(m)
    return out


def _join_user(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """One user message holding both contents (text or content parts); None where a merge
    would lose something (other keys that differ, such as two names)."""
    rest_a = {k: v for k, v in a.items() if k != "content"}
    if rest_a != {k: v for k, v in b.items() if k != "content"}:
        return None
    ca, cb = a.get("content"), b.get("content")
    if isinstance(ca, str) and isinstance(cb, str):
        return {**rest_a, "content": f"{ca}\n\n{cb}"}
    parts_a, parts_b = _parts(ca), _parts(cb)
    if parts_a is None or parts_b is None:
        return None
    return {**rest_a, "content": [*parts_a, *parts_b]}


def _parts(content: Any) -> list[Any] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    return None
