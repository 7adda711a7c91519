"""Gemini CLI's own files, under ``~/.gemini/tmp/<project>/`` (``<project>``: a short name
from ``~/.gemini/projects.json``, or in versions before it the sha256 of the project's path).

Four shapes, newest first (read from Gemini CLI's ``chatRecordingService.ts``, ``logger.ts``):

- ``chats/session-<YYYY-MM-DDTHH-MM>-<8 of the id>.jsonl`` (a sub-agent's:
  ``chats/<parent session id>/<session id>.jsonl``), appended to as the session runs: a first
  line ``{sessionId, projectHash, startTime, lastUpdated, kind?, directories?}``, then one line
  per ``MessageRecord`` (``{id, timestamp, type: user|gemini|info|error|warning, content,
  toolCalls?, thoughts?, tokens?, model?}``; a record whose ``id`` was seen before is that
  message updated: its tool calls, their results, its tokens), ``{"$set": {...}}`` (metadata:
  ``lastUpdated`` after each message, ``summary``; with ``messages``, the whole history
  replaced, as after ``/compress``) and ``{"$rewindTo": id}`` (that message and all after it
  dropped);
- ``chats/session-<...>.json``: before that, the whole ``ConversationRecord`` (the first line's
  fields and ``messages``), rewritten in place after every change;
- ``checkpoint-<tag>.json`` (``/chat save``): the API history, a ``Content[]`` or
  ``{history: Content[], authType?}``;
- ``logs.json``: every prompt the user typed, ``[{sessionId, messageId, timestamp, type,
  message}]``, for all of the project's sessions.

Each record becomes its raw form (``gemini/message``, ``gemini/set``, ``gemini/rewind``,
``gemini/content``, ``gemini/log``) followed by what Gemini CLI sends its model for it
(:func:`~.gemini_content.record_contents`, then :func:`~.gemini_content.content_events`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..node import NodeId, session_ref
from ..repo.store import Store
from . import claude
from .common import ImportResult, free_name
from .gemini_content import CallIds, content_events, record_contents
from .jsonl import Record, decode_line, read_records, record_type, ref_safe, session_base
from .provenance import Origin, Provenance
from .tree import Entry, build_tree, land_tree

__all__ = ["gemini_document", "import_gemini", "import_gemini_jsonl",
           "looks_like_gemini"]

for _kind in ("message", "set", "rewind", "content", "log", "record"):
    record_type("gemini", _kind)


def looks_like_gemini(value: Any) -> bool:
    """True for the first line of a Gemini CLI session (JSONL), or a whole JSON document of
    Gemini CLI's: a conversation record, a checkpoint, the prompt log."""
    if isinstance(value, dict):
        if "sessionId" in value and "projectHash" in value and "uuid" not in value:
            return True
        history = value.get("history")
        return isinstance(history, list) and _is_contents(history)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return _is_contents(value) or all("sessionId" in v and "messageId" in v for v in value)
    return False


def _is_contents(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(c, dict) and "parts" in c and
                               c.get("role") in ("user", "model") for c in items)


def _message_events(record: dict[str, Any], ids: CallIds) -> list[tuple[str, Any]]:
    return [e for c in record_contents(record) for e in content_events(c, ids)]


def _replaced(history: list[Any], ids: CallIds) -> list[tuple[str, Any]]:
    """A history replaced whole (``/compress``): a ``compaction/marker`` that stands for what
    came before with the new history's first message, then the rest of it, so that what is
    sent from here on is the new history and nothing else."""
    new = [e for m in history if isinstance(m, dict) for e in _message_events(m, ids)]
    if new and new[0][0] in ("user/message", "assistant/message"):
        first = new.pop(0)[1]
        text = first.get("content") if isinstance(first.get("content"), str) else ""
        return [("compaction/marker", {"summary": text, "message": first}), *new]
    return [("compaction/marker", {"summary": "the history was replaced"}), *new]


def _written_lately(path: Path) -> bool:
    # As for Claude Code: a file untouched for LIVE_WINDOW seconds is finished.
    try:
        return time.time() - path.stat().st_mtime < claude.LIVE_WINDOW
    except OSError:
        return True


