"""What each page and API call shows, as plain data: one place for both the HTML and the JSON.

Every view reads a bounded amount of the store: a page of sessions, a page of one session's
events, one node and what a bounded check finds around it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import UnknownRevisionError
from ..node import TAGS, Node, NodeId, session_ref, tag_name
from ..repo.folding import turn_start_index
from ..repo.recorded import reflog_dates, stored_dates
from ..repo.store import Store
from ..store.base import Chain
from .catalog import Filter, list_sessions, newest_sessions, source_of
from .diffing import bounded_diff
from .forest import Forest, build_forest
from .forks import Fork, fork_of
from .paths import ID_BYTES, PathCache, id_at, node_of
from .render import Item, conversation, pretty_json, snippet

__all__ = ["DEFAULT_EVENTS", "DEFAULT_REFLOG", "MAX_EVENTS", "MAX_PAGE", "MAX_REFLOG", "Views",
           "items_json"]

#: Sessions per forest page, by default and at most.
DEFAULT_PAGE = 40
MAX_PAGE = 200
#: Events per session page, by default and at most.
DEFAULT_EVENTS = 200
MAX_EVENTS = 2000
#: Sessions a node page checks for the node (newest first), and the events it reads at most
#: to do so (paths already cached cost nothing).
CONTAINS_CHECKED = 300
CONTAINS_READ = 200_000
#: How old the refs listing behind :meth:`Views.version` may be, in seconds.
VERSION_MAX_AGE = 0.5
#: Events a diff shows on each side.
DIFF_SHOWN = 500
#: Reflog entries per page, by default and at most.
DEFAULT_REFLOG = 200
MAX_REFLOG = 2000
#: Events a folded session page reads back at most to begin at a turn's start (a turn
#: streamed as thousands of chunks is longer than a page).
TURN_READ = 50_000
#: The newest moves of a session read to date its events (older ones: the index of moves).
REFLOG_DATES = 2000


class Views:
    """The views of one store, sharing one cache of session paths."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.paths = PathCache(store)
        self._lock = threading.Lock()
        self._version: tuple[float, str] | None = None

    # -- the forest -------------------------------------------------------------------------

    def forest(self, f: Filter, offset: int, limit: int) -> dict[str, Any]:
        """One page of the forest: the sessions, and the rows of the graph drawn from them."""
        store = self.store
        limit = max(1, min(limit, MAX_PAGE))
        with store.snapshot():
            if f.active:
                refs = store.refs()  # sessions and tags in one read
                listing = list_sessions(store, f, offset, limit, refs)
            else:
                # The common page: the sessions that moved last, through an index on move
                # time (what is on screen, not every session), and the tags.
                listing = newest_sessions(store, offset, limit)
                refs = store.refs(TAGS)
            tags: dict[NodeId, list[str]] = {}
            for t in refs:
                if (tag := tag_name(t.name)) is not None:
                    tags.setdefault(t.target, []).append(tag)
            version = _version(store)
            forest: Forest = build_forest(self.paths, listing.sessions, tags,
                                          lambda raw: _type_of(store, raw))
            nodes = {r.id: node_of(store, r.id) for r in forest.rows}
            sources = {s.name: source_of(store, s.name, s.head) for s in listing.sessions}
        rows = []
        for r in forest.rows:
            node = nodes[r.id]
            rows.append({**msgspec.to_builtins(r), "type": node.type, "snippet": snippet(node),
                         "sources": [sources[s] for s in r.sessions if s in sources]})
        return {
            "sessions": [{**msgspec.to_builtins(s), "source": sources[s.name]} for s in listing.sessions],
            "rows": rows,
            "lanes": forest.lanes,
            "offset": listing.offset,
            "limit": limit,
            "total": listing.total,
            "more": listing.more,
            "version": version,
        }

    def version(self) -> str:
        """Changes whenever any session or tag moves: what a page polls to stay live.

        Every open forest page polls it every second, and listing the refs of a store of
        10,000 sessions takes tens of milliseconds: one listing serves every poll within
        ``VERSION_MAX_AGE`` seconds.
        """
        now = time.monotonic()
        with self._lock:
            if self._version is not None and now - self._version[0] < VERSION_MAX_AGE:
                return self._version[1]
        version = _version(self.store)
        with self._lock:
            self._version = (now, version)
        return version

    def forget_version(self) -> None:
        """After a write through this server: the next poll reads the refs again."""
        with self._lock:
            self._version = None

    # -- a session --------------------------------------------------------------------------

    def session(self, name: str, end: str | None, limit: int,
                all_events: bool = False) -> dict[str, Any]:
        """A page of session ``name``'s events ending at ``end`` (default: its head): the
        newest ``limit``, folded (unless ``all_events``) and then begun at a turn's start, so
        that the page opens on a prompt, not on the middle of a turn."""
        store = self.store
        limit = max(1, min(limit, MAX_EVENTS))
        with store.snapshot():
            head = store.session_head(name)
            if head is None:
                raise UnknownRevisionError(f"no session named {name!r}")
            last = store.resolve(end) if end else head
            nodes, older = _window(store, last, limit, folded=not all_events)
            depth = store.depth(last)
            times = _recorded(store, name, nodes)
            meta = store.get_session_meta(name)
            source = source_of(store, name, head)
            tags = sorted(t.name for t in store.tags() if t.target == head)
            moved = store.ref(session_ref(name))
            fork = fork_of(store, name, head)
        items = _page_items(nodes, times, folded=not all_events)
        first = depth - len(nodes) + 1
        return {
            "fork": msgspec.to_builtins(fork) if fork is not None else None,
            "fork_at": _fork_at(fork, items, [n.id for n in nodes], first, depth),
            "name": name,
            "head": head,
            "end": last,
            "at_head": last == head,
            "depth": depth,
            "first": first,
            "older": older,
            "moved": moved.moved if moved is not None else None,
            "source": source,
            "tags": tags,
            "meta": meta,
            "all_events": all_events,
            "items": items,
        }

    def tail(self, name: str, after: str, limit: int = 500,
             all_events: bool = False) -> dict[str, Any]:
        """What session ``name`` gained since node ``after``: ``reset`` when it did not just
        grow from there (rewound, or more than ``limit`` events: reload the page). Folded
        (unless ``all_events``) in the light of the turn ``after`` is in: a turn that ends
        now gets its row (``turn`` names its start: it replaces that turn's row so far)."""
        store = self.store
        with store.snapshot():
            head = store.session_head(name)
            if head is None:
                raise UnknownRevisionError(f"no session named {name!r}")
            if head == after:
                return {"head": head, "items": [], "reset": False}
            grown = store.depth(head) - (store.depth(after) if after else 0)
            if not after or grown <= 0 or grown > limit:
                return {"head": head, "items": [], "reset": True}
            chain = store.chain(head, grown)
            if chain.base != after:
                return {"head": head, "items": [], "reset": True}
            nodes = _nodes(chain)
            context: list[Node] = []
            if not all_events and _closes_turn(nodes):
                # The part of the ending turn the page already shows, to sum it (read once,
                # when the turn ends: a poll while it runs reads only what is new).
                context = _turn_behind(store, NodeId(after)) or []
            times = _recorded(store, name, context + nodes)
        items = conversation(context + nodes, times, folded=not all_events,
                             context=len(context))
        return {"head": head, "items": items, "reset": False}

    def reflog(self, name: str, offset: int = 0, limit: int = DEFAULT_REFLOG) -> dict[str, Any]:
        """A page of the moves of session ``name``, newest first (``name@{N}`` numbering)."""
        limit = max(1, min(limit, MAX_REFLOG))
        offset = max(0, offset)
        page, total = self.store.reflog_page(name, limit, offset)
        if not total:
            raise UnknownRevisionError(f"no session named {name!r} and no reflog for it")
        out = [{"n": offset + i, "old": e.old, "new": e.new, "time": e.time, "reason": e.reason}
               for i, e in enumerate(page)]
        return {"name": name, "entries": out, "exists": self.store.has_session(name),
                "offset": offset, "limit": limit, "total": total,
                "more": offset + limit < total}

    # -- a node -----------------------------------------------------------------------------

    def node(self, rev: str) -> dict[str, Any]:
        """One node in full, its parent, and the sessions (and children) a bounded check finds."""
        store = self.store
        with store.snapshot():
            node = store.show(rev)
            depth = store.depth(node.id)
            sessions = []
            children: set[NodeId] = set()
            listing = list_sessions(store, Filter(), 0, CONTAINS_CHECKED)
            checked = 0
            read = 0  # events read for paths that were not cached
            for s in listing.sessions:
                if read >= CONTAINS_READ and not self.paths.cached(s.head):
                    break
                checked += 1
                fresh = not self.paths.cached(s.head)
                path = self.paths.path(s.head, s.name)
                read += len(path) // ID_BYTES if fresh else 0
                n = len(path) // ID_BYTES
                if n >= depth and id_at(path, depth - 1) == node.id:
                    sessions.append(s.name)
                    if n > depth:
                        children.add(id_at(path, depth))
            tags = sorted(t.name for t in store.tags() if t.target == node.id)
        return {
            "id": node.id,
            "parent": node.parent,
            "type": node.type,
            "depth": depth,
            "data": node.data,
            "json": pretty_json({"id": node.id, "parent": node.parent, "type": node.type,
                                 "data": node.data}, None),
            "children": sorted(children),
            "sessions": sessions,
            "tags": tags,
            "sessions_checked": checked,
            "sessions_total": listing.total,
        }

    # -- a diff -----------------------------------------------------------------------------

    def diff(self, a: str, b: str, all_events: bool = False) -> dict[str, Any]:
        """The last common node of ``a`` and ``b`` and what each added, as conversations
        (folded unless ``all_events``); reads at most ``diffing.DIFF_READ`` events of each
        side (``cut`` when that was not enough)."""
        d = bounded_diff(self.store, a, b, shown=DIFF_SHOWN)
        base = d.base
        return {
            "a": a, "b": b,
            "base": base.id if base else None,
            "base_type": base.type if base else None,
            "base_snippet": snippet(base) if base else "",
            "only_a": d.only_a, "only_b": d.only_b,
            "items_a": _page_items(d.shown_a, {}, folded=not all_events),
            "items_b": _page_items(d.shown_b, {}, folded=not all_events),
            "all_events": all_events,
            "shown": DIFF_SHOWN,
            "cut": d.cut,
            "read": d.most,
        }


