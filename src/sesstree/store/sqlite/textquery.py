"""Searching the SQLite store's text index (see :mod:`~.textindex` for what it keeps).

A search catches the index up, then reads from one snapshot:

1. the rows after the mark, newest first, each tried on its text (on a store that can be
   written there are none, or the few another writer committed since the catch-up; on one
   opened read-only, every row it has not indexed);
2. the candidates the index gives, newest first, a slice at a time: for words and phrases
   the documents holding every folded word (``"w1" AND "w2"``, each word quoted: the words
   are runs of word characters, so no user input reaches the MATCH syntax); for a substring,
   the documents holding, for each run of word characters of the pattern, one of the tokens
   of the vocabulary that contain it (found through the trigram index, or by a scan of the
   vocabulary for a run shorter than three), a run bounded on both sides by other characters
   being a whole token. A run found in too many tokens to be worth listing is left out of the
   lookup; a pattern with nothing left is read as a scan of the rows, newest first.

Each candidate is read (its type and payload) and tried with
:func:`~sesstree.store.textmatch.matches` and the filters, so that what is returned is
exactly what a scan of every node finds: the index only narrows where to look.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from ..base import IndexHit, SearchQuery
from ..textmatch import candidate_slices, check_query, fold, matches, node_role, node_text
from .state import ConnState
from .textindex import DAMAGE, SqliteTextIndex, expand, node_rows_sql, read_mark
from .txn import Transactions

__all__ = ["MAX_TERMS", "SqliteSearch"]

#: The most vocabulary tokens one run of a substring is looked up as; a run in more is left
#: out of the lookup (it narrows little), and checked on the text like everything else.
MAX_TERMS = 128
_WORD = re.compile(r"\w+")
#: No document can match (a run of the substring is in no token).
_NOTHING = ""
#: Which of a few matching rows are hits (None: all of them).
Keep = Callable[[list[int]], Collection[int]] | None


def _quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


class SqliteSearch:
    """``search_nodes`` on the backend's connection."""

    def __init__(self, state: ConnState, txn: Transactions, index: SqliteTextIndex) -> None:
        self._state = state
        self._txn = txn
        self._index = index

    def search_nodes(
        self, query: SearchQuery, limit: int, before: int | None = None, keep: Keep = None
    ) -> list[IndexHit]:
        """See :meth:`sesstree.store.base.TextIndex.search_nodes`; ``keep`` (called inside
        the search's snapshot, with the keys of a few matches at a time) picks which matches
        are hits."""
        check_query(query)
        if limit <= 0:
            return []
        self._index.catch_up()
        state = self._state
        with state.lock, state.errors(), self._txn.snapshot():
            mark = read_mark(state.db) if state.text_index else 0
            hits = self._scan(query, limit, before, mark, keep)
            if len(hits) >= limit or not state.text_index:
                return hits[:limit]
            below = mark + 1 if before is None else min(before, mark + 1)
            expr = self._plan(query)
            if expr is None:
                hits += self._scan(query, limit - len(hits), below, 0, keep)
            elif expr != _NOTHING:
                hits += self._matched(expr, query, limit - len(hits), below, keep)
            return hits[:limit]

    def _time_filter(self, query: SearchQuery) -> tuple[str, list[float]]:
        where, args = "", []
        if query.since is not None or query.until is not None:
            where = " AND n.t IS NOT NULL" if self._state.times else " AND 0"
            if query.since is not None:
                where += " AND n.t >= ?"
                args.append(query.since * 1000)
            if query.until is not None:
                where += " AND n.t <= ?"
                args.append(query.until * 1000)
        return where, args

    def _scan(
        self, query: SearchQuery, limit: int, before: int | None, lower: int, keep: Keep
    ) -> list[IndexHit]:
        """Rows above ``lower`` and below ``before``, newest first, each tried."""
        state = self._state
        where, args = self._time_filter(query)
        hits: list[IndexHit] = []
        top = before
        slices = candidate_slices(limit)
        while len(hits) < limit:
            cond = "n.seq > ?" + ("" if top is None else " AND n.seq < ?")
            rows = state.db.execute(
                node_rows_sql(state, cond + where + " ORDER BY n.seq DESC LIMIT ?"),
                [lower, *([] if top is None else [top]), *args, next(slices)],
            ).fetchall()
            if not rows:
                break
            top = rows[-1][0]
            hits += self._tried(query, rows, limit - len(hits), keep)
        return hits

    def _matched(self, expr: str, query: SearchQuery, limit: int, before: int, keep: Keep) -> list[IndexHit]:
        """The index's candidates for ``expr`` below ``before``, newest first, each tried."""
        state = self._state
        db = state.db
        where, args = self._time_filter(query)
        hits: list[IndexHit] = []
        top = before
        slices = candidate_slices(limit)
        while len(hits) < limit:
            seqs = [
                r[0]
                for r in db.execute(
                    "SELECT rowid FROM search_words WHERE search_words MATCH ? AND rowid < ? "
                    "ORDER BY rowid DESC LIMIT ?",
                    (expr, top, next(slices)),
                )
            ]
            if not seqs:
                break
            top = seqs[-1]
            marks = ",".join("?" * len(seqs))
            rows = db.execute(node_rows_sql(state, f"n.seq IN ({marks}){where}"), [*seqs, *args]).fetchall()
            rows.sort(key=lambda r: -r[0])
            hits += self._tried(query, rows, limit - len(hits), keep)
        return hits

    def _tried(
        self, query: SearchQuery, rows: Sequence[Sequence[Any]], limit: int, keep: Keep
    ) -> list[IndexHit]:
        """The rows (newest first) that match and that ``keep`` keeps, at most ``limit``;
        ``keep`` is asked about the matches a few at a time (as many as are still wanted)."""
        hits: list[IndexHit] = []
        matched: list[IndexHit] = []
        for hit in self._matches(query, rows):
            matched.append(hit)
            if len(matched) >= limit - len(hits):
                hits += _kept(matched, keep)
                matched = []
                if len(hits) >= limit:
                    return hits[:limit]
        return (hits + _kept(matched, keep))[:limit]

    def _matches(self, query: SearchQuery, rows: Sequence[Sequence[Any]]) -> Iterator[IndexHit]:
        """The rows (newest first) that match, read and tried one by one."""
        state = self._state
        roles, types = query.roles, query.types
        for r in rows:
            try:
                type, data = expand(state, r)
            except DAMAGE:
                continue  # damage is fsck's to name; a search goes on past it
            if types and type not in types:
                continue
            role = node_role(type, data)
            if roles and role not in roles:
                continue
            text = node_text(type, data)
            if matches(query, text):
                t = r[9]
                yield IndexHit(
                    state.hex(r[1]),
                    type,
                    role,
                    int(r[8]),
                    t / 1000 if type_is_int(t) else None,
                    int(r[0]),
                    text,
                )

    def _plan(self, query: SearchQuery) -> str | None:
        """The MATCH expression for ``query``'s candidates; None: no lookup narrows it (scan);
        ``_NOTHING``: no document can match."""
        folded = fold(query.pattern)
        if query.mode != "substring":
            words = dict.fromkeys(_WORD.findall(folded))
            return " AND ".join(map(_quoted, words))
        groups: list[str] = []
        for m in _WORD.finditer(folded):
            piece = m.group()
            if m.start() > 0 and m.end() < len(folded):
                groups.append(_quoted(piece))  # bounded on both sides: a whole token
                continue
            terms = self._terms(piece)
            if terms is None:
                continue
            if not terms:
                return _NOTHING
            groups.append("(" + " OR ".join(map(_quoted, terms)) + ")")
        return " AND ".join(groups) if groups else None

    def _terms(self, piece: str) -> list[str] | None:
        """The tokens of the vocabulary that contain ``piece``; None when there are more than
        MAX_TERMS."""
        db = self._state.db
        if len(piece) >= 3:
            # (The trigram index answers GLOB; a run of word characters holds none of its
            # wildcards.)
            rows: Iterator[Any] = db.execute(
                "SELECT term FROM search_grams WHERE term GLOB ? LIMIT ?", (f"*{piece}*", MAX_TERMS + 1)
            )
        else:
            rows = db.execute(
                "SELECT term FROM search_terms WHERE instr(term, ?) > 0 LIMIT ?", (piece, MAX_TERMS + 1)
            )
        found = [t for (t,) in rows if isinstance(t, str) and piece in t]
        return found if len(found) <= MAX_TERMS else None


def type_is_int(value: object) -> bool:
    """Whether a recorded time read back is one (anything else is damage: no time)."""
    return type(value) is int


def _kept(hits: list[IndexHit], keep: Keep) -> list[IndexHit]:
    if keep is None or not hits:
        return hits
    kept = keep([h.key for h in hits])
    return [h for h in hits if h.key in kept]
