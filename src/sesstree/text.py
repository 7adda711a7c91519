"""Event content as text: the one rendering every reader of a session uses.

A message's ``content`` is a string, ``None``, a list of parts (``{"type": "text", "text": ...}``,
image parts, parts of types nobody here knows) or, in a history someone else wrote, any JSON at
all. The CLI, the web view and the search all turn it into text, and they differ in exactly the
ways a :class:`TextStyle` names: how parts join, what a part without text shows as, how JSON
that is not text is written, and which other fields of an event count as its text. Each
caller keeps its style beside it (``fmt.LINE``, ``cli.conversation.GREP``, ``web.render.PAGE``,
``SEARCH`` here for the text index); the default is the full text the CLI prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

__all__ = ["FULL", "SEARCH", "TextStyle", "content_text", "event_text", "json_text"]

_compact = msgspec.json.Encoder()
_sorted = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True, slots=True)
class TextStyle:
    """How content becomes text; every field is a difference some reader needs."""

    #: Between the parts of a list content: a blank line keeps them apart as paragraphs; a
    #: one-line summary joins them with a space.
    joiner: str = "\n\n"
    #: What a part without text shows as: ``"url"`` names an image by (the first 60 characters
    #: of) its URL and any other part by its ``type`` (``[part]`` when it has none); ``"type"``
    #: shows ``[type]`` for a part whose type is a string and leaves out the rest; ``"none"``
    #: leaves every such part out.
    placeholder: Literal["url", "type", "none"] = "url"
    #: A part that is neither an object nor a string (a number, say) shows as its ``str()``;
    #: without it such a part is left out.
    scalars: bool = True
    #: For one-line summaries: a part's ``text`` counts whatever its type (its ``str()``, when
    #: not empty or zero), and empty parts are left out rather than joined.
    loose: bool = False
    #: Content that is neither a string nor a list, as JSON: indented with sorted keys
    #: (``pretty``), else compact in stored order; ``limit`` clips pretty JSON with a note.
    pretty: bool = False
    limit: int | None = None
    #: Other string fields of an event that are part of its text (search reads summaries,
    #: messages and reasoning too).
    fields: tuple[str, ...] = ()
    #: A ``tool/call`` record's name and arguments are part of its text.
    records: bool = False
    #: Every part of an event is joined as it is, empty ones too (so line counts stay those
    #: of the event), and a tool call whose ``function`` is missing or empty (null, ``{}``)
    #: counts as an empty call (one whose ``function`` is some other value does not);
    #: without it empty parts are left out.
    keep_empty: bool = True
    #: An event with no text is its data as compact JSON (what ``--grep`` matches); without
    #: it, the empty string.
    fallback_json: bool = True


#: The full text, line breaks kept, as ``sess show`` and ``sess messages`` print it.
FULL = TextStyle()

#: What a person reads of an event, as the text index keeps it and a search matches it: the
#: content (text parts only; JSON that is not text, compact), the summary, message and
#: reasoning an event carries, every tool call's name and arguments (a ``tool/call`` record's
#: too); nothing for an event with no text (no ids, no bookkeeping, no JSON fallback).
SEARCH = TextStyle(placeholder="none", scalars=False,
                   fields=("summary", "message", "reasoning", "reasoning_content"),
                   records=True, keep_empty=False, fallback_json=False)


def json_text(value: Any, *, pretty: bool = False, limit: int | None = None) -> str:
    """``value`` as JSON: compact in stored order, or indented with sorted keys (``pretty``),
    clipped to ``limit`` characters with a note of how many more there were."""
    if not pretty:
        return _compact.encode(value).decode()
    text = msgspec.json.format(_sorted.encode(value), indent=2).decode()
    if limit is not None and len(text) > limit:
        return text[:limit] + f"\n… ({len(text) - limit:,} more characters)"
    return text


def content_text(content: Any, style: TextStyle = FULL) -> str:
    """The text of a message's ``content`` in ``style``: a string as it is, ``None`` as
    nothing, a list of parts joined, any other JSON written as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # One loop with the text part inline: `--grep` and the search run this on every
        # event they read, and a call per part would cost them more than the rest together.
        out: list[str] = []
        append = out.append
        loose = style.loose
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str):
                if text or not loose:
                    append(text)
                continue
            shown = _part_text(part, style)
            if shown is not None and (shown or not loose):
                append(shown)
        return style.joiner.join(out)
    if not style.pretty:
        return _compact.encode(content).decode()
    return json_text(content, pretty=True, limit=style.limit)


def _part_text(part: Any, style: TextStyle) -> str | None:
    """One part's text, or None where ``style`` leaves the part out (a part whose ``text``
    is a string is taken as it is by :func:`content_text` before this is asked)."""
    if isinstance(part, dict):
        text = part.get("text")
        if style.loose:
            return str(text) if text else None
        if style.placeholder == "url":
            if "image_url" in part:
                url = part["image_url"]
                url = str(url.get("url", "") if isinstance(url, dict) else url)
                return f"[image {url[:60] + '...' if len(url) > 60 else url}]"
            return f"[{part.get('type', 'part')}]"
        if style.placeholder == "type":
            kind = part.get("type")
            return f"[{kind}]" if isinstance(kind, str) else None
        return None
    if isinstance(part, str):
        return part
    return str(part) if style.scalars else None


def event_text(type: str, data: Any, style: TextStyle = FULL) -> str:
    """All the text of an event of ``type`` holding ``data``: its content, the ``fields`` of
    ``style``, each tool call's name and arguments, one per line."""
    if isinstance(data, dict):
        parts = [content_text(data.get("content"), style)] if "content" in data else []
        for key in style.fields:
            value = data.get(key)
            if isinstance(value, str):
                parts.append(value)
        calls = data.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, dict):
                continue
            fn = call.get("function")
            if isinstance(fn, dict):
                parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
            elif style.keep_empty and not fn:
                parts.append(" ")  # a call with no function: its empty name and arguments
        if style.records and type == "tool/call":
            parts.append(f"{data.get('name', '')} {data.get('arguments', '')}")
        if style.keep_empty:
            text = "\n".join(parts) if any(parts) else ""
        else:
            text = "\n".join(p for p in parts if p)
        if text or not style.fallback_json:
            return text
    if isinstance(data, str):
        return data
    return _compact.encode(data).decode() if style.fallback_json else ""
