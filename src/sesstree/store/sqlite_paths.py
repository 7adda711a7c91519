"""Reading a path of the DAG out of SQLite fast, and the row format that makes it fast.

A row's ``data`` is the msgpack of the node's type followed by the msgpack of its payload (nil
when the payload is stored apart, compressed). A path whose rows are consecutive is therefore
read as one range: SQLite concatenates the rows' data and msgspec decodes the whole path in one
call, as type, payload, type, payload... See :mod:`sesstree.store.sqlite` for the layout.
"""

from __future__ import annotations

import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

import msgspec

from ..errors import StoreCorruptError
from .sqlite_sql import BLOBS_IN, READ_IDS, READ_RANGE, READ_RUN, RUN_BREAK, WALK_ROWS

__all__ = ["IdPart", "PathReader", "row_data", "split_row"]

#: Runs shorter than this mean interleaved writers: reading row by row is then cheaper.
_MIN_RUN = 16
_msgpack = msgspec.msgpack.Decoder()
_type_bytes: dict[str, bytes] = {}

#: Where the ids of a piece come from: packed bytes, or a row range read only if asked for.
IdPart = bytes | tuple[int, int]
#: A piece of a path being read: its ids, how many nodes, their rows' data concatenated, and
#: (index, compressed payload) for the payloads stored apart.
_Piece = tuple[IdPart, int, bytes, list[tuple[int, bytes]]]


def row_data(type: str, encoded: bytes | None) -> bytes:
    """A row's ``data``: the type's msgpack then the payload's (nil when stored apart)."""
    head = _type_bytes.get(type)
    if head is None:
        head = _type_bytes[type] = msgspec.msgpack.encode(type)
    return head + (encoded if encoded is not None else b"\xc0")


def split_row(data: bytes) -> tuple[str, bytes]:
    """The type and the payload bytes of a row's ``data`` (reads the msgpack str header)."""
    first = data[0]
    if 0xA0 <= first <= 0xBF:
        start, size = 1, first & 0x1F
    elif first == 0xD9:
        start, size = 2, data[1]
    elif first == 0xDA:
        start, size = 3, int.from_bytes(data[1:3], "big")
    else:
        raise ValueError("row data does not start with a type")
    return data[start : start + size].decode(), data[start + size :]


def _decode_many(data: bytes, n: int) -> list[Any]:
    """Decode ``n`` concatenated msgpack values in one call by framing them as one array."""
    if n < 16:
        head = bytes([0x90 | n])
    elif n < 0x10000:
        head = b"\xdc" + struct.pack(">H", n)
    else:
        head = b"\xdd" + struct.pack(">I", n)
    result: list[Any] = _msgpack.decode(head + data)
    return result


