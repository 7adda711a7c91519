"""The SQLite store's text index (format 7): what it keeps, and how it follows the nodes.

Three tables, none of them holding a copy of the text (the text is in the nodes):

- ``search_words``: a contentless FTS5 table (``content=''``, ``detail=none``), one document
  per stored node, its rowid the node's ``seq``, its text the node's folded tokens
  (:func:`sesstree.store.textmatch.tokens`) joined by spaces. Its tokenizer is ``ascii``
  with ``_`` a token character: it splits exactly at those spaces (the tokens hold no other
  ASCII character that is not a letter or digit), so what it indexes is what Python said,
  never what FTS5's own Unicode tables would have made of the text. ``detail=none`` keeps
  only which documents hold each token (no positions: a phrase is checked on the text).
- ``search_terms``: every token once (the index's vocabulary), and ``search_grams``, a
  trigram FTS5 index over it (external content: no copy): a substring is looked up among the
  tokens, not in the whole text, so the substring index is the size of the vocabulary.
- ``meta('index_mark')``: the highest ``seq`` indexed. Nodes after it are pending.

The index follows the nodes by catching up: :meth:`SqliteTextIndex.catch_up` indexes the
rows after the mark, a slice per short write transaction that moves the mark with them, so
an append pays nothing for the index, a kill loses nothing (the mark and the documents commit
together), and nodes written by another process, a pull or an import are indexed like any
other. Every search, fsck and count catches up first. gc and ``delete_nodes`` remove the
documents of the rows they delete in their own transaction (a contentless document is removed
by giving its tokens again, so they are read from the row before it goes) and lower the mark
to the highest row left, as a later node may be given a deleted row's number.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgspec

from ...errors import StoreCorruptError, StoreFullError, StoreLockedError, StoreReadOnlyError
from ..base import IndexCounts, Progress
from ..textmatch import node_text, tokens
from .sql import LOOSE_JOIN, NODE_COLS
from .state import ConnState
from .txn import Transactions

__all__ = [
    "DAMAGE", "MARK", "SLICE", "SqliteTextIndex", "expand", "lower_mark",
    "node_rows_sql", "read_mark", "unindex",
]

#: Rows indexed per write transaction while catching up (a writer waits at most one slice).
SLICE = 1_000
MARK = "index_mark"
#: UTF-8 bytes of the search text of the nodes indexed (kept with the documents).
TEXT_BYTES = "index_text_bytes"
#: What reading a damaged row raises.
DAMAGE = (StoreCorruptError, msgspec.DecodeError)
_MARKS = 500  # values per IN (...) list
_decode = msgspec.msgpack.Decoder().decode


def node_rows_sql(state: ConnState, where: str) -> str:
    """The rows of nodes (``NODE_COLS``, depth, recorded time) that ``where`` selects."""
    t = "n.t" if state.times else "NULL"
    return state.q(f"SELECT {NODE_COLS}, n.depth, {t} FROM nodes n {LOOSE_JOIN} "
                   f"LEFT JOIN blobs b ON b.bid = n.bid WHERE {where}")


def expand(state: ConnState, r: Sequence[Any]) -> tuple[str, Any]:
    """A node row's type and decoded payload."""
    type, payload, _ = state.paths.row(r[1], r[3], r[4], r[5], r[6], r[7], r[8])
    return type, _decode(payload)


def read_mark(db: sqlite3.Connection) -> int:
    """The highest row indexed (0: none)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (MARK,)).fetchone()
    try:
        return int(row[0]) if row is not None else 0
    except (TypeError, ValueError):
        return 0  # a damaged mark: index again from the start (fsck then finds duplicates)


def _chunks(values: Sequence[int]) -> Iterator[Sequence[int]]:
    for k in range(0, len(values), _MARKS):
        yield values[k:k + _MARKS]


def _add_terms(db: sqlite3.Connection, terms: Iterable[str]) -> None:
    """Put the tokens not in the vocabulary yet into it and its trigram index."""
    wanted = sorted(set(terms))
    new: list[tuple[str]] = []
    for k in range(0, len(wanted), _MARKS):
        part = wanted[k:k + _MARKS]
        known = {r[0] for r in db.execute(
            f"SELECT term FROM search_terms WHERE term IN ({','.join('?' * len(part))})", part)}
        new += [(term,) for term in part if term not in known]
    if not new:
        return
    # (A row added without an id gets one above every id there: the new terms are the
    # ones above the largest before, and go into the trigram index in one statement.)
    top = int(db.execute("SELECT coalesce(max(id), 0) FROM search_terms").fetchone()[0])
    db.executemany("INSERT INTO search_terms(term) VALUES (?)", new)
    db.execute("INSERT INTO search_grams(rowid, term) SELECT id, term FROM search_terms WHERE id > ?",
               (top,))


def unindex(state: ConnState, seqs: Sequence[int]) -> None:
    """Remove the documents of rows ``seqs`` (about to be deleted, in the caller's write
    transaction; :func:`lower_mark` follows the delete). A row that cannot be read any more
    keeps its document (its tokens are unknown): fsck names it, a rebuild drops it."""
    if not state.text_index or not seqs:
        return
    db = state.db
    mark = read_mark(db)
    gone = 0
    for part in _chunks([s for s in seqs if s <= mark]):
        marks = ",".join("?" * len(part))
        present = {r[0] for r in db.execute(
            f"SELECT id FROM search_words_docsize WHERE id IN ({marks})", part)}
        for r in db.execute(node_rows_sql(state, f"n.seq IN ({marks})"), part).fetchall():
            if r[0] not in present:
                continue
            try:
                type, data = expand(state, r)
            except DAMAGE:
                continue
            text = node_text(type, data)
            gone += len(text.encode())
            db.execute("INSERT INTO search_words(search_words, rowid, t) VALUES ('delete', ?, ?)",
                       (r[0], " ".join(tokens(text))))
    _add_bytes(db, -gone)


def lower_mark(state: ConnState) -> None:
    """After rows were deleted: the mark no higher than the highest row left, so that a node
    given a deleted row's number (SQLite reuses the highest) is indexed."""
    if state.text_index:
        state.db.execute(
            "UPDATE meta SET value = CAST(min(CAST(value AS INTEGER), "
            "(SELECT coalesce(max(seq), 0) FROM nodes)) AS TEXT) WHERE key = ?", (MARK,))


