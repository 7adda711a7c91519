"""A session as a person reads it: the conversation, with the loop's bookkeeping folded away.

Two views live here. :func:`fold_turns` (from :mod:`sesstree.repo.folding`, the one rule every
reading view folds by) picks, from a session's events, what ``sess log`` shows by default: the
messages, and one line per agent turn that sums up the events around them (steps, tokens, how
long it took, why it ended). :func:`render_messages` writes chat
messages in full for ``sess show SESSION`` and ``sess messages``: every line break kept, tool
calls with their arguments and results indented under the message that made them, markdown
left as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..fmt import terminal_safe, terminal_text
from ..node import Node
from ..repo.folding import CONVERSATION_TYPES, Row, TurnStats, fold_turns
from ..text import TextStyle, content_text, event_text, json_text
from .term import Terminal

__all__ = ["CONVERSATION_TYPES", "GREP", "Row", "TurnStats", "fold_turns", "node_text",
           "render_messages", "role_of"]

_ROLE_OF_TYPE = {"system/message": "system", "user/message": "user",
                 "assistant/message": "assistant", "tool/result": "tool", "tool/call": "assistant",
                 "assistant/chunk": "assistant", "steering/message": "user",
                 "context/message": "user"}
#: What ``--grep`` matches: the full text (images named), every part kept, and the JSON of
#: an event that has no text.
GREP = TextStyle()


def role_of(node: Node) -> str | None:
    """The chat role an event speaks with: its message's role, else its type's."""
    data = node.data
    if isinstance(data, dict) and isinstance(data.get("role"), str):
        return str(data["role"])
    return _ROLE_OF_TYPE.get(node.type)


def node_text(node: Node) -> str:
    """All the text of an event, for ``--grep``: its content, tool names and arguments; the
    whole data as JSON for any other kind."""
    return event_text(node.type, node.data, GREP)


# -- the readable conversation ---------------------------------------------------------------


def render_messages(messages: Iterable[dict[str, Any]], term: Terminal) -> Iterator[str]:
    """The lines of a conversation: each message under its role, in full; tool calls and
    results indented under the assistant message that made them."""
    indent = "    "
    first = True
    in_calls = False  # the previous message made tool calls: results nest under it
    for m in messages:
        m = terminal_safe(m)  # stored text is anyone's: no raw escape sequence reaches a terminal
        role = str(m.get("role", "?"))
        if role == "tool" and in_calls:
            call_id = m.get("tool_call_id", "")
            name = f" {m['name']}" if isinstance(m.get("name"), str) else ""
            yield indent + term.paint(f"result{name} [{call_id}]", "tool")
            yield from _block(content_text(m.get("content")), indent * 2)
            continue
        if not first:
            yield ""
        first = False
        head = role
        if role == "tool":
            head = f"tool [{m.get('tool_call_id', '')}]"
        elif isinstance(m.get("name"), str):
            head = f"{role} ({m['name']})"
        yield term.paint(head, role if role in term.STYLES else "dim")
        text = content_text(m.get("content"))
        if text:
            yield from _block(text, indent)
        if role == "assistant" and isinstance(m.get("reasoning_content"), str):
            yield indent + term.paint("reasoning", "dim")
            yield from _block(m["reasoning_content"], indent * 2)
        calls = m.get("tool_calls")
        in_calls = role == "assistant" and isinstance(calls, list) and bool(calls)
        for call in calls if isinstance(calls, list) else ():
            yield from _call_lines(call, indent, term)


def _call_lines(call: Any, indent: str, term: Terminal) -> Iterator[str]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        yield indent + term.paint("call", "tool") + " " + json_text(call)
        return
    head = indent + term.paint(f"call {fn.get('name', '?')} [{call.get('id', '')}]", "tool")
    arguments = fn.get("arguments", "")
    parsed: Any = arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else None
        except (ValueError, RecursionError):
            parsed = None  # not JSON: shown as the model wrote it
    if parsed is None or parsed == {}:
        text = arguments if isinstance(arguments, str) and arguments.strip() not in ("", "{}") \
            else ""
    else:
        # (Parsed arguments hold the characters their JSON escaped: escape them again.)
        compact = terminal_text(json.dumps(parsed, ensure_ascii=False))
        if len(compact) <= 72 and "\\n" not in compact:
            yield f"{head} {compact}"  # short arguments stay on the call's line
            return
        text = terminal_text(json.dumps(parsed, indent=2, ensure_ascii=False))
    yield head
    if text:
        yield from _block(text, indent * 2)


def _block(text: str, indent: str) -> Iterator[str]:
    for line in text.splitlines() or [""]:
        yield indent + line if line else ""  # as written: markdown's trailing spaces count
