"""How the CLI shows things to people: short ids, one-line summaries, relative times."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from .node import Node

__all__ = ["SHORT", "relative_time", "short", "summary", "to_jsonable"]

#: Characters of an id shown to people; any unambiguous prefix of 4+ is accepted back.
SHORT = 10

_json = msgspec.json.Encoder()


def short(id: str | None) -> str:
    """The short form of an id, or ``-`` for none."""
    return "-" if id is None else id[:SHORT]


def relative_time(then: float, now: float | None = None) -> str:
    """``3 minutes ago`` style."""
    delta = max(0.0, (now if now is not None else time.time()) - then)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if delta >= size:
            n = int(delta // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now" if delta < 5 else f"{int(delta)} seconds ago"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return " ".join(str(p) for p in parts if p)
    return _json.encode(content).decode()


def summary(node: Node, width: int = 72) -> str:
    """One line that says what an event is about."""
    data = node.data
    if isinstance(data, dict) and "role" in data:
        role = str(data.get("role"))
        text = _content_text(data.get("content"))
        calls = data.get("tool_calls")
        if isinstance(calls, list) and calls:
            names = ", ".join(
                str((c.get("function") or {}).get("name", "?")) if isinstance(c, dict) else "?"
                for c in calls
            )
            text = (text + " " if text else "") + f"[calls {names}]"
        if role == "tool":
            role = f"tool {data.get('tool_call_id', '')}".strip()
        return _clip(f"{role}: {text}", width)
    if isinstance(data, dict) and isinstance(data.get("content"), str):
        return _clip(data["content"], width)
    return _clip(_json.encode(data).decode(), width)


def to_jsonable(node: Node) -> dict[str, Any]:
    """A node as stable machine output."""
    return {"id": node.id, "parent": node.parent, "type": node.type, "data": node.data}
