"""The web view's search: the store's text index (:func:`sesstree.repo.search.search`, what
``sess grep`` asks too), a page of hits newest first, each stored node once with the sessions
that hold it.

What a person types in a search box is searched ignoring case unless they ask for it
(``case=1``); ``mode`` is ``words`` (every word, whole), ``phrase`` or ``substring``, as
``sess grep``'s ``--phrase`` and ``-F``. ``all=1`` also finds what no session reaches any more
(rewound-away branches the reflog keeps), as ``sess grep --all``.
"""

from __future__ import annotations

from typing import cast, get_args

import msgspec

from ..errors import SearchQueryError
from ..node import NodeId
from ..repo import search as index_search
from ..repo.store import Store
from ..store.base import SearchMode
from ..store.textmatch import tokens

__all__ = ["MODES", "Hit", "SearchPage", "search"]

#: The ways a query matches, as the form offers them.
MODES: tuple[str, ...] = get_args(SearchMode)
#: Sessions named beside a hit; the rest are counted ("and 199 other sessions").
SHOWN = 3


class Place(msgspec.Struct, frozen=True):
    """Where a hit is in one session: ``name~back`` (0: the session's head)."""

    name: str
    back: int


class Hit(msgspec.Struct, frozen=True):
    """One stored node whose text matches, once however many sessions hold it.

    ``session``: the session the hit links to (the most recently moved that holds it; None for
    a node no session reaches, found with ``all=1``); ``sessions``: the first few that hold
    it, ``session_count`` how many in all (at least that many when ``complete`` is False)."""

    id: NodeId
    type: str
    role: str
    time: float | None
    before: str
    match: str
    after: str
    session: str | None
    sessions: list[Place]
    session_count: int
    complete: bool


class SearchPage(msgspec.Struct, frozen=True):
    """A page of hits and where the next one starts (None when there is no more)."""

    query: str
    mode: str
    case: bool
    everything: bool
    hits: list[Hit]
    cursor: str | None  # opaque: pass it back as ``cursor`` for the next page


def search(store: Store, query: str, *, mode: str = "words", case: bool = False,
           everything: bool = False, cursor: str = "", limit: int = 50) -> SearchPage:
    """The nodes whose text matches ``query``, newest first, ``limit`` a page, from
    ``cursor`` (a previous page's). A words or phrase query with no word in it is searched
    as text (``substring``), and the page's ``mode`` says so.

    Raises:
        ValueError: a query that cannot be searched (empty, too long), an unknown ``mode`` or
            a malformed ``cursor``; the message says which.
    """
    query = query.strip()
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode[:40]!r}: one of {', '.join(MODES)}")
    if mode != "substring" and query and not tokens(query):
        # What was typed has no word (``[[[[``, ``->``): a search box finds it as text, as
        # ``sess grep -F`` would, rather than refusing it; the page says which mode it used.
        mode = "substring"
    try:
        page = index_search.search(store, query, mode=cast(SearchMode, mode),
                                   ignore_case=not case, everything=everything,
                                   limit=limit, cursor=cursor or None, shown=SHOWN)
    except SearchQueryError as exc:
        raise ValueError(str(exc)) from None
    hits = [Hit(h.id, h.type, h.role, h.time, h.before, h.match, h.after,
                h.sessions[0].name if h.sessions else None,
                [Place(p.name, p.back) for p in h.sessions], h.session_count, h.complete)
            for h in page.hits]
    return SearchPage(query, mode, case, everything, hits, page.cursor)