def import_gemini_jsonl(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False, records: list[Record] | None = None, problems: list[str] | None = None,
) -> list[ImportResult]:
    """Import one Gemini CLI session file (JSONL): one session per leaf (a rewind is a branch).

    The file is appended to as the session runs, and the newest model message is appended
    again each time it changes (its tool calls, their results, its tokens). So a message is
    derived once it is whole: a user message at once, a model message when a record of
    another message (or a rewind, or a new history) follows it, or, in a file not written to
    for ``claude.LIVE_WINDOW`` seconds (10 minutes), at the end. Until then it is its raw
    records only, and each later import of the growing file is a fast-forward.
    """
    problems = [] if problems is None else problems
    records = read_records(path, problems) if records is None else records
    header: dict[str, Any] = {}
    if records and looks_like_gemini(records[0].data) and "$set" not in records[0].data:
        header, records = records[0].data, records[1:]
    ids = CallIds()
    entries: list[Entry] = []
    prev: str | None = None
    before: dict[str, str | None] = {}  # message id -> the entry before its first record
    pending: dict[str, Any] | None = None  # the newest model message, not yet whole
    title = header.get("summary") if isinstance(header.get("summary"), str) else None

    def settle() -> list[tuple[str, Any]]:
        nonlocal pending
        done, pending = pending, None
        return _message_events(done, ids) if done is not None else []

    for r in records:
        rec = r.data
        key = f"@{r.line}"
        parent = prev
        events: list[tuple[str, Any]] = []
        if isinstance(rec.get("$rewindTo"), str):
            events = [*settle(), (record_type("gemini", "rewind"), rec)]
            target = rec["$rewindTo"]
            entries.append(Entry(r.line, key, parent, events))
            # What follows goes on from before the message rewound to: the old line is a branch.
            prev = before.get(target) if target in before else None
            before = {m: k for m, k in before.items() if m != target}
            continue
        if isinstance(rec.get("$set"), dict):
            update = rec["$set"]
            events.append((record_type("gemini", "set"), rec))
            if isinstance(update.get("summary"), str):
                title = update["summary"]
            history = update.get("messages")
            if isinstance(history, list):
                events[:0] = settle()
                events.extend(_replaced(history, ids))
        elif isinstance(rec.get("id"), str):
            mid = rec["id"]
            if pending is not None and pending.get("id") != mid:
                events.extend(settle())
            before.setdefault(mid, prev)
            events.append((record_type("gemini", "message"), rec))
            if rec.get("type") == "gemini":
                pending = rec
            else:
                events.extend(_message_events(rec, ids))
        else:
            events.append((record_type("gemini", "record"), rec))
        entries.append(Entry(r.line, key, parent, events))
        prev = key
    if pending is not None:
        if _written_lately(path):
            problems.append(f"{path}: the last model message may still be being written: "
                            "kept as its records, not yet as a message")
        else:
            entries.append(Entry(entries[-1].line, "@end", prev, settle()))
    tree = build_tree(entries, path)
    sid = header.get("sessionId")
    base = name or session_base("gemini", sid, path)
    meta: dict[str, Any] = {"format": "gemini", "header": header, "source": str(path)}
    if title is not None:
        meta["title"] = title
    return land_tree(store, tree, path=path, base=base, explicit=name is not None, meta=meta,
                     problems=problems, format="gemini", owners=owners, force=force)