def _page_items(nodes: list[Node], times: dict[NodeId, float], *, folded: bool) -> list[Item]:
    """The items of a session page or a diff's side: folded, unless every event folds away
    (a page inside one turn begun further back than ``TURN_READ``, a side that parts inside
    a turn: a long stream's chunks), where showing nothing would say nothing: then every
    event, as it is (:func:`sesstree.repo.folding.fold_or_every`, the rule of ``sess log``)."""
    items = conversation(nodes, times, folded=folded)
    return items if items or not folded else conversation(nodes, times, folded=False)


def _nodes(chain: Chain) -> list[Node]:
    return [Node(i, p, t, d) for i, p, t, d in zip(
        chain.ids, [chain.base, *chain.ids], chain.types, chain.datas, strict=False)]


def _window(store: Store, last: NodeId, limit: int, *,
            folded: bool) -> tuple[list[Node], NodeId | None]:
    """The newest ``limit`` events of the path down to ``last`` (oldest first) and the node
    before them (None at the root). Folded, the window begins at a turn's start: the part of
    a turn begun further back is left to the page before; a window inside one turn (a reply
    streamed as thousands of chunks) reads back to its start, at most ``TURN_READ`` events.
    A window in no turn (a session recorded by ``sess proxy`` or imported holds none) is
    the newest ``limit`` events, as unfolded."""
    chain = store.chain(last, limit)
    nodes = _nodes(chain)
    if not folded or chain.base is None:
        return nodes, chain.base
    at = turn_start_index(nodes)
    if at is not None:
        return nodes[at:], nodes[at - 1].id if at else chain.base
    back = _turn_behind(store, chain.base)
    if back is None:  # no turn began behind it, as far as was read: shown as it is
        return nodes, chain.base
    return back + nodes, back[0].parent