def _add_bytes(db: sqlite3.Connection, n: int) -> None:
    if n:
        db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                   "value = CAST(CAST(value AS INTEGER) + ? AS TEXT)", (TEXT_BYTES, str(max(n, 0)), n))


class SqliteTextIndex:
    """Catching the index up, counting it, checking and rebuilding it, on the backend's
    connection (the queries are in :mod:`~.textquery`)."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn

    def pending(self) -> tuple[int, int]:
        """The mark and how many rows after it are still to be indexed."""
        state = self._state
        with state.lock, state.errors():
            mark = read_mark(state.db) if state.text_index else 0
            count = state.db.execute("SELECT count(*) FROM nodes WHERE seq > ?", (mark,)).fetchone()[0]
            return mark, int(count)

    def catch_up(self, progress: Progress | None = None) -> int:
        """Index every row after the mark, a slice per write transaction; returns how many.
        Nothing on a store that cannot be written (its search reads the rows after the mark
        itself, see textquery.py)."""
        state = self._state
        if not state.text_index or state.read_only:
            return 0
        total = self.pending()[1]
        done = 0
        try:
            while total and (n := self._slice(done, total, progress)):
                done += n
        except (StoreReadOnlyError, StoreFullError, StoreLockedError):
            # The store cannot be written now (media gone read-only, a full disk, a writer
            # holding the lock): a search reads the rows after the mark itself.
            pass
        return done

    def _slice(self, done: int, total: int, progress: Progress | None) -> int:
        """Index one slice of rows after the mark, in one write transaction; 0: none left."""
        state = self._state
        with self._txn.write(quiet=True):
            db = state.db
            mark = read_mark(db)
            rows = db.execute(node_rows_sql(state, "n.seq > ? ORDER BY n.seq LIMIT ?"),
                              (mark, SLICE)).fetchall()
            if not rows:
                return 0
            docs: list[tuple[int, str]] = []
            terms: set[str] = set()
            size = 0
            for r in rows:
                try:
                    type, data = expand(state, r)
                except DAMAGE:  # a damaged row: indexed empty (fsck names the damage)
                    type, data = "", None
                text = node_text(type, data)
                size += len(text.encode())
                found = tokens(text)
                terms.update(found)
                docs.append((r[0], " ".join(found)))
            db.executemany("INSERT INTO search_words(rowid, t) VALUES (?, ?)", docs)
            _add_terms(db, terms)
            _add_bytes(db, size)
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (MARK, str(rows[-1][0])))
        if progress is not None:
            progress(done + len(rows), total)
        return len(rows)

    def counts(self) -> IndexCounts:
        """Entries, text bytes (kept as the documents are written), index bytes (from
        SQLite's ``dbstat``, where it is built in)."""
        state = self._state
        self.catch_up()
        if not state.text_index:
            return IndexCounts(0, 0, 0, self.pending()[1])
        with state.lock, state.errors():
            db = state.db
            entries = int(db.execute("SELECT count(*) FROM search_words_docsize").fetchone()[0])
            size = 0
            try:
                # (The index's tables and their indexes, and the children index.)
                names = [r[0] for r in db.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') "
                    "AND (name LIKE 'search%' OR name = 'nodes_parent')")]
                for name in names:
                    size += int(db.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?",
                                           (name,)).fetchone()[0])
            except sqlite3.OperationalError:
                size = 0  # (an SQLite built without dbstat: not measured)
            row = db.execute("SELECT value FROM meta WHERE key = ?", (TEXT_BYTES,)).fetchone()
            text = int(row[0]) if row is not None and str(row[0]).lstrip("-").isdigit() else 0
        return IndexCounts(entries, text, size, self.pending()[1])

    def _texts(self, upto: int) -> Iterator[tuple[Sequence[Any], str]]:
        """Every node row up to row ``upto`` with its search text, in slices of rows
        (bounded memory)."""
        state = self._state
        after = 0
        while True:
            with state.lock, state.errors(), self._txn.snapshot():
                rows = state.db.execute(node_rows_sql(
                    state, "n.seq > ? AND n.seq <= ? ORDER BY n.seq LIMIT ?"),
                    (after, upto, SLICE)).fetchall()
                out = []
                for r in rows:
                    try:
                        type, data = expand(state, r)
                        out.append((r, node_text(type, data)))
                    except DAMAGE:  # damage is the node check's finding, not this one's
                        out.append((r, ""))
            if not rows:
                return
            after = rows[-1][0]
            yield from out

    def faults(self, progress: Progress | None = None) -> list[str]:
        """Nodes with no document or one of the wrong length, documents of no node, tokens
        missing from the vocabulary, and FTS5's own integrity check."""
        state = self._state
        if not state.text_index:
            return []
        self.catch_up()
        faults: list[str] = []
        with state.lock, state.errors():
            db = state.db
            mark = read_mark(db)  # (rows after it, on a store that cannot be written, are pending)
            if not state.read_only:
                # (FTS5's check is an INSERT: it takes the write lock, and writes nothing.)
                try:
                    with self._txn.write(quiet=True):
                        db.execute("INSERT INTO search_words(search_words) VALUES ('integrity-check')")
                        db.execute("INSERT INTO search_grams(search_grams) VALUES ('integrity-check')")
                except (sqlite3.DatabaseError, StoreCorruptError) as exc:
                    faults.append(f"text index: damaged ({exc}): sess fsck --rebuild-index restores it")
                except (StoreReadOnlyError, StoreFullError, StoreLockedError):
                    pass  # not checked this time: the rest of fsck still runs
            stale = db.execute("SELECT id FROM search_words_docsize WHERE id NOT IN "
                               "(SELECT seq FROM nodes) LIMIT 20").fetchall()
            faults += [f"text index: a document for row {r[0]}, which holds no node" for r in stale]
        batch: list[tuple[Sequence[Any], list[str]]] = []
        for r, text in self._texts(mark):
            batch.append((r, tokens(text)))
            if len(batch) >= SLICE:
                faults += self._check_slice(batch)
                batch = []
        faults += self._check_slice(batch)
        return faults

    def _check_slice(self, batch: list[tuple[Sequence[Any], list[str]]]) -> list[str]:
        state = self._state
        if not batch:
            return []
        faults: list[str] = []
        with state.lock, state.errors():
            db = state.db
            seqs = [r[0] for r, _ in batch]
            sizes: dict[int, bytes] = {}
            for part in _chunks(seqs):
                sizes.update(db.execute(f"SELECT id, sz FROM search_words_docsize WHERE id IN "
                                        f"({','.join('?' * len(part))})", part).fetchall())
            terms = sorted({t for _, toks in batch for t in toks})
            known: set[str] = set()
            for k in range(0, len(terms), _MARKS):
                words = terms[k:k + _MARKS]
                known.update(r[0] for r in db.execute(
                    f"SELECT term FROM search_terms WHERE term IN ({','.join('?' * len(words))})", words))
        for r, toks in batch:
            node = r[1].hex()[:12] if isinstance(r[1], bytes) else "?"
            sz = sizes.get(r[0])
            if sz is None:
                faults.append(f"text index: node {node} has no entry")
            elif _varint(sz) != len(toks):
                faults.append(f"text index: the entry of node {node} is not its text "
                              f"({_varint(sz)} tokens indexed, {len(toks)} in the text)")
            missing = [t for t in toks if t not in known]
            if missing:
                faults.append(f"text index: node {node}'s token {missing[0][:40]!r} is not in the vocabulary")
        return faults

    def rebuild(self, progress: Progress | None = None) -> IndexCounts:
        """Drop every document and term and index every node again (resumable: each slice
        commits with the mark, so a killed rebuild goes on from where it stopped)."""
        state = self._state
        if not state.text_index or state.read_only:
            return self.counts()
        with self._txn.write():
            db = state.db
            db.execute("INSERT INTO search_words(search_words) VALUES ('delete-all')")
            db.execute("INSERT INTO search_grams(search_grams) VALUES ('delete-all')")
            db.execute("DELETE FROM search_terms")
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, '0')", (MARK,))
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, '0')", (TEXT_BYTES,))
        self.catch_up(progress)
        return self.counts()


def _varint(sz: bytes) -> int:
    """The first varint of an FTS5 ``docsize`` value: the document's token count."""
    value = 0
    for i, b in enumerate(sz[:9]):
        if i == 8:
            return (value << 8) | b
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value
    return value