def gemini_document(path: Path) -> Any:
    """The whole JSON document of a ``.json`` file of Gemini CLI's.

    Raises:
        InputError: it cannot be read or is not one JSON value (a file being rewritten).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    try:
        return decode_line(raw)
    except InputError as exc:
        raise InputError(str(exc), path=str(path)) from None


def import_gemini(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False,
) -> list[ImportResult]:
    """Import one Gemini CLI file of any of its shapes (see the module).

    Raises:
        InputError: a ``.json`` file that is not one JSON document of Gemini CLI's.
    """
    if not path.name.endswith(".json"):
        return import_gemini_jsonl(store, path, name, owners=owners, force=force)
    doc = gemini_document(path)
    ids = CallIds()
    entries: list[Entry] = []
    meta: dict[str, Any] = {"format": "gemini", "source": str(path)}
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        # A whole conversation record: its fields (rewritten with every message) apart.
        meta["document"] = {k: v for k, v in doc.items() if k != "messages"}
        if isinstance(doc.get("summary"), str):
            meta["title"] = doc["summary"]
        items, kind, base = doc["messages"], "message", session_base(
            "gemini", doc.get("sessionId"), path)
    elif isinstance(doc, list) and doc and all(isinstance(v, dict) and "messageId" in v
                                               for v in doc):
        return _import_log(store, path, name, doc, owners=owners, force=force)
    else:
        history = doc.get("history") if isinstance(doc, dict) else doc
        if not isinstance(history, list):
            raise InputError("not a Gemini CLI file", path=str(path))
        if isinstance(doc, dict):
            meta["document"] = {k: v for k, v in doc.items() if k != "history"}
        items, kind = history, "content"
        base = ref_safe("gemini-" + path.name.removesuffix(".json"))
    prev: str | None = None
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            continue
        events: list[tuple[str, Any]] = [(record_type("gemini", kind), item)]
        events.extend(_message_events(item, ids) if kind == "message"
                      else content_events(item, ids))
        entries.append(Entry(i, f"@{i}", prev, events))
        prev = f"@{i}"
    tree = build_tree(entries, path)
    owners = owners if owners is not None else Provenance(store)
    with store.batch():
        before = _held_messages(store, owners, path) if kind == "message" else None
        results = land_tree(store, tree, path=path, base=name or base,
                            explicit=name is not None, meta=meta, problems=[], format="gemini",
                            owners=owners, force=force)
        if before is not None and results and results[0].outcome == "rewritten":
            kept = {i.get("id") for i in items if isinstance(i, dict)}
            head, had = before
            if not had <= kept:
                results.append(_keep_dropped(store, owners, results[0], head, meta))
    return results


def _held_messages(store: Store, owners: Provenance,
                   path: Path) -> tuple[NodeId, set[Any]] | None:
    """The head of the session that holds this document's earlier import, and the ids of
    the messages it holds (None if there is none)."""
    held = owners.sessions_of(Origin("gemini", str(path.resolve()), main=True))
    head = store.session_head(held[0]) if held else None
    if head is None:
        return None
    chain = store.chain(head)
    return head, {d.get("id") for t, d in zip(chain.types, chain.datas, strict=True)
                  if t == "gemini/message" and isinstance(d, dict)}


def _keep_dropped(store: Store, owners: Provenance, main: ImportResult, head: NodeId,
                  meta: dict[str, Any]) -> ImportResult:
    """The line a rewrite dropped messages from (a rewind in Gemini CLI, which then rewrote
    its document), kept as a branch of the main session, as a rewind is in its JSONL files.
    A rewrite that only changed messages (a reply's tokens, its tool results, added) is not
    one: that line stays in the main session's reflog only."""
    name = free_name(store, f"{main.session}/branch-1")
    store.move_ref(session_ref(name), None, head,
                   f"import: {main.source} dropped messages from this line")
    owners.claim(name, Origin("gemini", main.source, main=False), meta)
    return ImportResult(main.source, name, "created", len(store.chain(head)), 0, head)


def _import_log(store: Store, path: Path, name: str | None, doc: list[dict[str, Any]], *,
                owners: Provenance | None, force: bool) -> list[ImportResult]:
    """``logs.json``: the prompts of every session of a project, one chain per session (the
    one the file ends with is the main session, the others its branches)."""
    entries: list[Entry] = []
    last: dict[Any, str] = {}
    for i, item in enumerate(doc, 1):
        sid = item.get("sessionId")
        events: list[tuple[str, Any]] = [(record_type("gemini", "log"), item)]
        if isinstance(item.get("message"), str) and item.get("type") == "user":
            events.append(("user/message", {"role": "user", "content": item["message"]}))
        entries.append(Entry(i, f"@{i}", last.get(sid), events))
        last[sid] = f"@{i}"
    tree = build_tree(entries, path)
    sid = doc[-1].get("sessionId")
    base = name or "gemini-log-" + session_base("gemini", sid, path).removeprefix("gemini-")
    return land_tree(store, tree, path=path, base=base, explicit=name is not None,
                     meta={"format": "gemini", "source": str(path)}, problems=[],
                     format="gemini", owners=owners, force=force)
