"""How the CLI shows things to people: short ids, one-line summaries, relative times."""

from __future__ import annotations

import time
import unicodedata
from typing import Any

import msgspec

from .node import Node
from .text import TextStyle, content_text

__all__ = [
    "SHORT", "cells", "fit", "fit_left", "pad", "plural", "printable", "relative_time", "short",
    "summary", "terminal_safe", "terminal_text", "to_jsonable",
]

#: Characters of an id shown to people; any unambiguous prefix of 4+ is accepted back.
SHORT = 10

_json = msgspec.json.Encoder()
#: A message's content on one line: parts joined by a space, whatever text a part has, no
#: placeholder for an image (the summary is about what was said).
LINE = TextStyle(joiner=" ", placeholder="none", loose=True)


def short(id: str | None) -> str:
    """The short form of an id, or ``-`` for none."""
    return "-" if id is None else id[:SHORT]


def plural(n: int, word: str) -> str:
    """``1 event``, ``3 events``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def printable(text: str, limit: int | None = None) -> str:
    """``text`` as one printable line, for a message: line breaks (U+2028 too) and control
    characters a name or file may hold are shown escaped; past ``limit`` it is cut short."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


#: Characters that reorder what a terminal shows (bidi embeddings, overrides, isolates, marks).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def terminal_text(text: str) -> str:
    """``text`` safe to print on a terminal, its line breaks and tabs kept: stored content is
    anyone's, and a control character (ESC starts a sequence that clears the screen, retitles
    the window or forges a link; CR overwrites a line) or a bidi override (it reorders what
    is shown) is written escaped, as ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(
        ascii(ch)[1:-1] if ch in _BIDI or (ch not in "\n\t" and unicodedata.category(ch) == "Cc")
        else ch
        for ch in text
    )


def terminal_safe(value: Any) -> Any:
    """``value`` (a message, or any JSON value) with every string in it, keys too, made
    :func:`terminal_text`."""
    if isinstance(value, str):
        return terminal_text(value)
    if isinstance(value, dict):
        return {terminal_text(k) if isinstance(k, str) else k: terminal_safe(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [terminal_safe(v) for v in value]
    return value


# Characters a terminal draws in no cell of their own: zero-width spaces and joiners, the
# word joiner, the byte order mark (combining marks are found by their category).
_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff")


def _cell_width(ch: str) -> int:
    if ch == "\ufe0f":
        # The emoji selector: "⚠️" is drawn two cells wide where "⚠" alone takes one. Counted
        # as one more for any letter (a line a cell short is fine; a cell too long wraps).
        return 1
    if ch in _ZERO_WIDTH or unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cells(text: str) -> int:
    """The screen cells ``text`` takes on a terminal: two for each wide or fullwidth
    character (CJK ideographs, kana, hangul, fullwidth forms, most emoji, a letter with the
    emoji selector), none for a combining mark or a zero-width character, one for any other.
    (Lines are fitted in these, not in characters: a line of Chinese is twice as wide as its
    length.)"""
    if text.isascii():
        return len(text)
    return sum(_cell_width(ch) for ch in text)


def fit(text: str, width: int, end: str = "…") -> str:
    """``text`` cut to at most ``width`` screen cells, ``end`` marking the cut (a combining
    mark stays with its letter; a wide character that would straddle the edge is left out)."""
    if cells(text) <= width:
        return text
    room = max(0, width - cells(end))
    used, cut = 0, 0
    for i, ch in enumerate(text):
        used += _cell_width(ch)
        if used > room:
            break
        cut = i + 1
    return text[:cut] + end


def fit_left(text: str, width: int, start: str = "…") -> str:
    """``text`` cut on the left to at most ``width`` screen cells (a path, whose end says
    most: ``…/projects/x/abc.jsonl``)."""
    if cells(text) <= width:
        return text
    room = max(0, width - cells(start))
    used, cut = 0, len(text)
    for i in range(len(text) - 1, -1, -1):
        used += _cell_width(text[i])
        if used > room:
            break
        cut = i
    while cut < len(text) and _cell_width(text[cut]) == 0:
        cut += 1  # a combining mark whose letter was cut off goes with it
    return start + text[cut:]


def pad(text: str, width: int) -> str:
    """``text`` with spaces after it to fill ``width`` screen cells (as ``f"{text:<N}"``
    does in characters)."""
    return text + " " * max(0, width - cells(text))


def relative_time(then: float, now: float | None = None) -> str:
    """``3 minutes ago`` style."""
    delta = max(0.0, (now if now is not None else time.time()) - then)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if delta >= size:
            n = int(delta // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now" if delta < 5 else f"{int(delta)} seconds ago"


def _clip(text: str, width: int) -> str:
    return fit(terminal_text(" ".join(text.split())), width)


def _call_summary(call: Any) -> str:
    """``talk_to {"npc": "mayor"}``: a tool call's name and (unless empty) its arguments."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "?"
    arguments = fn.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = _json.encode(arguments).decode()
    arguments = arguments.strip()
    name = str(fn.get("name", "?"))
    return name if arguments in ("", "{}") else f"{name} {arguments}"


