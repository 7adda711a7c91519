"""Refs, the reflog and the settings (HEAD, session metadata) of an SQLite store: their reads
and the writes that are not commits (rename, expiry, settings).

A ref's value is its newest reflog entry (see :mod:`sesstree.store.sqlite.backend`).
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import ConflictError
from ...node import NodeId
from ..base import (
    Ref,
    ReflogEntry,
    RefUpdate,
    SessionMeta,
    StoreFormat,
    WatchMark,
    decode_watch_mark,
    encode_watch_mark,
)
from ..meta_rows import HEAD, LEGACY, SESSION, WATCH, session_meta_of, watch_marks_of
from ..storable import check_commit, check_head, check_session_meta, check_text, storable
from .sql import LIST_REFS
from .state import ConnState
from .txn import Transactions

__all__ = ["RefReads", "RefWrites"]


class RefReads:
    """The ref, reflog and settings reads of the backend's connection. Owns nothing: what an
    open batch has not written of its refs' moves yet is written first (``txn``)."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn

    def get_ref(self, name: str) -> Ref | None:
        if not storable(name):  # a name no store can hold names nothing
            return None
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            row = self._state.db.execute(
                "SELECT d.id, l.time FROM reflog l LEFT JOIN nodes d ON d.seq = l.new "
                "WHERE l.ref = ? ORDER BY l.n DESC LIMIT 1",
                (name,),
            ).fetchone()
            if row is None or row[0] is None:
                return None
            return Ref(name, self._state.hex(row[0]), row[1])

    def list_refs(self, prefix: str) -> list[Ref]:
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            rows = self._state.db.execute(LIST_REFS, (prefix, len(prefix))).fetchall()
            return [Ref(r[0], self._state.hex(r[1]), r[2]) for r in rows]

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        if not storable(name or ''):  # a name no store can hold names nothing
            return []
        sql = self._state.reflog_sql
        with self._state.lock, self._state.errors():
            self._txn.write_folds()
            if name is None:
                rows = self._state.db.execute(sql + " ORDER BY l.time, l.ref, l.n").fetchall()
            else:
                rows = self._state.db.execute(sql + " WHERE l.ref = ? ORDER BY l.n", (name,)).fetchall()
        return self.entries(rows)

    def entries(self, rows: list[Any]) -> list[ReflogEntry]:
        """Reflog entries from rows of ``state.reflog_sql`` (ref, old id, new id, time, reason,
        started)."""
        hexed = self._state.hex
        return [
            ReflogEntry(r[0], None if r[1] is None else hexed(r[1]),
                        None if r[2] is None else hexed(r[2]), r[3], r[4], r[5])
            for r in rows
        ]

    def _meta_range(self, prefix: str, name: str | None = None) -> list[tuple[str, str]]:
        # A range on the primary key, not LIKE: names may hold % and _, and a range uses the
        # index. With `name`, the one key.
        if name is not None:
            rows = self._state.db.execute("SELECT key, value FROM meta WHERE key = ?",
                                    (prefix + name,)).fetchall()
        else:
            rows = self._state.db.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?",
                                    (prefix, prefix + "\U0010ffff")).fetchall()
        return [(str(k), str(v)) for k, v in rows if str(k).startswith(prefix)]

    def get_session_meta(self, name: str) -> SessionMeta | None:
        if not storable(name):  # a name no store can hold names nothing
            return None
        with self._state.lock, self._state.errors():
            rows = self._meta_range(SESSION, name) + self._meta_range(LEGACY, name)
        return session_meta_of(rows).get(name)

    def list_session_meta(self) -> dict[str, SessionMeta]:
        with self._state.lock, self._state.errors():
            rows = self._meta_range(SESSION) + self._meta_range(LEGACY)
        return session_meta_of(rows)

    def list_watch_marks(self) -> dict[str, WatchMark]:
        with self._state.lock, self._state.errors():
            return watch_marks_of(self._meta_range(WATCH))

    def get_head(self) -> str | None:
        with self._state.lock, self._state.errors():
            rows = self._meta_range(HEAD, "")
        return rows[0][1] if rows else None

    def store_format(self) -> StoreFormat:
        with self._state.lock, self._state.errors():
            rows = dict(self._state.db.execute(
                "SELECT key, value FROM meta WHERE key IN ('format', 'ids')").fetchall())
        return StoreFormat(int(rows.get("format", 0)), str(rows.get("ids", "")))


class RefWrites:
    """Renaming a ref, expiring its log, and writing the settings, each in one write
    transaction of ``txn``. Owns nothing."""

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        check_commit((), [RefUpdate(old, target, None, reason), RefUpdate(new, None, target,
                                                                          reason)])
        state, txn = self._state, self._txn
        with txn.write():
            txn.heads.pop(old, None)
            txn.heads.pop(new, None)
            seq = state.seq_of(target)
            if seq is None or txn.ref_seq(old) != seq[0]:
                raise txn.conflict(RefUpdate(old, target, None, reason))
            if txn.ref_seq(new) is not None:
                raise txn.conflict(RefUpdate(new, None, target, reason))
            # The log of `old` moves over, after whatever `new` had before (a deleted session).
            row = state.db.execute(
                "SELECT coalesce(max(n), 0) FROM reflog WHERE ref = ?", (new,)
            ).fetchone()
            state.db.execute(
                "UPDATE reflog SET ref = ?, n = n + ? WHERE ref = ?", (new, row[0], old)
            )
            txn.log(new, seq[0], seq[0], reason, time.time())

    def expire_reflog(self, name: str) -> int:
        if not storable(name):  # a name no store can hold names nothing
            return 0
        db = self._state.db
        with self._txn.write():
            # A live ref's newest entry is its value: it stays. A deleted ref's go entirely.
            live = self._txn.ref_seq(name) is not None
            cur = db.execute(
                "DELETE FROM reflog WHERE ref = ?1 AND (NOT ?2 OR n < "
                "(SELECT max(n) FROM reflog WHERE ref = ?1))",
                (name, live),
            )
            # The entry kept no longer remembers where the ref was before it.
            db.execute("UPDATE reflog SET old = NULL WHERE ref = ?", (name,))
            return int(cur.rowcount)

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        text = check_session_meta(name, meta)
        db = self._state.db
        with self._txn.write():
            db.execute("DELETE FROM meta WHERE key = ?", (LEGACY + name,))
            if text is not None:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (SESSION + name, text))
            else:
                db.execute("DELETE FROM meta WHERE key = ?", (SESSION + name,))

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        key = WATCH + check_text(path, "watched path")
        db = self._state.db
        with self._txn.write():  # a write transaction: the read and the write are one step
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            found = decode_watch_mark(str(row[0])) if row is not None else None
            if found != old:
                raise ConflictError(f"the watch mark of {path} moved: another watcher read it")
            if new is None:
                db.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                           (key, encode_watch_mark(new)))

    def set_head(self, value: str) -> None:
        check_head(value)
        with self._txn.write():
            self._state.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (HEAD, value))