def _turn_behind(store: Store, top: NodeId | None) -> list[Node] | None:
    """The events from the ``turn/start`` nearest behind ``top`` up to ``top`` (oldest first)
    when reading back from ``top`` finds a turn's start before a turn's end; None when it
    finds an end first, or the root or ``TURN_READ`` events come first. Each slice is read
    once (from the base of the one before), larger each time."""
    read: list[list[Node]] = []
    want, total = 64, 0
    while top is not None and total < TURN_READ:
        chain = store.chain(top, min(want, TURN_READ - total))
        nodes = _nodes(chain)
        total += len(nodes)
        for i in range(len(nodes) - 1, -1, -1):
            if nodes[i].type == "turn/end":
                return None
            if nodes[i].type == "turn/start":
                return [n for piece in (nodes[i:], *reversed(read)) for n in piece]
        read.append(nodes)
        top, want = chain.base, 4 * want
    return None


def _closes_turn(nodes: Sequence[Node]) -> bool:
    """Whether ``nodes`` (oldest first) end a turn begun before them: a ``turn/end`` comes
    before any ``turn/start``."""
    return next((n.type == "turn/end" for n in nodes if n.type in ("turn/start", "turn/end")),
                False)


def _recorded(store: Store, name: str, nodes: list[Node]) -> dict[NodeId, float]:
    """When the store recorded each of ``nodes`` (a path, oldest first): the time it keeps with
    each node; for a node written before it kept one, the earliest move of the session's
    newest ``REFLOG_DATES`` that brought it (a reset, a fork dates nothing), and for older
    nodes, the index of the session's moves."""
    times: dict[NodeId, float] = {}
    if stored_dates(store.recorded, nodes, times):
        return times
    entries, _ = store.reflog_page(name, REFLOG_DATES, 0)
    reflog_dates(nodes, entries, times)
    missing = [n.id for n in nodes if n.id not in times]
    if missing:
        times.update(store.reflog_times(session_ref(name), missing))
    return times