def _record_summary(node: Node, named: bool) -> str | None:
    """Short words for the loop's own records (turns, steps, usage, tool calls); ``named``
    says what kind of record it is, for a line that shows no type column (beside one, the
    column says it: ``usage  153 in, 20 out``, not ``usage  usage: 153 in``)."""
    data = node.data if isinstance(node.data, dict) else {}
    kind = node.type
    if kind == "turn/start":
        trigger = data.get("trigger")
        if not isinstance(trigger, dict):
            return None
        return f"turn starts ({trigger.get('kind', '?')})" if named else \
            f"trigger: {trigger.get('kind', '?')}"
    if kind == "turn/end":
        reason = data.get("reason")
        if not isinstance(reason, dict):
            return None
        return f"turn ends: {reason.get('kind', '?')}" if named else \
            f"reason: {reason.get('kind', '?')}"
    if kind in ("step/start", "step/end") and "step" in data:
        end = f", {data['finish_reason']}" if data.get("finish_reason") else ""
        if kind == "step/end" and data.get("incomplete") is True:
            end += ", cut short"  # a cut attempt (retried, or the turn's last)
        if not named:
            return f"#{data['step']}{end}"
        return f"step {data['step']} {'starts' if kind == 'step/start' else 'ends'}{end}"
    if kind == "tool/call" and "name" in data:
        return f"runs {data['name']}({data.get('arguments', '')})"
    if kind == "usage" and isinstance(data.get("usage"), dict):
        usage = data["usage"]
        return (f"{'usage: ' if named else ''}{usage.get('prompt_tokens', '?')} in, "
                f"{usage.get('completion_tokens', '?')} out ({data.get('model', '?')})")
    return None


def summary(node: Node, width: int = 72, *, with_type: bool = False) -> str:
    """One line that says what an event is about; ``with_type`` names non-message types
    (without it, the line is shown beside the event's type and does not repeat it)."""
    record = _record_summary(node, with_type)
    if record is not None:
        return _clip(record, width)
    data = node.data
    if isinstance(data, dict) and "role" in data:
        role = str(data.get("role"))
        text = content_text(data.get("content"), LINE)
        calls = data.get("tool_calls")
        if isinstance(calls, list) and calls:
            names = ", ".join(_call_summary(c) for c in calls)
            text = (text + " " if text else "") + f"[calls {names}]"
        if role == "tool":
            role = f"tool {data.get('tool_call_id', '')}".strip()
        return _clip(f"{role}: {text}", width)
    prefix = f"{node.type}: " if with_type else ""
    if isinstance(data, dict) and isinstance(data.get("content"), str):
        return _clip(prefix + data["content"], width)
    return _clip(prefix + _json.encode(data).decode(), width)


def to_jsonable(node: Node) -> dict[str, Any]:
    """A node as stable machine output."""
    return {"id": node.id, "parent": node.parent, "type": node.type, "data": node.data}
