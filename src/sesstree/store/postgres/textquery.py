"""Searching the PostgreSQL store's text index (see :mod:`.textsql` for what it keeps).

A search catches the index up, then reads from one snapshot two streams, each newest first
and each cut at the page's size, and merges them:

1. the rows not indexed yet: queued, or before the back-fill mark (after a catch-up, none,
   or the few another writer committed since; on a store that cannot be written, all of
   them), each tried on its text;
2. the candidates the index gives, a slice at a time: for words and phrases the documents
   holding every folded word (``'w1' & 'w2'``); for a substring, the documents holding, for
   each run of word characters of the pattern, one of the vocabulary's tokens that contain
   it (the trigram index answers a LIKE; a run of one or two characters scans the
   vocabulary), a run bounded on both sides by other characters being a whole token. A run
   found in more than MAX_TERMS tokens is left out of the lookup; a pattern with nothing left
   is answered by a scan of the rows, newest first.

The tsquery is made of lexemes, each quoted (and its quote and backslash escaped), passed as
a parameter: the lexemes are runs of word characters of the folded pattern, and no user input
reaches tsquery syntax as syntax. Each candidate is read and tried with
:func:`~sesstree.store.textmatch.matches` and the filters: the index only narrows where to
look, and what is returned is what a scan of every node finds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..base import IndexHit, SearchQuery
from ..textmatch import candidate_slices, check_query, fold, matches, node_role, node_text
from . import textsql
from .channel import Channel
from .conn import Conn
from .reads import PgReads
from .textindex import LONG, PgTextIndex, node_rows

__all__ = ["MAX_TERMS", "PgSearch"]

#: The most vocabulary tokens one run of a substring is looked up as (see the module).
MAX_TERMS = 128
_WORD = re.compile(r"\w+")
#: No document can match (a run of the substring is in no token).
_NOTHING = ""


def _quoted(lexeme: str) -> str:
    """A lexeme as a tsquery operand: quoted, quotes doubled, backslashes escaped."""
    return "'" + lexeme[:LONG].replace("\\", "\\\\").replace("'", "''") + "'"


class PgSearch:
    """``search_nodes`` through the backend's channel."""

    def __init__(self, channel: Channel, reads: PgReads, index: PgTextIndex) -> None:
        self._channel = channel
        self._reads = reads
        self._index = index

    def search_nodes(self, query: SearchQuery, limit: int, before: int | None = None) -> list[IndexHit]:
        """See :meth:`sesstree.store.base.TextIndex.search_nodes`."""
        check_query(query)
        if limit <= 0:
            return []
        self._index.catch_up()
        with self._channel.lock, self._reads.snapshot():
            return self._channel.run(lambda conn, replay: self._search(conn, query, limit, before))

    def _search(self, conn: Conn, query: SearchQuery, limit: int, before: int | None) -> list[IndexHit]:
        # GIN indexes are read through bitmaps, which the backend's connections leave off
        # (see backend._setup); on for this transaction only.
        conn.execute("SET LOCAL enable_bitmapscan = on")
        # A statement run often is prepared, and a prepared statement's generic plan is the
        # common word's (the newest rows, filtered): for a rare word that reads every
        # document (40 ms at 100,000 nodes, against 0.1 ms). Each search plans for its words.
        conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        top = 2**63 - 1 if before is None else before
        expr = self._plan(conn, query)
        if expr is None:
            hits = self._scan(conn, query, limit, top)
        else:
            found = conn.execute(textsql.STATE).fetchone()
            mark = str(found[0]) if found is not None and found[0] is not None else "0"
            hits = self._unindexed(conn, query, limit, top, int(mark) if mark.isdigit() else 0)
            if expr != _NOTHING:
                hits += self._matched(conn, expr, query, limit, top)
        conn.execute("SET LOCAL enable_bitmapscan = off")  # (inside a batch: its later reads)
        conn.execute("SET LOCAL plan_cache_mode = auto")
        merged = {h.key: h for h in hits}  # (a row may be in both streams: once)
        return sorted(merged.values(), key=lambda h: -h.key)[:limit]

    def _time_filter(self, query: SearchQuery) -> tuple[str, list[float]]:
        where, args = "", []
        if query.since is not None or query.until is not None:
            where = " AND n.t IS NOT NULL"
            if query.since is not None:
                where += " AND n.t >= %s"
                args.append(query.since * 1000)
            if query.until is not None:
                where += " AND n.t <= %s"
                args.append(query.until * 1000)
        return where, args

    def _rows(self, conn: Conn, query: SearchQuery, seqs: list[int]) -> list[Any]:
        """The rows of ``seqs`` that pass the time filter, newest first."""
        where, args = self._time_filter(query)
        rows = conn.execute(textsql.NODE_ROWS.format(where="n.seq = ANY(%s)" + where),
                            [seqs, *args], binary=True).fetchall()
        rows.sort(key=lambda r: -int(r[7]))
        return rows

    def _scan(self, conn: Conn, query: SearchQuery, limit: int, top: int) -> list[IndexHit]:
        """Every row below ``top``, newest first, each tried."""
        where, args = self._time_filter(query)
        hits: list[IndexHit] = []
        slices = candidate_slices(limit)
        while len(hits) < limit:
            rows = conn.execute(textsql.NODE_ROWS.format(
                where="n.seq < %s" + where + " ORDER BY n.seq DESC LIMIT %s"),
                [top, *args, next(slices)], binary=True).fetchall()
            if not rows:
                break
            hits += self._tried(conn, query, rows, limit - len(hits))
            top = int(rows[-1][7])
        return hits

    def _unindexed(self, conn: Conn, query: SearchQuery, limit: int, top: int, mark: int) -> list[IndexHit]:
        """The rows not indexed yet below ``top``, newest first, each tried."""
        hits: list[IndexHit] = []
        slices = candidate_slices(limit)
        while len(hits) < limit:
            seqs = [int(r[0]) for r in conn.execute(
                textsql.UNINDEXED, {"top": top, "n": next(slices), "mark": mark})]
            if not seqs:
                break
            hits += self._tried(conn, query, self._rows(conn, query, seqs), limit - len(hits))
            top = seqs[-1]
        return hits

    def _matched(self, conn: Conn, expr: str, query: SearchQuery, limit: int, top: int) -> list[IndexHit]:
        """The index's candidates for ``expr`` below ``top``, newest first, each tried."""
        hits: list[IndexHit] = []
        slices = candidate_slices(limit)
        while len(hits) < limit:
            seqs = [int(r[0]) for r in conn.execute(
                textsql.CANDIDATES, {"q": expr, "top": top, "n": next(slices)})]
            if not seqs:
                break
            hits += self._tried(conn, query, self._rows(conn, query, seqs), limit - len(hits))
            top = seqs[-1]
        return hits

    def _tried(self, conn: Conn, query: SearchQuery, rows: Sequence[Any], limit: int) -> list[IndexHit]:
        """The rows (newest first) that match, at most ``limit``."""
        roles, types = query.roles, query.types
        hits: list[IndexHit] = []
        for row, type, data in node_rows(self._reads, conn, rows):
            if not type or (types and type not in types):
                continue  # (a row that cannot be read: damage is fsck's to name)
            role = node_role(type, data)
            if roles and role not in roles:
                continue
            text = node_text(type, data)
            if matches(query, text):
                t = row[8]
                hits.append(IndexHit(bytes(row[0]).hex(), type, role, int(row[2]),  # type: ignore[arg-type]
                                     t / 1000 if type_is_int(t) else None, int(row[7]), text))
                if len(hits) >= limit:
                    break
        return hits

    def _plan(self, conn: Conn, query: SearchQuery) -> str | None:
        """The tsquery of ``query``'s candidates; None: no lookup narrows it (scan);
        ``_NOTHING``: no document can match."""
        folded = fold(query.pattern)
        if query.mode != "substring":
            words = dict.fromkeys(_quoted(w) for w in _WORD.findall(folded))
            return " & ".join(words)
        groups: list[str] = []
        for m in _WORD.finditer(folded):
            piece = m.group()
            if m.start() > 0 and m.end() < len(folded):
                groups.append(_quoted(piece))  # bounded on both sides: a whole token
                continue
            terms = self._terms(conn, piece)
            if terms is None:
                continue
            if not terms:
                return _NOTHING
            groups.append("(" + " | ".join(dict.fromkeys(map(_quoted, terms))) + ")")
        return " & ".join(groups) if groups else None

    def _terms(self, conn: Conn, piece: str) -> list[str] | None:
        """The vocabulary's tokens that contain ``piece``; None when more than MAX_TERMS."""
        if len(piece) >= 3:
            # (A run of word characters holds no LIKE wildcard but `_`: escaped.)
            rows: Iterator[Any] = iter(conn.execute(
                textsql.TERMS_LIKE, ("%" + piece.replace("_", "\\_") + "%", MAX_TERMS + 1)))
        else:
            rows = iter(conn.execute(textsql.TERMS_WITH, (piece, MAX_TERMS + 1)))
        found = [t for (t,) in rows if isinstance(t, str) and piece in t]
        return found if len(found) <= MAX_TERMS else None


def type_is_int(value: object) -> bool:
    """Whether a recorded time read back is one (anything else is damage: no time)."""
    return type(value) is int