class PathReader:
    """Reads the path that ends at a row, for one connection (the caller holds its lock)."""

    def __init__(self, db: sqlite3.Connection, where: Path) -> None:
        self._db = db
        self.path = where

    def _damaged(self, what: str) -> StoreCorruptError:
        return StoreCorruptError(f"store {self.path} is damaged: {what}")

    def inflate(self, compressed: bytes | None) -> bytes:
        """A payload stored apart, decompressed."""
        try:
            return zlib.decompress(compressed or b"")
        except zlib.error as exc:
            raise self._damaged(f"a payload: {exc}") from None

    def read(self, cur: int, need: int) -> tuple[list[str], list[Any], list[IdPart], int | None]:
        """Types, payloads and id sources of the newest ``need`` nodes of the path ending at
        row ``cur``, oldest first, and the row of the parent of the oldest (None at a root)."""
        pieces: list[_Piece] = []  # newest first
        got = 0
        base: int | None = None
        piece: _Piece
        next_seq: int | None = cur
        while next_seq is not None and got < need:
            cur = next_seq
            # Optimistic: most paths are one unbroken run of rows, read in one scan.
            lo = cur - (need - got) + 1
            row = self._db.execute(READ_RANGE, (lo, cur)).fetchone()
            if row[3] == cur - lo + 1 and row[0]:
                base = self._parent_of(lo)
                # A parent always has a smaller row than its child, so the parents of rows
                # lo+1..cur sum to lo + ... + (cur - 1) exactly when each is the row before.
                unbroken = (row[2] or 0) - (base or 0) == (lo + cur - 1) * (cur - lo) // 2
                if unbroken:
                    blobs = self._blobs_in(lo, cur) if row[1] else []
                    pieces.append(((lo, cur), cur - lo + 1, row[0], blobs))
                    got += cur - lo + 1
                    next_seq = base
                    continue
            start, base = self._run_start(cur, need - got)
            if cur - start + 1 < _MIN_RUN and need - got > _MIN_RUN:
                # Short runs: writers interleaved here. Walk row by row instead.
                piece, got_now, base = self._walk_rows(cur, need - got)
            else:
                data, blobs = self._read_run(start, cur)
                got_now = cur - start + 1
                piece = ((start, cur), got_now, data, blobs)
            pieces.append(piece)
            got += got_now
            next_seq = base
        if got < need:
            raise self._damaged("a path is shorter than its depth")
        pieces.reverse()
        data = pieces[0][2] if len(pieces) == 1 else b"".join(p[2] for p in pieces)
        flat = _decode_many(data, 2 * got)
        types: list[str] = flat[0::2]
        if types and set(map(type, types)) != {str}:  # every row must start with its type
            raise self._damaged("a node row is unreadable")
        datas = flat[1::2]
        offset = 0
        for p in pieces:
            for index, compressed in p[3]:
                datas[offset + index] = _msgpack.decode(self.inflate(compressed))
            offset += p[1]
        return types, datas, [p[0] for p in pieces], base

    def packed_ids(self, parts: list[IdPart]) -> bytes:
        """The 32-byte ids of a path read earlier, concatenated, oldest first."""
        out = []
        for part in parts:
            if isinstance(part, tuple):
                out.append(self._db.execute(READ_IDS, part).fetchone()[0] or b"")
            else:
                out.append(part)
        return b"".join(out)

    def _parent_of(self, seq: int) -> int | None:
        row = self._db.execute("SELECT parent FROM nodes WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            raise self._damaged(f"node row {seq} is missing")
        parent: int | None = row[0]
        return parent

    def _run_start(self, cur: int, most: int) -> tuple[int, int | None]:
        """The oldest node of the unbroken run of rows that ends at ``cur`` (at most ``most``
        long) in which each row's parent is the row before it, and that node's parent."""
        lo = cur - most + 1
        row = self._db.execute(RUN_BREAK, (lo, cur)).fetchone()
        start = lo if row is None else int(row[0])
        return start, self._parent_of(start)

    def _read_run(self, lo: int, hi: int) -> tuple[bytes, list[tuple[int, bytes]]]:
        """The data of rows ``lo..hi`` in one statement; payloads stored apart come with their
        index in the run."""
        row = self._db.execute(READ_RUN, (lo, hi)).fetchone()
        if not row[0]:
            raise self._damaged(f"rows {lo}..{hi} are missing")
        return row[0], self._blobs_in(lo, hi) if row[1] else []

    def _blobs_in(self, lo: int, hi: int) -> list[tuple[int, bytes]]:
        return [(seq - lo, data) for seq, data in self._db.execute(BLOBS_IN, (lo, hi))]

    def _walk_rows(self, cur: int, need: int) -> tuple[_Piece, int, int | None]:
        rows: list[Any] = []
        next_seq: int | None = cur
        while next_seq is not None and len(rows) < need:
            lo = next_seq - (need - len(rows)) + 1
            before = len(rows)
            for row in self._db.execute(WALK_ROWS, (lo, next_seq)):
                if row[0] == next_seq:
                    rows.append(row)
                    next_seq = row[1]
                    if len(rows) >= need:
                        break
            if len(rows) == before:
                raise self._damaged(f"node row {next_seq} is missing")
        rows.reverse()
        blobs = [(i, r[4]) for i, r in enumerate(rows) if r[4] is not None]
        piece = (b"".join(r[2] for r in rows), len(rows), b"".join(r[3] for r in rows), blobs)
        return piece, len(rows), next_seq
