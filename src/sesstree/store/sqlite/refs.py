"""Reading refs, the reflog and the settings of an SQLite store: a part of
:class:`SqliteBackend`.

A ref's value is its newest reflog entry (see :mod:`sesstree.store.sqlite.backend`).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ...errors import StoreCorruptError
from ...node import NodeId
from ..base import Ref, ReflogEntry, SessionMeta, StoreFormat
from ..meta_rows import HEAD, LEGACY, SESSION, session_meta_of
from ..storable import storable
from .sql import LIST_REFS

__all__ = ["RefReads"]


class RefReads:
    """The ref, reflog and settings reads of the SQLite backend (which provides what is
    declared here)."""

    path: Path
    _db: sqlite3.Connection
    _lock: threading.RLock
    _reflog_sql: str

    def _errors(self) -> AbstractContextManager[None]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _write_folds(self) -> None:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _hex(self, value: object) -> NodeId:
        """A node id read from the file, which must be 32 bytes."""
        if not isinstance(value, bytes) or len(value) != 32:
            raise StoreCorruptError(f"store {self.path} is damaged: a node id is unreadable")
        return NodeId(value.hex())

    def _id_of_seq(self, seq: int | None) -> NodeId | None:
        if seq is None:
            return None
        row = self._db.execute("SELECT id FROM nodes WHERE seq = ?", (seq,)).fetchone()
        return self._hex(row[0]) if row else None

    def get_ref(self, name: str) -> Ref | None:
        if not storable(name):  # a name no store can hold names nothing
            return None
        with self._lock, self._errors():
            self._write_folds()
            row = self._db.execute(
                "SELECT d.id, l.time FROM reflog l LEFT JOIN nodes d ON d.seq = l.new "
                "WHERE l.ref = ? ORDER BY l.n DESC LIMIT 1",
                (name,),
            ).fetchone()
            if row is None or row[0] is None:
                return None
            return Ref(name, self._hex(row[0]), row[1])

    def list_refs(self, prefix: str) -> list[Ref]:
        if not storable(prefix):  # a name no store can hold names nothing
            return []
        with self._lock, self._errors():
            self._write_folds()
            rows = self._db.execute(LIST_REFS, (prefix, len(prefix))).fetchall()
            return [Ref(r[0], self._hex(r[1]), r[2]) for r in rows]

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        if not storable(name or ''):  # a name no store can hold names nothing
            return []
        sql = self._reflog_sql
        with self._lock, self._errors():
            self._write_folds()
            if name is None:
                rows = self._db.execute(sql + " ORDER BY l.time, l.ref, l.n").fetchall()
            else:
                rows = self._db.execute(sql + " WHERE l.ref = ? ORDER BY l.n", (name,)).fetchall()
        return self._entries(rows)

    def _entries(self, rows: list[Any]) -> list[ReflogEntry]:
        """Reflog entries from rows of ``_reflog_sql`` (ref, old id, new id, time, reason,
        started)."""
        hexed = self._hex
        return [
            ReflogEntry(r[0], None if r[1] is None else hexed(r[1]),
                        None if r[2] is None else hexed(r[2]), r[3], r[4], r[5])
            for r in rows
        ]

    def _meta_range(self, prefix: str, name: str | None = None) -> list[tuple[str, str]]:
        # A range on the primary key, not LIKE: names may hold % and _, and a range uses the
        # index. With `name`, the one key.
        if name is not None:
            rows = self._db.execute("SELECT key, value FROM meta WHERE key = ?",
                                    (prefix + name,)).fetchall()
        else:
            rows = self._db.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?",
                                    (prefix, prefix + "\U0010ffff")).fetchall()
        return [(str(k), str(v)) for k, v in rows if str(k).startswith(prefix)]

    def get_session_meta(self, name: str) -> SessionMeta | None:
        if not storable(name):  # a name no store can hold names nothing
            return None
        with self._lock, self._errors():
            rows = self._meta_range(SESSION, name) + self._meta_range(LEGACY, name)
        return session_meta_of(rows).get(name)

    def list_session_meta(self) -> dict[str, SessionMeta]:
        with self._lock, self._errors():
            rows = self._meta_range(SESSION) + self._meta_range(LEGACY)
        return session_meta_of(rows)

    def get_head(self) -> str | None:
        with self._lock, self._errors():
            rows = self._meta_range(HEAD, "")
        return rows[0][1] if rows else None

    def store_format(self) -> StoreFormat:
        with self._lock, self._errors():
            rows = dict(self._db.execute(
                "SELECT key, value FROM meta WHERE key IN ('format', 'ids')").fetchall())
        return StoreFormat(int(rows.get("format", 0)), str(rows.get("ids", "")))
