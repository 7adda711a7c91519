"""Search across the message text of the store: a bounded scan, resumable page by page.

The store keeps no text index, so a search reads sessions newest activity first and looks at
the text of their events, each stored node once however many sessions share it. One request
reads at most ``budget`` events and stops at ``limit`` hits; the answer says how many sessions
and events it searched and carries a cursor to go on from there. A search is therefore never
slower than its budget, and on a large store the first page answers about recent sessions first.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace

import msgspec

from ..node import NodeId
from ..repo.search import clip_beside_match
from ..repo.store import Store
from ..text import event_text
from .catalog import all_sessions
from .render import PAGE

__all__ = ["Hit", "SearchPage", "parse_cursor", "search"]

MAX_QUERY = 200
_ID = re.compile(r"[0-9a-f]{64}\Z")
#: What a search reads of an event: its content as the page shows it, the summary, message
#: and reasoning it carries, every tool call's name and arguments (a ``tool/call`` record's
#: too); nothing for an event with no text.
SEARCH = replace(PAGE, fields=("summary", "message", "reasoning", "reasoning_content"),
                 records=True, keep_empty=False, fallback_json=False)


class Hit(msgspec.Struct, frozen=True):
    """One event whose text holds the query, with the session it was found in."""

    session: str
    id: NodeId
    type: str
    before: str
    match: str
    after: str


class SearchPage(msgspec.Struct, frozen=True):
    """Hits, what was searched, and where the next page starts (None when done)."""

    query: str
    hits: list[Hit]
    sessions_searched: int
    sessions_total: int
    events_searched: int
    cursor: str | None  # opaque: pass it back as ``cursor`` for the next page
    clipped: bool = False  # more hits in the sessions searched than ``limit``: narrow the query


def parse_cursor(cursor: str) -> tuple[int, NodeId | None]:
    """The session index and (mid-session) the next node to read that ``cursor`` names.

    Raises:
        ValueError: the cursor is not one a search page gave.
    """
    index, _, node = cursor.strip().partition(".")
    if not index.isdigit() or (node and not _ID.fullmatch(node)):
        raise ValueError(f"cursor {cursor[:80]!r} is not one a search page gave")
    return int(index), NodeId(node) if node else None


def search(store: Store, query: str, *, cursor: str = "", limit: int = 50,
           budget: int = 200_000) -> SearchPage:
    """Events whose text holds ``query`` (case-insensitive), sessions newest first, from where
    ``cursor`` (a previous page's) stopped; reads at most ``budget`` events.

    A session longer than what is left of the budget is read from its head back as far as the
    budget goes; the cursor then says where in it the next page goes on.

    Raises:
        ValueError: a malformed ``cursor``.
    """
    query = query.strip()[:MAX_QUERY]
    start, resume = parse_cursor(cursor) if cursor else (0, None)
    sessions = all_sessions(store)
    needle = query.casefold()
    hits: list[Hit] = []
    clipped = False  # a session held more hits than the page shows
    seen: set[NodeId] = set()
    events = 0
    index = start
    partial: NodeId | None = None  # the next node to read in session ``index``
    budget = max(1, budget)
    while index < len(sessions) and needle:
        entry = sessions[index]
        at_node = resume if index == start and resume is not None else entry.head
        chain = store.chain(at_node, budget - events)
        ids = chain.ids
        finished = chain.base is None
        for i in range(len(ids) - 1, -1, -1):  # newest first, so recent hits come first
            nid = ids[i]
            if nid in seen:
                finished = True
                break  # the rest of this path was searched through another session
            seen.add(nid)
            text = event_text(chain.types[i], chain.datas[i], SEARCH)
            found = _find(text, needle)
            if found is not None:
                if len(hits) >= limit:
                    clipped = True
                    continue
                at, end = found
                hits.append(Hit(entry.name, nid, chain.types[i],
                                clip_beside_match(text[max(0, at - 80):at], cut=at > 80, left=True),
                                text[at:end],
                                clip_beside_match(text[end:end + 120], cut=end + 120 < len(text))))
        events += len(ids)
        if not finished:  # the budget ran out inside this session: go on from its base
            partial = chain.base
            break
        index += 1
        if len(hits) >= limit or events >= budget:
            break
    done = (index >= len(sessions) and partial is None) or not needle
    next_cursor = None if done else f"{index}.{partial}" if partial is not None else str(index)
    return SearchPage(query, hits, index - start, len(sessions), events, next_cursor, clipped)


def _find(text: str, needle: str) -> tuple[int, int] | None:
    """Where ``needle`` (case-folded) first occurs in ``text`` ignoring case: the start and
    end in ``text`` itself. Folding can lengthen a character ("ß" is "ss", "İ" two code
    points), so a place in the folded text is mapped back to the character it came from; the
    match ends after any combining marks on its last letter (an accent is not cut off)."""
    folded = text.casefold()
    at = folded.find(needle)
    if at < 0:
        return None
    if len(folded) == len(text):  # (no character changed length: the places are the same)
        start, end = at, at + len(needle)
    else:
        origin = [i for i, c in enumerate(text) for _ in c.casefold()]
        start, end = origin[at], origin[at + len(needle) - 1] + 1
    while end < len(text) and unicodedata.combining(text[end]):
        end += 1
    return start, end
