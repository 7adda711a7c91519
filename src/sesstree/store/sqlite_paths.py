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
from itertools import accumulate
from pathlib import Path
from typing import Any

import msgspec
from blake3 import blake3

from ..errors import StoreCorruptError
from ..node import ID_VERSION
from .sqlite_sql import BLOBS_IN, READ_RANGE, READ_RUN, RUN_BREAK, WALK_ROWS

__all__ = ["PathReader", "row_data", "split_row", "verify_node"]

#: Runs shorter than this mean interleaved writers: reading row by row is then cheaper.
_MIN_RUN = 16
_msgpack = msgspec.msgpack.Decoder()
_type_bytes: dict[str, bytes] = {}

#: A piece of a path being read: its packed ids, the length of each row's data, the rows' data
#: concatenated, and (index, compressed payload) for the payloads stored apart.
_Piece = tuple[bytes, list[int], bytes, list[tuple[int, bytes]]]
# The hashed form of a node starts [ID_VERSION, parent, ...; see sesstree.node. A row's data is
# the rest of it (type, then payload), so a node is checked by hashing prefix + parent + data.
_ROOT_HEAD = b"\x94" + msgspec.msgpack.encode(ID_VERSION) + b"\xc0"
_PARENT_HEAD = b"\x94" + msgspec.msgpack.encode(ID_VERSION) + b"\xc4\x20"


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

    def read(
        self, cur: int, need: int, whole: bool
    ) -> tuple[list[str], list[Any], bytes, int | None]:
        """Types, payloads and packed ids of the newest ``need`` nodes of the path ending at
        row ``cur``, oldest first, and the row of the parent of the oldest (None at a root).

        Every node is checked against its id before anything is decoded (``whole``: the path
        must also start at a root), so damaged content raises StoreCorruptError naming the
        node, never a wrong value or a decoding error.
        """
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
                    pieces.append((row[4], _lengths(row[5]), row[0], blobs))
                    got += cur - lo + 1
                    next_seq = base
                    continue
            start, base = self._run_start(cur, need - got)
            if cur - start + 1 < _MIN_RUN and need - got > _MIN_RUN:
                # Short runs: writers interleaved here. Walk row by row instead.
                piece, base = self._walk_rows(cur, need - got)
            else:
                piece = self._read_run(start, cur)
            pieces.append(piece)
            got += len(piece[1])
            next_seq = base
        if got < need or (whole and base is not None):
            raise self._damaged("a path does not match its depth index")
        pieces.reverse()
        data = pieces[0][2] if len(pieces) == 1 else b"".join(p[2] for p in pieces)
        ids = pieces[0][0] if len(pieces) == 1 else b"".join(p[0] for p in pieces)
        lengths = pieces[0][1] if len(pieces) == 1 else [n for p in pieces for n in p[1]]
        apart: dict[int, bytes] = {}
        offset = 0
        for p in pieces:
            for index, compressed in p[3]:
                apart[offset + index] = self.inflate(compressed)
            offset += len(p[1])
        if len(ids) != 32 * len(lengths) or sum(lengths) != len(data):
            raise self._damaged("a node row is unreadable")
        self._verify(self._id_bytes(base), ids, data, lengths, apart)
        try:
            flat = _decode_many(data, 2 * got)
            types: list[str] = flat[0::2]
            if types and set(map(type, types)) != {str}:  # every row must start with its type
                raise ValueError("a row without a type")
            datas = flat[1::2]
            for index, payload in apart.items():
                datas[index] = _msgpack.decode(payload)
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise self._damaged(f"a node row is unreadable ({exc})") from None
        return types, datas, ids, base

    def _verify(
        self, parent: bytes | None, ids: bytes, data: bytes, lengths: list[int],
        apart: dict[int, bytes],
    ) -> None:
        """Hash every node of a path (its parent is the node before it) against its id.

        One blake3 call per node is the cost that remains (~1 us each); the loop around it is
        kept to list comprehensions, and the digests are compared all at once.
        """
        if not lengths:
            return
        ends = list(accumulate(lengths))
        bodies = [data[s:e] for s, e in zip([0, *ends[:-1]], ends, strict=True)]
        for k, payload in apart.items():
            # A payload stored apart: the row holds the type and nil, the blob the payload.
            bodies[k] = bodies[k][:-1] + payload
        first = _ROOT_HEAD if parent is None else _PARENT_HEAD + parent
        heads = [first, *[_PARENT_HEAD + ids[i : i + 32] for i in range(0, len(ids) - 32, 32)]]
        digests = [blake3(h + b).digest() for h, b in zip(heads, bodies, strict=True)]
        if b"".join(digests) != ids:
            bad = next(i for i, d in enumerate(digests) if d != ids[32 * i : 32 * i + 32])
            raise self._damaged(f"node {ids[32 * bad : 32 * bad + 32].hex()[:12]} does not hash to its id")

    def _id_bytes(self, seq: int | None) -> bytes | None:
        if seq is None:
            return None
        row = self._db.execute("SELECT id FROM nodes WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            raise self._damaged(f"node row {seq} is missing")
        found: bytes = row[0]
        return found

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

    def _read_run(self, lo: int, hi: int) -> _Piece:
        """Rows ``lo..hi`` in one statement; payloads stored apart come with their index in
        the run."""
        row = self._db.execute(READ_RUN, (lo, hi)).fetchone()
        if not row[0]:
            raise self._damaged(f"rows {lo}..{hi} are missing")
        return row[2] or b"", _lengths(row[3]), row[0], self._blobs_in(lo, hi) if row[1] else []

    def _blobs_in(self, lo: int, hi: int) -> list[tuple[int, bytes]]:
        return [(seq - lo, data) for seq, data in self._db.execute(BLOBS_IN, (lo, hi))]

    def _walk_rows(self, cur: int, need: int) -> tuple[_Piece, int | None]:
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
        piece = (b"".join(r[2] for r in rows), [len(r[3]) for r in rows],
                 b"".join(r[3] for r in rows), blobs)
        return piece, next_seq


def _lengths(text: str | None) -> list[int]:
    """The lengths SQLite listed with ``group_concat(length(data))``."""
    return [int(n) for n in text.split(",")] if text else []


def verify_node(id: bytes, parent: bytes | None, data: bytes, payload: bytes | None) -> bool:
    """True if a row (its ``data``, and the payload stored apart if any) hashes to ``id``."""
    head = _ROOT_HEAD if parent is None else _PARENT_HEAD + parent
    body = data if payload is None else data[:-1] + payload
    return bool(blake3(head + body).digest() == id)
