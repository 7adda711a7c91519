"""pi session files (``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``), format v1 to v3.

The header line (``type: session``) is per file (a fork gets a new one naming its
``parentSession``/``branchedFrom``), so it goes to the session metadata, not into the DAG: a
forked file's entries are copies of its parent's and collapse onto them. v1 entries have no ids
and follow each other in order; v2/v3 entries form a tree by ``id``/``parentId``.

Each entry becomes its raw record as ``pi/<type>`` followed by what pi sends to its model:

- ``message``: user -> ``user/message``; assistant -> ``assistant/message`` (``toolCall`` blocks
  as ``tool_calls``; thinking is not resent; an aborted or failed reply is not sent at all);
  toolResult -> ``tool/result``; bashExecution and custom -> ``user/message`` as pi renders them
  (a bash run marked ``excludeFromContext`` is not sent);
- ``compaction`` -> ``compaction/marker`` keeping from ``firstKeptEntryId`` (v1:
  ``firstKeptEntryIndex``, a line index);
- ``branch_summary`` and ``custom_message`` -> ``user/message``;
- ``model_change``, ``thinking_level_change``, ``label``, ``session_info``, ``custom``: the raw
  record only.
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

__all__ = ["import_pi", "looks_like_pi", "pi_message_events"]

_json = msgspec.json.Encoder()

for _kind in ("message", "compaction", "branch_summary", "custom_message", "model_change",
              "thinking_level_change", "label", "session_info", "custom"):
    record_type("pi", _kind)

# pi wraps these summaries in the text below before sending them (pi-coding-agent messages.ts).
_BRANCH_PREFIX = ("The following is a summary of a branch that this conversation came back "
                  "from:\n\n<summary>\n")


def looks_like_pi(record: dict[str, Any]) -> bool:
    """True for the header line of a pi session file."""
    return record.get("type") == "session" and "cwd" in record and "payload" not in record


def _parts(content: Any) -> Any:
    if isinstance(content, str) or content is None:
        return content or ""
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image":
            url = f"data:{block.get('mimeType', 'image/png')};base64,{block.get('data', '')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _bash_text(m: dict[str, Any]) -> str:
    # pi's bashExecutionToText, so the model sees the same words
    text = f"Ran `{m.get('command', '')}`\n"
    output = m.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif m.get("exitCode") not in (None, 0):
        text += f"\n\nCommand exited with code {m.get('exitCode')}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m.get('fullOutputPath')}]"
    return text


def pi_message_events(m: Any) -> list[tuple[str, Any]]:
    """The vocabulary events for one pi ``AgentMessage``."""
    if not isinstance(m, dict):
        return []
    role = m.get("role")
    if role == "user":
        return [("user/message", {"role": "user", "content": _parts(m.get("content"))})]
    if role == "assistant":
        if m.get("stopReason") in ("error", "aborted"):
            return []  # pi drops failed replies from the context it sends
        content = m.get("content")
        blocks: list[Any] = content if isinstance(content, list) else []
        calls = [
            {"id": str(b.get("id")), "type": "function", "function": {
                "name": str(b.get("name")),
                "arguments": _json.encode(b.get("arguments", {})).decode()}}
            for b in blocks if isinstance(b, dict) and b.get("type") == "toolCall"
        ]
        text = "\n".join(str(b.get("text", "")) for b in blocks
                         if isinstance(b, dict) and b.get("type") == "text")
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            msg["tool_calls"] = calls
        if not text and not calls:
            return []
        return [("assistant/message", msg)]
    if role == "toolResult":
        content = _parts(m.get("content"))
        return [("tool/result", {"role": "tool", "tool_call_id": str(m.get("toolCallId")),
                                 "content": content if isinstance(content, str)
                                 else _json.encode(content).decode()})]
    if role == "bashExecution":
        if m.get("excludeFromContext"):
            return []
        return [("user/message", {"role": "user", "content": _bash_text(m)})]
    if role in ("custom", "hookMessage"):
        return [("user/message", {"role": "user", "content": _parts(m.get("content"))})]
    if role == "branchSummary":
        text = _BRANCH_PREFIX + str(m.get("summary")) + "\n</summary>"
        return [("user/message", {"role": "user", "content": text})]
    if role == "compactionSummary":
        return [("compaction/marker", {"summary": str(m.get("summary", ""))})]
    return [("message", m)]


def _events(rec: dict[str, Any]) -> list[tuple[str, Any]]:
    kind = rec.get("type")
    events: list[tuple[str, Any]] = [(record_type("pi", kind), rec)]
    if kind == "message":
        events.extend(pi_message_events(rec.get("message")))
    elif kind == "compaction":
        events.append(("compaction/marker", {"summary": str(rec.get("summary", ""))}))
    elif kind == "branch_summary":
        events.append(("user/message", {
            "role": "user", "content": _BRANCH_PREFIX + str(rec.get("summary")) + "\n</summary>"}))
    elif kind == "custom_message":
        events.append(("user/message", {"role": "user", "content": _parts(rec.get("content"))}))
    return events


def import_pi(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False, records: list[Record] | None = None, problems: list[str] | None = None,
) -> list[ImportResult]:
    """Import one pi session file: one session per leaf, the main one named after the session.

    ``records`` (with the ``problems`` met reading them) are the file's records already read,
    as :mod:`sesstree.interop.follow` hands them over as the file grows; by default the file
    is read here.
    """
    problems = [] if problems is None else problems
    records = read_records(path, problems) if records is None else records
    header: dict[str, Any] = {}
    if records and records[0].data.get("type") == "session":
        header = records[0].data
        records = records[1:]
    tree_format = any("id" in r.data and "parentId" in r.data for r in records)
    key_of_line: dict[int, str] = {}
    entries: list[Entry] = []
    prev: str | None = None
    title = None
    for index, r in enumerate(records, 1):  # index 0 is the header in v1's firstKeptEntryIndex
        rec = r.data
        if tree_format and isinstance(rec.get("id"), str):
            key: str = rec["id"]
            parent = rec.get("parentId") if isinstance(rec.get("parentId"), str) else None
        else:
            key, parent = f"@{r.line}", prev  # v1: in file order
        key_of_line[index] = key
        first_kept = rec.get("firstKeptEntryId")
        if not isinstance(first_kept, str):
            kept_index = rec.get("firstKeptEntryIndex")
            first_kept = key_of_line.get(kept_index) if isinstance(kept_index, int) else None
        if rec.get("type") == "session_info" and isinstance(rec.get("name"), str):
            title = rec["name"]
        entries.append(Entry(r.line, key, parent, _events(rec), first_kept=first_kept))
        prev = key
    tree = build_tree(entries, path)
    sid = header.get("id")
    base = name or session_base("pi", sid, path)
    meta: dict[str, Any] = {"format": "pi", "header": header, "source": str(path)}
    if title is not None:
        meta["title"] = title
    return land_tree(store, tree, path=path, base=base, explicit=name is not None, meta=meta,
                     problems=problems, format="pi", owners=owners, force=force)