def _fork_at(fork: Fork | None, items: list[Item], ids: list[NodeId], first: int,
             depth: int) -> str | None:
    """Where on a page of events (depths ``first`` to ``depth``) the fork mark goes: after the
    item with this id, ``""`` for the top of the page, None when the fork is not on it."""
    if fork is None or fork.depth > depth:
        return None
    if fork.depth < first:
        return ""
    at = fork.depth - first  # the fork node's index in ``ids``
    index = {id: i for i, id in enumerate(ids)}
    before = [it.id for it in items if index.get(it.id, len(ids)) <= at]
    return before[-1] if before else ""


def _type_of(store: Store, raw: bytes) -> str:
    """The type of the stored node with raw id ``raw`` (an id of a path the store gave out:
    StoreCorruptError if it is lost)."""
    return store.node(NodeId(raw.hex())).type


def _version(store: Store) -> str:
    """A stamp that changes whenever any ref moves: every move adds a reflog entry or (an
    agent turn's, a batch's) rewrites the newest one with its time."""
    stamp = store.reflog_stamp()
    return f"{stamp.entries}:{stamp.newest:.6f}"


def items_json(items: list[Item]) -> list[dict[str, Any]]:
    """Conversation items as JSON (the HTML of a message is its rendered markdown)."""
    return [msgspec.to_builtins(item, enc_hook=str) for item in items]
