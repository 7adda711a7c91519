"""Search over the whole forest: the engine's text index, hits grouped by node with the
sessions that reach each, paged newest first (``Store.search``, ``sess grep``, the web view).

The engine finds distinct nodes (:class:`~sesstree.store.base.TextIndex`): a message shared
by 200 forks is one hit. Which sessions reach each hit on the page is walked down from the
hit (:class:`~sesstree.store.base.Reaching`, bounded), so the cost follows the page, not the
store. Without ``everything`` a hit no session reaches (a rewound-away branch the reflog
keeps, an import's loose nodes) is left out. Searching named revisions reads their paths
instead, and tries each node on them (the scope is what they hold).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import msgspec

from ..errors import SearchQueryError
from ..node import SESSIONS, NodeId, session_name
from ..store.base import (
    Backend,
    IndexHit,
    Reaching,
    ReachingSearch,
    Ref,
    RefsReaching,
    SearchMode,
    SearchQuery,
    TextIndex,
)
from ..store.textmatch import check_query, first_match, matches, node_role, node_text
from .maintenance import text_index

if TYPE_CHECKING:
    from .store import Store

__all__ = ["BOUND", "SearchHit", "SearchPage", "SessionPlace", "clip_beside_match", "search"]

#: Nodes read below a hit to find the sessions that reach it; past it, the count is "at least".
BOUND = 50_000
#: Characters of text shown before and after a match.
BEFORE, AFTER = 60, 100
_decode = msgspec.msgpack.Decoder().decode


class SessionPlace(msgspec.Struct, frozen=True):
    """Where a hit is in one session: ``NAME~back`` (0: the session's head)."""

    name: str
    back: int


class SearchHit(msgspec.Struct, frozen=True):
    """One stored node whose text matches, once however many sessions hold it.

    ``sessions``: where it is in the sessions that reach it (the most recently moved first,
    at most the ``shown`` asked for); ``session_count``: how many reach it in all (at least
    that many when ``complete`` is False: the walk below it stopped at its bound); none for a
    node no session reaches (found with ``everything``). ``before``/``match``/``after``: the
    first match and the text around it, on one line."""

    id: NodeId
    type: str
    role: str
    time: float | None
    before: str
    match: str
    after: str
    sessions: list[SessionPlace]
    session_count: int
    complete: bool = True


class SearchPage(msgspec.Struct, frozen=True):
    """A page of hits, newest first, and where the next one starts (None: no more)."""

    hits: list[SearchHit]
    cursor: str | None


def _index(backend: Backend) -> TextIndex | None:
    return text_index(backend)


def search(store: Store, pattern: str, *, mode: SearchMode = "words", ignore_case: bool = False,
           roles: Sequence[str] = (), types: Sequence[str] = (), since: float | None = None,
           until: float | None = None, revs: Sequence[str] = (), everything: bool = False,
           limit: int = 20, cursor: str | None = None, shown: int = 3) -> SearchPage:
    """The nodes whose text matches ``pattern`` (see :mod:`sesstree.store.textmatch`), newest
    first, ``limit`` a page, from ``cursor`` (a previous page's); in the sessions (or any
    revisions) ``revs`` only when given, else in every session (and, with ``everything``,
    in the nodes no session reaches too).

    Raises:
        SearchQueryError: a pattern that cannot be searched, or a malformed cursor.
        UnknownRevisionError: a revision in ``revs`` that names nothing.
    """
    query = SearchQuery(pattern, mode, ignore_case, tuple(roles), tuple(types), since, until)
    check_query(query)
    limit = max(1, limit)
    if revs:
        return _in_revisions(store, query, revs, limit, cursor)
    before = _parse_cursor(cursor, "k")
    backend = store.backend
    index = _index(backend)
    found: list[SearchHit] = []
    more = False
    size = max(limit, 16)
    reached = backend if not everything and index is not None and callable(
        getattr(backend, "search_reaching", None)) else None
    while len(found) < limit:
        want = size
        # (Pages of hits no session reaches, an aborted import say, are left behind faster
        # and faster: each next page asked for is twice the last, up to 512.)
        size = min(512, size * 2)
        if reached is not None:  # the engine leaves out what no session reaches itself
            pairs = cast(ReachingSearch, reached).search_reaching(query, want, before,
                                                                  SESSIONS, BOUND)
        else:
            page = (index.search_nodes(query, want, before) if index is not None
                    else _scan_page(backend, query, want, before))
            reach = _reaching(backend, [h.id for h in page])
            pairs = [(h, reach.get(h.id, RefsReaching([]))) for h in page]
        for i, (hit, where) in enumerate(pairs):
            if where.refs or everything:
                found.append(_hit(backend, query, hit, where, hit.depth, shown))
            before = hit.key
            if len(found) >= limit:
                more = i + 1 < len(pairs) or len(pairs) == want
                break
        else:
            if len(pairs) < want:
                break
            more = True
    return SearchPage(found, f"k{before}" if more and before is not None else None)


def _parse_cursor(cursor: str | None, kind: str) -> int | None:
    if not cursor:
        return None
    if cursor[:1] != kind or not cursor[1:].isdigit():
        raise SearchQueryError(f"cursor {cursor[:40]!r} is not one this search gave")
    return int(cursor[1:])


def _reaching(backend: Backend, ids: list[NodeId]) -> dict[NodeId, RefsReaching]:
    if not ids:
        return {}
    if callable(getattr(backend, "refs_reaching", None)):
        reaching: Reaching = backend  # type: ignore[assignment]
        return reaching.refs_reaching(ids, SESSIONS, BOUND)
    # The generic walk: up from every session's head (reads every session's path).
    wanted = set(ids)
    out: dict[NodeId, list[tuple[Ref, int]]] = {}
    for ref in backend.list_refs(SESSIONS):
        chain = backend.chain(ref.target)
        depth = chain.start_depth + len(chain) - 1
        for nid in wanted.intersection(chain.ids):
            out.setdefault(nid, []).append((ref, depth))
    return {nid: RefsReaching(sorted(refs, key=lambda r: (-r[0].moved, r[0].name)))
            for nid, refs in out.items()}


def _scan_page(backend: Backend, query: SearchQuery, limit: int, before: int | None) -> list[IndexHit]:
    """A search on a backend with no text index: every node tried (its position as key)."""
    nodes = list(backend.iter_nodes())
    times = backend.recorded([n.id for n in nodes])
    hits: list[IndexHit] = []
    for key in range(min(len(nodes), before if before is not None else len(nodes)) - 1, -1, -1):
        n = nodes[key]
        data = _decode(n.encoded)
        role = node_role(n.type, data)
        text = node_text(n.type, data)
        if _passes(query, n.type, role, times.get(n.id)) and matches(query, text):
            hits.append(IndexHit(n.id, n.type, role, n.depth, times.get(n.id), key, text))
            if len(hits) >= limit:
                break
    return hits


def _passes(query: SearchQuery, type: str, role: str, when: float | None) -> bool:
    if (query.types and type not in query.types) or (query.roles and role not in query.roles):
        return False
    if query.since is None and query.until is None:
        return True
    return when is not None and (query.since is None or when >= query.since) and (
        query.until is None or when <= query.until)


def _hit(backend: Backend, query: SearchQuery, hit: IndexHit, where: RefsReaching, depth: int,
         shown: int) -> SearchHit:
    text = hit.text
    if text is None:
        node = backend.get(hit.id)
        text = node_text(hit.type, _decode(node.encoded)) if node is not None else ""
    before, match, after = snippet(query, text)
    places = [SessionPlace(session_name(ref.name) or ref.name, max(0, top - depth))
              for ref, top in where.refs]
    return SearchHit(hit.id, hit.type, hit.role, hit.time, before, match, after, places[:shown],
                     len(places), where.complete)


def snippet(query: SearchQuery, text: str) -> tuple[str, str, str]:
    """The first match of ``query`` in ``text`` and the text around it, on one line."""
    span = first_match(query, text)
    if span is None:
        return clip_beside_match(text[:AFTER], cut=len(text) > AFTER), "", ""
    at, end = span
    return (clip_beside_match(text[max(0, at - BEFORE):at], cut=at > BEFORE, left=True),
            " ".join(text[at:end].split()),
            clip_beside_match(text[end:end + AFTER], cut=end + AFTER < len(text)))


def clip_beside_match(text: str, *, cut: bool, left: bool = False) -> str:
    """Text beside a match on one line: runs of white space made one space, and the space
    next to the match kept (``the <key> doesn't``, not ``the<key>doesn't``); "…" only where
    the text was ``cut`` short (a message shown whole gets none)."""
    squeezed = " ".join(text.split())
    if squeezed:
        if text[:1].isspace():
            squeezed = " " + squeezed
        if text[-1:].isspace():
            squeezed += " "
    elif text:
        squeezed = " "  # only white space between the match and the rest
    if not cut:
        return squeezed
    return "…" + squeezed if left else squeezed + "…"


def _in_revisions(store: Store, query: SearchQuery, revs: Sequence[str], limit: int,
                  cursor: str | None) -> SearchPage:
    """Search what the paths of ``revs`` hold: each node tried once, with its places."""
    offset = _parse_cursor(cursor, "o") or 0
    places: dict[NodeId, list[SessionPlace]] = {}
    info: dict[NodeId, tuple[str, Any, int]] = {}
    for rev in dict.fromkeys(revs):
        head = store.resolve(rev)
        label = _label(store, rev)
        chain = store.chain(head)
        ids = chain.ids
        top = len(ids) - 1
        for i in range(top, -1, -1):
            nid = ids[i]
            places.setdefault(nid, []).append(SessionPlace(label, top - i))
            info.setdefault(nid, (chain.types[i], chain.datas[i], chain.start_depth + i))
    times = store.backend.recorded(list(info))
    matched: list[tuple[float, int, NodeId, str]] = []
    for order, (nid, (type, data, _)) in enumerate(info.items()):
        role = node_role(type, data)
        if _passes(query, type, role, times.get(nid)) and matches(query, node_text(type, data)):
            matched.append((times.get(nid) or 0.0, -order, nid, role))
    matched.sort(reverse=True)
    hits = []
    for _, _, nid, role in matched[offset:offset + limit]:
        type, data, _ = info[nid]
        before, match, after = snippet(query, node_text(type, data))
        hits.append(SearchHit(nid, type, role, times.get(nid), before, match, after, places[nid],
                              len(places[nid])))
    end = offset + limit
    return SearchPage(hits, f"o{end}" if end < len(matched) else None)


def _label(store: Store, rev: str) -> str:
    """The name a hit in revision ``rev`` is shown under (``LABEL~N``): ``rev`` itself, a
    session's name or any other revision (``quest-1~2`` gives ``quest-1~2~3``)."""
    return rev


def sessions_of(hits: Iterable[SearchHit]) -> list[str]:
    """The sessions the hits are in, each once, in the order they first appear."""
    return list(dict.fromkeys(p.name for h in hits for p in h.sessions))
