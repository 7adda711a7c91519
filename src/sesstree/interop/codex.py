"""Codex rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

A rollout is one line per record, ``{"timestamp", "type", "payload"}``, in order (no tree).
Each record becomes its raw form as ``codex/<type>`` followed by what the model was sent:

- ``response_item``: a Responses API item, converted by :func:`response_item_events`
  (``message`` -> a message of its role, ``function_call``/``custom_tool_call``/
  ``local_shell_call`` -> an assistant ``tool_calls`` message, their outputs -> ``tool/result``;
  ``reasoning`` and other items are kept raw only);
- ``session_meta``: its ``base_instructions`` as a ``system/message``;
- ``compacted``: a ``compaction/marker`` with its summary, then its ``replacement_history``;
- ``event_msg`` (UI events, token counts: the user's prompt also arrives as a ``response_item``),
  ``turn_context`` and anything newer: the raw record only.

The session is named after the thread id in ``session_meta`` (``codex-`` and 8 of its hex
digits, see :func:`~sesstree.interop.jsonl.session_base`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..repo.store import Store
from .common import ImportResult
from .jsonl import Record, read_records, record_type, session_base
from .provenance import Provenance
from .tree import Entry, build_tree, land_tree

__all__ = ["import_codex", "looks_like_codex", "response_item_events"]

_json = msgspec.json.Encoder()
_KINDS = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
for _kind in _KINDS:
    record_type("codex", _kind)

_ROLE_TYPES = {"user": "user/message", "assistant": "assistant/message",
               "system": "system/message"}


def looks_like_codex(record: dict[str, Any]) -> bool:
    """True for a record of a Codex rollout."""
    return record.get("type") in _KINDS and isinstance(record.get("payload"), dict)


def _content(content: Any) -> Any:
    if isinstance(content, str) or content is None:
        return content
    parts: list[dict[str, Any]] = []
    for c in content if isinstance(content, list) else []:
        if not isinstance(c, dict):
            continue
        if c.get("type") in ("input_text", "output_text", "text", "summary_text"):
            parts.append({"type": "text", "text": str(c.get("text", ""))})
        elif c.get("type") == "refusal":
            parts.append({"type": "text", "text": str(c.get("refusal", ""))})
        elif c.get("type") == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": str(c.get("image_url", ""))}})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _call(call_id: Any, name: Any, arguments: Any) -> tuple[str, Any]:
    if not isinstance(arguments, str):
        arguments = _json.encode(arguments).decode()
    return ("assistant/message", {"role": "assistant", "content": None, "tool_calls": [
        {"id": str(call_id), "type": "function",
         "function": {"name": str(name), "arguments": arguments}}]})


def _output(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return str(output["content"])  # older rollouts: {"content": ..., "success": ...}
    if isinstance(output, list):
        text = _content(output)
        if isinstance(text, str):
            return text
    return _json.encode(output).decode()


def response_item_events(item: Any) -> list[tuple[str, Any]]:
    """The vocabulary events for one Responses API input or output item (may be none)."""
    if not isinstance(item, dict):
        return []
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        msg = {"role": role, "content": _content(item.get("content"))}
        return [(_ROLE_TYPES.get(str(role), "message"), msg)]
    if kind == "function_call":
        return [_call(item.get("call_id"), item.get("name"), item.get("arguments", ""))]
    if kind == "custom_tool_call":
        return [_call(item.get("call_id"), item.get("name"), item.get("input", ""))]
    if kind == "local_shell_call":
        return [_call(item.get("call_id") or item.get("id"), "local_shell",
                      item.get("action", {}))]
    if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        return [("tool/result", {"role": "tool", "tool_call_id": str(item.get("call_id")),
                                 "content": _output(item.get("output"))})]
    return []  # reasoning, web_search_call, ghost_snapshot, ...: kept raw only


def _events(rec: dict[str, Any]) -> list[tuple[str, Any]]:
    kind = rec.get("type")
    payload = rec.get("payload")
    events: list[tuple[str, Any]] = [(record_type("codex", kind), rec)]
    if not isinstance(payload, dict):
        return events
    if kind == "response_item":
        events.extend(response_item_events(payload))
    elif kind == "session_meta":
        base = payload.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else base
        if isinstance(text, str) and text:
            events.append(("system/message", {"role": "system", "content": text}))
    elif kind == "compacted":
        events.append(("compaction/marker", {"summary": str(payload.get("message", ""))}))
        history = payload.get("replacement_history")
        for item in history if isinstance(history, list) else []:
            events.extend(response_item_events(item))
    return events


def import_codex(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False, records: list[Record] | None = None, problems: list[str] | None = None,
) -> list[ImportResult]:
    """Import one Codex rollout as one session named after its thread id.

    ``records`` (with the ``problems`` met reading them) are the file's records already read,
    as :mod:`sesstree.interop.follow` hands them over as the file grows; by default the file
    is read here.
    """
    problems = [] if problems is None else problems
    records = read_records(path, problems) if records is None else records
    entries: list[Entry] = []
    prev: str | None = None
    thread = None
    for r in records:
        payload = r.data.get("payload")
        if r.data.get("type") == "session_meta" and isinstance(payload, dict) and thread is None:
            thread = payload.get("id")
        key = f"@{r.line}"
        entries.append(Entry(r.line, key, prev, _events(r.data)))
        prev = key
    tree = build_tree(entries, path)
    base = name or session_base("codex", thread, path)
    meta = {"format": "codex", "thread": thread, "source": str(path)}
    return land_tree(store, tree, path=path, base=base, explicit=name is not None, meta=meta,
                     problems=problems, format="codex", owners=owners, force=force)
