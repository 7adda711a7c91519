"""The PostgreSQL store's text index (format 7): catching it up, counting, checking and
rebuilding it (the tables are described in :mod:`.textsql`, the queries in :mod:`.textquery`).

The index follows the nodes by catching up, as on SQLite: an append pays only the trigger
that queues its row (``search_pending``); :meth:`PgTextIndex.catch_up`, run before every
search, fsck and count, indexes the queued rows, then the rows before the back-fill mark, a
slice per short transaction that takes the rows off the queue (or lowers the mark) with the
documents it writes, so a killed catch-up loses nothing and indexes nothing twice. The client
computes each node's tokens with :mod:`sesstree.store.textmatch`: the server only stores
them. Two processes catching up at once take different rows (``SKIP LOCKED``). gc needs no
step of its own: a deleted node's document goes with its row (``ON DELETE CASCADE``), and a
queued row whose node is gone is dropped from the queue when the catch-up reaches it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import msgspec
import psycopg

from ...errors import StoreFullError, StoreLockedError, StoreReadOnlyError
from ..base import IndexCounts, Progress, StoredNode
from ..textmatch import node_text, tokens
from . import packsql, textsql
from .channel import Channel
from .conn import Conn
from .reads import PgReads

__all__ = ["LONG", "SLICE", "WIDE", "PgTextIndex", "lexemes", "node_rows", "text_of"]

#: Rows indexed per transaction while catching up (a search waits for at most a few).
SLICE = 1_000
#: A token longer than this (in characters) is kept in a document as its first LONG
#: characters (a lexeme holds at most 2 KB); a query's word is looked up cut alike.
LONG = 250
#: The most bytes of lexemes a document holds; a node with more distinct tokens is a
#: candidate of every query instead (a tsvector holds at most 1 MB).
WIDE = 900_000
_decode = msgspec.msgpack.Decoder().decode
#: A catch-up that indexed this many rows refreshes the index's statistics.
_ANALYZE_AFTER = 5_000
#: What the catch-up stops at without failing: the store cannot be written now (a standby,
#: a read-only role, a full disk, a lock held too long). A search then reads the rows not
#: indexed itself.
_CANNOT_WRITE = (StoreReadOnlyError, StoreFullError, StoreLockedError)


def lexemes(toks: Iterable[str]) -> list[str] | None:
    """A document's lexemes for a node's tokens: each distinct token, cut to LONG; None when
    they are too many for a tsvector (the node is then a candidate of every query)."""
    found = sorted({t[:LONG] for t in toks})
    if sum(len(t.encode()) + 8 for t in found) > WIDE:
        return None
    return found


def text_of(node: StoredNode | None) -> tuple[str, Any]:
    """A node's type and payload ("" and None when it cannot be read: indexed empty, and the
    node check names the damage)."""
    if node is None or not node.type:
        return "", None
    try:
        return node.type, _decode(node.encoded)
    except (msgspec.DecodeError, ValueError, TypeError):
        return "", None


def node_rows(reads: PgReads, conn: Conn, rows: Iterable[Any]) -> Iterator[tuple[Any, str, Any]]:
    """Rows of :data:`.textsql.NODE_ROWS` with each node's type and payload (packs read on
    ``conn`` as their rows come)."""
    def fetch(pid: int) -> list[Any]:
        return conn.execute(packsql.ONE_PACK, (pid,), binary=True).fetchall()

    for row, node in reads.nodes_of_rows(rows, fetch, tolerant=True):
        type, data = text_of(node)
        yield row, type, data


class PgTextIndex:
    """Catching the index up, counting, checking and rebuilding it, through the backend's
    channel (see the module docstring)."""

    def __init__(self, channel: Channel, reads: PgReads) -> None:
        self._channel = channel
        self._reads = reads

    def _state(self) -> tuple[int, bool]:
        """The back-fill mark and whether rows are queued."""
        rows = self._channel.read(textsql.STATE)
        mark = str(rows[0][0]) if rows and rows[0][0] is not None else "0"
        return (int(mark) if mark.isdigit() else 0), bool(rows and rows[0][1])

    def catch_up(self, progress: Progress | None = None) -> int:
        """Index the queued rows, then the rows before the back-fill mark, a slice per
        transaction; returns how many. Nothing inside a batch or a snapshot (their reads see
        the rows not indexed, and a search reads those itself)."""
        channel = self._channel
        with channel.lock:
            if channel.depth or channel.conn.in_batch:
                return 0
            try:
                mark, queued = self._state()
                if not mark and not queued:
                    return 0
                total = self.counts_now()[3] if progress is not None else 0
                done = 0
                tries = 0
                deferred: set[int] = set()
                while True:
                    n, more = channel.run(partial(self._slice, deferred=deferred))
                    if n < 0:  # a node went (gc) while its row was indexed: again, a few times
                        tries += 1
                        if tries > 3:
                            break
                        continue
                    done += n
                    if progress is not None and n:
                        progress(done, max(total, done))
                    if not more:
                        break
                if done >= _ANALYZE_AFTER:
                    # Fresh statistics, so that a common word's candidates are read along the
                    # primary key and a rare one's through the GIN index (autovacuum would
                    # get there, later).
                    channel.read("ANALYZE search_docs, search_terms", fetch=False)
                return done
            except _CANNOT_WRITE:
                return 0

    def _slice(self, conn: Conn, replay: bool, *, deferred: set[int]) -> tuple[int, bool]:
        """One slice, in one transaction: (rows indexed, whether more may be left); -1 rows:
        the slice was undone (a node it indexed was removed meanwhile). A row that cannot be
        read is queued again (``deferred``: not taken again by this catch-up), so that it is
        indexed once it reads (a search tries it on its text meanwhile, like any row queued)."""
        try:
            with conn.transaction():
                seqs = [int(r[0]) for r in conn.execute(textsql.CLAIM_PENDING, (sorted(deferred), SLICE))]
                if seqs:
                    rows = conn.execute(textsql.PENDING_ROWS, (seqs,), binary=True).fetchall()
                    self._defer(conn, self._index(conn, rows), deferred)
                    return max(len(rows), 1), True
                found = conn.execute(textsql.BACKFILL).fetchone()
                mark = int(found[0]) if found is not None and str(found[0]).isdigit() else 0
                if not mark:
                    return 0, False  # (or another process is back-filling: its slices go on)
                rows = conn.execute(textsql.BACKFILL_ROWS, (mark, SLICE), binary=True).fetchall()
                self._defer(conn, self._index(conn, rows), deferred)
                low = min((int(r[7]) for r in rows), default=1) - 1
                conn.execute("UPDATE meta SET value = %s WHERE key = 'index_backfill'", (str(low),))
                return len(rows), low > 0
        except psycopg.errors.ForeignKeyViolation:
            return -1, True

    @staticmethod
    def _defer(conn: Conn, seqs: list[int], deferred: set[int]) -> None:
        if seqs:
            conn.execute(textsql.REQUEUE, (seqs,))
            deferred.update(seqs)

    def _index(self, conn: Conn, rows: Sequence[Any]) -> list[int]:
        """Write the documents of ``rows`` and their new terms (in the caller's transaction);
        returns the rows that could not be read (not indexed)."""
        docs: list[tuple[int, list[str] | None, int]] = []
        terms: set[str] = set()
        unread: list[int] = []
        for row, type, data in node_rows(self._reads, conn, rows):
            if not type:
                unread.append(int(row[7]))
                continue
            text = node_text(type, data)
            found = tokens(text)
            terms.update(found)
            docs.append((int(row[7]), lexemes(found), len(text.encode())))
        if docs:
            with conn.cursor() as cur:
                cur.executemany(textsql.ADD_DOCS, docs)
        if terms:
            conn.execute(textsql.ADD_TERMS, (sorted(terms),))
        return unread

    def counts_now(self) -> tuple[int, int, int, int]:
        """Entries, text bytes, index bytes, rows still to index (no catch-up first)."""
        row = self._channel.read(textsql.COUNTS)[0]
        return int(row[0]), int(row[1]), int(row[2] or 0), int(row[3])

    def counts(self) -> IndexCounts:
        """See :meth:`sesstree.store.base.TextIndex.index_counts`."""
        self.catch_up()
        return IndexCounts(*self.counts_now())

    def faults(self, progress: Progress | None = None) -> list[str]:
        """Nodes with no entry (not queued), entries that are not their node's tokens,
        tokens missing from the vocabulary (see :meth:`~.base.TextIndex.index_faults`)."""
        self.catch_up()
        channel = self._channel
        mark = self._state()[0]
        faults = [f"text index: node {bytes(r[0]).hex()[:12]} has no entry"
                  for r in channel.read(textsql.MISSING_DOCS, (mark,), binary=True)]
        total = int(channel.read("SELECT count(*) FROM nodes WHERE seq > %s", (mark,))[0][0])
        after, done = mark, 0
        while True:
            got = channel.run(partial(self._check_slice, after=after))
            if got is None:
                break
            after, n, found = got
            done += n
            faults += found
            if progress is not None:
                progress(done, max(total, done))
        return faults

    def _check_slice(self, conn: Conn, replay: bool, *, after: int) -> tuple[int, int, list[str]] | None:
        """Check the entries of the rows after ``after`` (a slice); None: no rows left."""
        rows = conn.execute(textsql.NODE_ROWS.format(where="n.seq > %s ORDER BY n.seq LIMIT %s"),
                            (after, SLICE), binary=True).fetchall()
        if not rows:
            return None
        last = int(rows[-1][7])
        docs = {int(s): (None if wide else set(words or ())) for s, words, wide in
                conn.execute(textsql.DOCS_OF, (after, last)).fetchall()}
        expected: list[tuple[str | None, int, list[str]]] = []
        for row, type, data in node_rows(self._reads, conn, rows):
            expected.append((bytes(row[0]).hex()[:12] if type else None, int(row[7]),
                             tokens(node_text(type, data)) if type else []))
        terms = sorted({t for _, _, toks in expected for t in toks})
        known = {str(r[0]) for r in conn.execute(textsql.KNOWN_TERMS, (terms,))} if terms else set()
        faults: list[str] = []
        for node, seq, toks in expected:
            if seq not in docs or node is None:
                continue  # (queued, or named by MISSING_DOCS; unreadable: the node check's)
            want = lexemes(toks)
            have = docs[seq]
            if (want is None) != (have is None) or (want is not None and set(want) != have):
                faults.append(f"text index: the entry of node {node} is not its text "
                              f"({len(have or ())} words indexed, {len(want or ())} in the text)")
            missing = [t for t in toks if t not in known]
            if missing:
                faults.append(f"text index: node {node}'s token {missing[0][:40]!r} is not in the vocabulary")
        return last, len(rows), faults

    def rebuild(self, progress: Progress | None = None) -> IndexCounts:
        """Drop every entry and term and index every node again, by the back-fill (resumable:
        a killed rebuild goes on at the next catch-up, from where it stopped)."""
        def work(conn: Conn, replay: bool) -> None:
            with conn.transaction():
                for statement in textsql.REBUILD:
                    conn.execute(statement)  # constant SQL

        with self._channel.lock:
            self._channel.run(work)
        self.catch_up(progress)
        return self.counts()

