"""Claude Code transcripts (``~/.claude/projects/<dir>/<session id>.jsonl``).

Entries link by ``uuid``/``parentUuid``. Each entry becomes its raw record as a
``claude/<type>`` event (everything but the file's own ``sessionId``, which goes to the session
metadata: a resumed copy of a session differs from the original in that field only, so leaving
it out of the hashed data lets the copy collapse onto the original) followed by the vocabulary
events the model was sent:

- a user entry: ``user/message`` for its text and images, one ``tool/result`` per
  ``tool_result`` block; a compaction summary (``isCompactSummary``) a ``compaction/marker``;
- an assistant entry: ``assistant/message`` with its text and ``tool_use`` blocks as
  ``tool_calls`` (thinking blocks are kept in the raw record only: they are not resent). One
  reply written as a chain of entries sharing ``message.id`` (one per content block) becomes
  one message, on the last entry of the chain;
- anything else (``system``, ``summary``, ``file-history-snapshot``, ``queue-operation``,
  ``last-prompt``, kinds a newer version invents): the raw record only.

A compaction starts a new root in the file (``parentUuid`` null, or ``logicalParentUuid`` on a
``compact_boundary``); it is linked under the entry it continues, so a session stays one path.
Records without a ``uuid`` are spliced in after the entry before them; those before the first
entry form a chain of their own.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..repo.store import Store
from .common import ImportResult
from .jsonl import Record, read_records, record_type, session_base
from .provenance import Provenance
from .tree import Entry, build_tree, land_tree

__all__ = ["claude_entries", "claude_message_events", "import_claude", "looks_like_claude"]

_json = msgspec.json.Encoder()

_KNOWN = ("user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation",
          "last-prompt")
for _kind in _KNOWN:
    record_type("claude", _kind)


def looks_like_claude(record: dict[str, Any]) -> bool:
    """True for a record of a Claude Code transcript."""
    kind = record.get("type")
    if "parentUuid" in record or ("uuid" in record and "sessionId" in record):
        return True
    return (kind in ("summary", "last-prompt") and "leafUuid" in record) or (
        kind in ("file-history-snapshot", "queue-operation") and "payload" not in record)


def _text_of(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict):
        if block.get("type") == "text":
            return str(block.get("text", ""))
        if block.get("type") == "image":
            return "[image]"
    if isinstance(block, list):
        return "\n".join(_text_of(b) for b in block)
    return _json.encode(block).decode()


def _image_part(block: dict[str, Any]) -> dict[str, Any]:
    src = block.get("source")
    if isinstance(src, dict) and src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    elif isinstance(src, dict) and "url" in src:
        url = str(src["url"])
    else:
        url = ""
    return {"type": "image_url", "image_url": {"url": url}}


def claude_message_events(message: Any, role: str) -> list[tuple[str, Any]]:
    """The vocabulary events for one Claude API message (content string or blocks)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str) or content is None:
        etype = "assistant/message" if role == "assistant" else "user/message"
        return [(etype, {"role": role, "content": content or ""})]
    if not isinstance(content, list):
        return []
    events: list[tuple[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append(_image_part(block))
        elif kind == "tool_use":
            calls.append({"id": str(block.get("id")), "type": "function", "function": {
                "name": str(block.get("name")),
                "arguments": _json.encode(block.get("input", {})).decode()}})
        elif kind == "tool_result":
            text = _text_of(block.get("content", ""))
            if block.get("is_error"):
                text = text or "error"
            events.append(("tool/result", {"role": "tool",
                                           "tool_call_id": str(block.get("tool_use_id")),
                                           "content": text}))
        # thinking, redacted_thinking, documents: kept in the raw record, not resent as chat
    if role == "assistant":
        if parts or calls:
            msg: dict[str, Any] = {"role": "assistant", "content": _flatten(parts)}
            if calls:
                msg["tool_calls"] = calls
            events.append(("assistant/message", msg))
    elif parts:
        events.append(("user/message", {"role": "user", "content": _flatten(parts)}))
    return events


def _flatten(parts: list[dict[str, Any]]) -> Any:
    """Text-only content as one string, as chat APIs take it; mixed content as parts."""
    if not parts:
        return None
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _merge_split_replies(records: list[Record]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Claude Code writes one model reply as several entries, one per content block, chained
    and sharing ``message.id``. The model was sent (and later resent) the reply whole: the
    last entry of such a chain carries the whole message, the ones before it none.

    Returns the whole message by the uuid of each entry that ends a stretch of a reply, and
    the uuids of the entries whose own message is left out.
    """
    reply: dict[str, tuple[str, dict[str, Any], str | None]] = {}  # uuid -> (msg id, msg, parent)
    children: dict[str, list[str]] = {}
    for r in records:
        rec = r.data
        uuid, message = rec.get("uuid"), rec.get("message")
        if rec.get("type") != "assistant" or not isinstance(uuid, str):
            continue
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            continue
        parent = rec.get("parentUuid")
        reply[uuid] = (message["id"], message, parent if isinstance(parent, str) else None)
    for r in records:
        parent = r.data.get("parentUuid")
        uuid = r.data.get("uuid")
        if isinstance(parent, str) and isinstance(uuid, str):
            children.setdefault(parent, []).append(uuid)

    def continues(uuid: str) -> bool:
        own = reply.get(uuid)
        before = reply.get(own[2]) if own is not None and own[2] is not None else None
        return own is not None and before is not None and before[0] == own[0]

    whole: dict[str, dict[str, Any]] = {}
    for uuid, (_, message, parent) in reply.items():  # file order: parents come first
        if continues(uuid) and parent in whole:
            earlier = whole[parent]
            whole[uuid] = {**message, "content": _blocks(earlier) + _blocks(message)}
        else:
            whole[uuid] = message
    silent = {
        uuid for uuid in reply
        if children.get(uuid) and all(continues(child) for child in children[uuid])
    }
    merged = {uuid: m for uuid, m in whole.items() if continues(uuid)}
    return merged, silent


def _reply_in_progress(records: list[Record]) -> tuple[str, int] | None:
    """The uuid and line of the file's newest entry if it is a reply that may still be
    streaming, else None.

    Claude Code appends a reply block by block as it streams, and marks no entry as the last
    one (``stop_reason`` is often null on every entry, even the final one). The newest entry
    of the file, if it is an assistant entry without a ``stop_reason``, may be continued by
    the next write: deriving its message now and again, longer, later would turn a re-import
    into a rewrite. So it stays its raw record until the file grows past it or it carries a
    ``stop_reason``. Only the newest entry can be in progress: the file grows at its end.
    Only a file written to in the last ``LIVE_WINDOW`` seconds is asked: in an older one the
    last reply is finished, and is a message like every other.
    """
    for r in reversed(records):
        uuid = r.data.get("uuid")
        if not isinstance(uuid, str):
            continue
        message = r.data.get("message")
        if (r.data.get("type") == "assistant" and isinstance(message, dict)
                and message.get("stop_reason") is None):
            return uuid, r.line
        return None
    return None


#: A transcript written to within this many seconds may be mid-reply; an older one is finished
#: (Claude Code writes a reply's blocks seconds apart), so its last reply is a message.
LIVE_WINDOW = 600.0


def _may_be_live(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime < LIVE_WINDOW
    except OSError:
        return True


def _entry_events(
    rec: dict[str, Any], raw: dict[str, Any], message: Any = None, silent: bool = False
) -> list[tuple[str, Any]]:
    kind = rec.get("type")
    events: list[tuple[str, Any]] = [(record_type("claude", kind), raw)]
    message = rec.get("message") if message is None else message
    if kind not in ("user", "assistant") or not isinstance(message, dict) or silent:
        return events
    if rec.get("isCompactSummary"):
        # The summary is sent to the model as the user message it is, untagged.
        text = _text_of(message.get("content", ""))
        events.append(("compaction/marker", {
            "summary": text, "message": {"role": "user", "content": text},
        }))
    else:
        events.extend(claude_message_events(message, str(kind)))
    return events


def _session_id(records: list[Record], path: Path) -> str:
    ids = collections.Counter(
        r.data["sessionId"] for r in records if isinstance(r.data.get("sessionId"), str)
    )
    stem = path.name.removesuffix(".jsonl")
    if stem in ids:
        return stem
    return ids.most_common(1)[0][0] if ids else stem


def claude_entries(records: Sequence[Record], raws: Sequence[dict[str, Any]],
                   merged: dict[str, Any], silent: set[str]) -> list[Entry]:
    """The tree entries of a transcript's records, in file order: ``raws[i]`` is what the node
    of ``records[i]`` keeps, ``merged`` and ``silent`` what :func:`_merge_split_replies` (and
    a reply still being written) made of its split replies. The importer and the Claude Agent
    SDK's store build their trees with it, so that the two agree node for node."""
    entries: list[Entry] = []
    last_key: str | None = None  # the previous record of the file, for splicing
    last_main: str | None = None  # the previous main-line entry, for compaction roots
    for r, raw in zip(records, raws, strict=True):
        rec = r.data
        uuid = rec.get("uuid")
        side = bool(rec.get("isSidechain"))
        # a uuid of another type (a damaged file) is no key: a list cannot even be looked up
        events = _entry_events(rec, raw, merged.get(uuid) if isinstance(uuid, str) else None,
                               isinstance(uuid, str) and uuid in silent)
        if not isinstance(uuid, str):
            key = f"@{r.line}"
            entries.append(Entry(r.line, key, last_key, events, splice=last_key is not None,
                                 prelude=last_main is None))
            last_key = key
            continue
        parent = rec.get("parentUuid")
        parent = parent if isinstance(parent, str) else None
        compaction = rec.get("isCompactSummary") or rec.get("subtype") == "compact_boundary"
        if parent is None and compaction and not side and last_main is not None:
            logical = rec.get("logicalParentUuid")
            parent = logical if isinstance(logical, str) else last_main
        entries.append(Entry(r.line, uuid, parent, events, side=side))
        last_key = uuid
        if not side:
            last_main = uuid
    return entries


def import_claude(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False, records: list[Record] | None = None, problems: list[str] | None = None,
) -> list[ImportResult]:
    """Import one Claude Code transcript: one session per leaf, the main one named ``name``.

    ``records`` (with the ``problems`` met reading them) are the file's records already read,
    as :mod:`sesstree.interop.follow` hands them over as the file grows; by default the file
    is read here.
    """
    problems = [] if problems is None else problems
    records = read_records(path, problems) if records is None else records
    session_id = _session_id(records, path)
    merged, silent = _merge_split_replies(records)
    pending = _reply_in_progress(records) if _may_be_live(path) else None
    if pending is not None:
        silent.add(pending[0])
        problems.append(f"{path}:{pending[1]}: the last reply may still be being written (it "
                        "has no stop_reason): kept as its record, not yet as a message")
    raws = [{k: v for k, v in r.data.items() if k != "sessionId"}
             if isinstance(r.data.get("uuid"), str) and r.data.get("sessionId") == session_id
             else r.data for r in records]
    entries = claude_entries(records, raws, merged, silent)
    tree = build_tree(entries, path)
    base = name or session_base("claude", session_id, path, by_id=False)
    meta = {"format": "claude", "sessionId": session_id, "source": str(path)}
    return land_tree(store, tree, path=path, base=base, explicit=name is not None, meta=meta,
                     problems=problems, format="claude", owners=owners, force=force)
