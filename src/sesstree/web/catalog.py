"""The list of sessions the forest shows: newest activity first, filtered, one page at a time.

Listing reads the session refs only (one query: name, head, time of the last move), so a page
costs the same on a store of ten sessions or ten thousand. Where a session came from (its
*source*) needs its metadata and a look at its events, so it is worked out only for the sessions
a page needs and cached by ``(name, head)``.

Sources:

- an import: the session has an import origin (:meth:`~sesstree.Store.session_origin`, see
  :mod:`sesstree.interop.provenance`); the source is its format (``claude``, ``pi``, ``codex``...);
- ``proxy``: recorded by ``sess proxy`` (metadata ``sesstree.source`` = ``"proxy"``, or a
  ``step/start`` event naming the wire ``protocol`` among its newest events);
- ``agent``: written by the agent loop (metadata ``sesstree.source`` = ``"agent"``, or turn and
  step events among its newest events);
- ``manual``: anything else (appended by hand, by a script).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import msgspec

from ..node import SESSIONS, NodeId, session_name, short_name
from ..repo.store import Store
from ..store.base import Ref

__all__ = [
    "HISTORY_TAIL", "IMPORT_FORMATS", "SOURCES", "Filter", "Listing", "SessionEntry",
    "all_sessions", "list_sessions", "newest_sessions", "note_history", "parse_day", "source_of",
]

#: Formats an import can come from (the filter accepts each, and ``import`` for any of them).
IMPORT_FORMATS = ("claude", "pi", "codex", "openai", "agents-sdk", "jsonl", "seed", "tree")
#: Every value the source filter takes.
SOURCES = ("import", *IMPORT_FORMATS, "proxy", "agent", "manual")
SOURCE_KEY = "sesstree.source"
_AGENT_TYPES = frozenset({"turn/start", "turn/end", "step/start", "step/end"})
#: How many of a session's newest events are looked at to tell an agent loop's session.
HISTORY_TAIL = 64


class SessionEntry(msgspec.Struct, frozen=True):
    """One session as the forest lists it."""

    name: str
    head: NodeId
    moved: float


class Filter(msgspec.Struct, frozen=True):
    """What the forest is narrowed to. Empty fields do not narrow."""

    name: str = ""
    source: str = ""
    since: float | None = None
    until: float | None = None

    @property
    def active(self) -> bool:
        """True if anything narrows the list."""
        return bool(self.name or self.source or self.since is not None or self.until is not None)


class Listing(msgspec.Struct, frozen=True):
    """One page of sessions; ``total`` is None when the source filter makes it unknown without
    classifying every session (``more`` says whether a next page exists)."""

    sessions: list[SessionEntry]
    offset: int
    total: int | None
    more: bool


def parse_day(text: str, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` (UTC) as a timestamp: the day's start, or with ``end`` its end."""
    text = text.strip()
    if not text:
        return None
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"date {text[:40]!r} is not YYYY-MM-DD") from None
    return day.timestamp() + (86400.0 if end else 0.0)


_lock = threading.Lock()
_sources: dict[tuple[int, str, NodeId], str] = {}


def source_of(store: Store, name: str, head: NodeId) -> str:
    """Where session ``name`` came from (see the module's docstring).

    Its metadata is read every time (small reads, and it can change without the session
    moving); what its events say is cached by head.
    """
    origin = store.session_origin(name)
    if origin is not None:
        return origin.format
    meta = store.get_session_meta(name) or {}
    said = meta.get(SOURCE_KEY)
    if isinstance(said, str) and said:
        return said
    key = (id(store), name, head)
    with _lock:
        found = _sources.get(key)
    if found is None:
        found = _from_history(store, name, head)
        with _lock:
            if len(_sources) > 200_000:
                _sources.clear()
            _sources[key] = found
    return found


def _from_history(store: Store, name: str, head: NodeId) -> str:
    # Only the newest events are read: a session's reflog or whole history can be long.
    tail = store.chain_at(head, HISTORY_TAIL)
    return _told_by(tail.types, tail.datas)


