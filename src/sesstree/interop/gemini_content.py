"""Gemini API ``Content`` (``{"role": "user"|"model", "parts": [...]}``) as chat messages, and
Gemini CLI's message records as the ``Content`` it sends for them.

``parts`` hold ``text`` (with ``thought: true`` for a model's reasoning, which is not kept as
chat: the other importers keep reasoning in the raw record only), ``inlineData`` and
``fileData`` (media, mapped by :func:`~sesstree.interop.gemini.media_part` as the proxy maps
them: one part, one node, recorded or imported), ``functionCall``
(``{"id"?, "name", "args"}``: a tool call, its arguments as JSON) and ``functionResponse``
(``{"id"?, "name", "response"}``: a tool result). Calls without an id (older Gemini CLI
versions and checkpoints) are paired with their responses by name, in order, as Gemini CLI
itself does (``ensureStableToolIds``).

:func:`record_contents` is Gemini CLI's ``convertSessionToClientHistory`` for one record
(packages/core/src/utils/sessionUtils.ts): what a resumed session sends its model.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .gemini import media_part

__all__ = ["CallIds", "content_events", "record_contents"]

_json = msgspec.json.Encoder()


class CallIds:
    """The ids given to tool calls that came without one, so their responses find them."""

    def __init__(self) -> None:
        self._open: dict[str, list[str]] = {}
        self._made = 0

    def call(self, call: dict[str, Any]) -> str:
        """The id of a ``functionCall`` (made up, ``call-N``, when it has none)."""
        name = str(call.get("name", ""))
        found = call.get("id")
        if isinstance(found, str) and found:
            ident = found
        else:
            self._made += 1
            ident = f"call-{self._made}"
        self._open.setdefault(name, []).append(ident)
        return ident

    def response(self, response: dict[str, Any]) -> str:
        """The id of the call a ``functionResponse`` answers."""
        name = str(response.get("name", ""))
        waiting = self._open.get(name, [])
        found = response.get("id")
        if isinstance(found, str) and found:
            if found in waiting:
                waiting.remove(found)
            return found
        return waiting.pop(0) if waiting else f"{name}-response"


def _parts(value: Any) -> list[Any]:
    """A ``PartListUnion`` (a string, one part, or a list of both) as a list of parts."""
    if value is None:
        return []
    if isinstance(value, list):
        return [{"text": p} if isinstance(p, str) else p for p in value]
    if isinstance(value, str):
        return [{"text": value}]
    return [value]


def _text_of_parts(value: Any) -> str:
    return "".join(str(p.get("text", "")) for p in _parts(value)
                   if isinstance(p, dict) and isinstance(p.get("text"), str))


def _ignored_prompt(content: Any) -> bool:
    # Gemini CLI's isIgnoredUserContent: commands and injected context are not resent.
    text = _text_of_parts(content).strip()
    return (not text or text.startswith(("/", "?", "<session_context>", "<hook_context>")))


def record_contents(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``Content`` Gemini CLI sends its model for one ``MessageRecord`` (may be none)."""
    kind = record.get("type")
    content = record.get("content")
    if kind == "user":
        if _ignored_prompt(content):
            return []
        return [{"role": "user", "parts": _parts(content)}]
    if kind != "gemini":
        return []  # info, error, warning: the user's screen only
    parts = [p for p in _parts(content) if isinstance(p, dict)]
    calls = record.get("toolCalls")
    calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    model: list[Any] = list(parts)
    if not any("functionCall" in p or p.get("thought") for p in parts):
        thoughts = record.get("thoughts")
        for t in thoughts if isinstance(thoughts, list) else []:
            if isinstance(t, dict):
                subject = t.get("subject")
                text = f"**{subject}** {t.get('description', '')}" if subject else \
                    str(t.get("description", ""))
                model.insert(0, {"text": text, "thought": True})
        model.extend({"functionCall": {"id": c.get("id"), "name": c.get("name"),
                                       "args": c.get("args", {})}} for c in calls)
    if not model:
        return []
    out = [{"role": "model", "parts": model}]
    responses: list[Any] = []
    for c in calls:
        result = c.get("result")
        if not result:
            continue
        if isinstance(result, str):
            responses.append({"functionResponse": {"id": c.get("id"), "name": c.get("name"),
                                                   "response": {"output": result}}})
        elif isinstance(result, list):
            responses.extend(_parts(result))
        else:
            responses.append(result)
    if responses:
        out.append({"role": "user", "parts": responses})
    return out


def _response_text(response: Any) -> str:
    if isinstance(response, dict):
        for key in ("output", "error"):
            if isinstance(response.get(key), str) and len(response) == 1:
                return str(response[key])
    return _json.encode(response).decode()


def _flatten(parts: list[dict[str, Any]], *, join: bool) -> Any:
    """A message's content: one string for one text part; a model's text parts joined (see
    :mod:`sesstree.interop.gemini`: as the proxy maps them), a user's kept apart."""
    if join:
        merged: list[dict[str, Any]] = []
        for p in parts:
            if p["type"] == "text" and merged and merged[-1]["type"] == "text":
                merged[-1] = {"type": "text", "text": merged[-1]["text"] + p["text"]}
            else:
                merged.append(p)
        parts = merged
    if not parts:
        return None
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def content_events(content: Any, ids: CallIds) -> list[tuple[str, Any]]:
    """The vocabulary events for one ``Content``: a user or assistant message, and one
    ``tool/result`` per ``functionResponse`` part."""
    if not isinstance(content, dict):
        return []
    role = content.get("role")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[tuple[str, Any]] = []
    for part in _parts(content.get("parts")):
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            if not part.get("thought") and part["text"]:
                parts.append({"type": "text", "text": part["text"]})
        elif (media := media_part(part)) is not None:
            parts.append(media)
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            calls.append({"id": ids.call(call), "type": "function", "function": {
                "name": str(call.get("name")),
                "arguments": _json.encode(call.get("args") or {}).decode()}})
        elif isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"]
            results.append(("tool/result", {"role": "tool",
                                            "tool_call_id": ids.response(response),
                                            "content": _response_text(response.get("response"))}))
    events: list[tuple[str, Any]] = []
    if role == "model":
        if parts or calls:
            msg: dict[str, Any] = {"role": "assistant", "content": _flatten(parts, join=True)}
            if calls:
                msg["tool_calls"] = calls
            events.append(("assistant/message", msg))
        return events
    events.extend(results)
    if parts:
        events.append(("user/message", {"role": "user", "content": _flatten(parts, join=False)}))
    return events