def _told_by(types: Sequence[str], datas: Sequence[Any]) -> str:
    for type, data in zip(types, datas, strict=True):
        if type == "step/start" and isinstance(data, dict) and "protocol" in data:
            return "proxy"  # sess proxy opens each recorded call with the wire protocol
    if _AGENT_TYPES.intersection(types):
        return "agent"
    return "manual"


def note_history(store: Store, name: str, head: NodeId, types: Sequence[str],
                 datas: Sequence[Any]) -> None:
    """Remember what the newest ``HISTORY_TAIL`` events of session ``name`` at ``head`` say
    about its source, read by someone else (the forest reads whole paths anyway)."""
    found = _told_by(types, datas)
    with _lock:
        if len(_sources) > 200_000:
            _sources.clear()
        _sources[(id(store), name, head)] = found


def _matches_source(wanted: str, source: str) -> bool:
    if wanted == "import":
        return source not in ("proxy", "agent", "manual")
    return source == wanted


def all_sessions(store: Store, refs: list[Ref] | None = None) -> list[SessionEntry]:
    """Every session, newest activity first (ties by name); from ``refs`` if given (every ref
    of the store, read once by the caller)."""
    if refs is None:
        refs = store.refs(SESSIONS)
    out = [SessionEntry(name, r.target, r.moved) for r in refs
           if (name := session_name(r.name)) is not None]
    out.sort(key=lambda e: (-e.moved, e.name))
    return out


def _passes(refs: list[Ref], f: Filter) -> list[Ref]:
    """The session refs that pass the name and date filters (not sorted)."""
    needle = f.name.lower()
    out = []
    for r in refs:
        name = session_name(r.name)
        if name is None:
            continue
        if needle and needle not in name.lower():
            continue
        if f.since is not None and r.moved < f.since:
            continue
        if f.until is not None and r.moved >= f.until:
            continue
        out.append(r)
    return out


def _newest_key(r: Ref) -> tuple[float, str]:
    return (-r.moved, r.name)


def _entry(r: Ref) -> SessionEntry:
    return SessionEntry(short_name(r.name), r.target, r.moved)


def newest_sessions(store: Store, offset: int, limit: int) -> Listing:
    """The unfiltered page ``[offset, offset + limit)``, newest first: read through the store's
    index on move time, so a first page costs the same at 10 sessions or 10,000. The total is
    known (and given) only when this is the last page: counting every session would read
    every ref, what the page avoids."""
    offset = max(0, offset)
    page = store.newest_refs(SESSIONS, limit + 1, offset)
    more = len(page) > limit
    total = None if more else offset + len(page)
    return Listing([_entry(r) for r in page[:limit]], offset, total, more)


def list_sessions(store: Store, f: Filter, offset: int, limit: int,
                  refs: list[Ref] | None = None) -> Listing:
    """The page of sessions ``[offset, offset + limit)`` that pass ``f``, newest first."""
    offset = max(0, offset)
    matched = _passes(refs if refs is not None else store.refs(SESSIONS), f)
    if not f.source:
        # Only the first pages are common: pick them without sorting every session.
        end = offset + limit
        top = (heapq.nsmallest(end, matched, key=_newest_key) if end < len(matched) // 4
               else sorted(matched, key=_newest_key))
        return Listing([_entry(r) for r in top[offset:end]], offset, len(matched), end < len(matched))
    candidates = (_entry(r) for r in sorted(matched, key=_newest_key))
    # The source filter classifies sessions newest first, only until the page is full.
    found: list[SessionEntry] = []
    seen = 0
    for e in candidates:
        if not _matches_source(f.source, source_of(store, e.name, e.head)):
            continue
        if seen >= offset:
            if len(found) == limit:
                return Listing(found, offset, None, True)
            found.append(e)
        seen += 1
    return Listing(found, offset, None, False)
