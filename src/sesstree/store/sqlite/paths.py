"""Reading a path of the DAG out of SQLite fast.

A row's ``data`` (:mod:`sesstree.store.rows`) is the msgpack of the node's type followed by the
msgpack of its payload (nil when the payload is stored apart, compressed), or a zstd frame of
those bytes (the row's ``codec`` says so, see :mod:`sesstree.store.codec`). A path whose rows
are consecutive is read as one range: SQLite concatenates the rows' data, the frames are
inflated, every node is hashed against its id, and msgspec decodes the whole path in one call,
as type, payload, type, payload... See :mod:`sesstree.store.sqlite.backend` for the layout.
"""

from __future__ import annotations

import sqlite3
import struct
from itertools import accumulate
from pathlib import Path
from typing import Any

import msgspec
from blake3 import blake3

from ...errors import StoreCorruptError
from ..codec import BLOB_LIMIT, Codec, CodecError, dict_hash
from ..rows import split_row
from .packread import PackedReader
from .sql import BLOBS_IN, READ_RANGE, READ_RUN, RUN_BREAK, WALK_ROWS, without_codec
from .sums import BLOCK, PARENT_HEAD, ROOT_HEAD, SUMS, block_digest

__all__ = ["PathReader", "verify_node"]

# A payload in its node row is at most the store's BLOB_MIN (1 KB); a frame there that claims
# more is damaged (kept loose so that a store written with a larger threshold still reads).
_ROW_LIMIT = 1 << 20
#: Runs shorter than this mean interleaved writers: reading row by row is then cheaper.
_MIN_RUN = 16
_msgpack = msgspec.msgpack.Decoder()

#: A piece of a path being read: its packed ids, the length of each row's data, the rows' data
#: concatenated, (index, compressed payload, codec) for the payloads stored apart, the
#: indexes and codecs of the rows that are frames, and its first row (-1: rows walked one by
#: one, not a range).
_Apart = list[tuple[int, bytes, int | None]]
_Framed = tuple[list[int], list[int]]
_Piece = tuple[bytes, list[int], bytes, _Apart, _Framed, int]
_ROOT_HEAD = ROOT_HEAD
_PARENT_HEAD = PARENT_HEAD


def _array_head(n: int) -> bytes:
    """The msgpack header of an array of ``n`` values: ``n`` concatenated values behind it
    decode in one call."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


class PathReader:
    """Reads the path that ends at a row, for one connection (the caller holds its lock).

    ``codec``: whether the store has format 4's codec columns (a format-3 store opened
    read-only has not; its payloads are all plain or zlib blobs).
    """

    def __init__(self, db: sqlite3.Connection, where: Path, codec: bool = True,
                 packs: bool = False) -> None:
        self._db = db
        self.path = where
        #: Compression contexts and dictionaries of this connection.
        self.codec = Codec(self.load_dict)
        #: Format 5's reader (packs, then the loose tail); None for an older store read as it is.
        self.packed = PackedReader(db, where, self.codec) if packs else None
        self._sql = {
            q: (q if codec else without_codec(q))
            for q in (READ_RANGE, READ_RUN, BLOBS_IN, WALK_ROWS)
        }
        # Block digests (sums.py) come with format 4 (and go with format 5).
        self._sums = codec and not packs

    def _damaged(self, what: str) -> StoreCorruptError:
        return StoreCorruptError(f"store {self.path} is damaged: {what}")

    def load_dict(self, dict_id: int) -> bytes | None:
        row = self._db.execute("SELECT hash, data FROM dicts WHERE id = ?", (dict_id,)).fetchone()
        if row is None:
            return None
        if not isinstance(row[1], bytes) or dict_hash(row[1]) != row[0]:
            # (A CodecError: a read that needs it names its node, fsck the dictionary.)
            raise CodecError(f"compression dictionary {dict_id} does not match its hash")
        data: bytes = row[1]
        return data

    def inflate(self, stored: bytes | None, codec: int | None, node: bytes | None = None,
                limit: int = BLOB_LIMIT) -> bytes:
        """A payload stored as a frame (in a blob, or in its row), inflated. Damage raises
        StoreCorruptError naming ``node`` when it is known."""
        try:
            return self.codec.unpack(stored or b"", codec, limit)
        except CodecError as exc:
            what = f"node {node.hex()[:12]}: its payload" if node is not None else "a payload"
            raise self._damaged(f"{what} cannot be inflated ({exc})") from None

    def row(self, id: bytes | None, data: bytes, blob: bytes | None, codec: int | None,
            bcodec: int | None, pack: int | None, depth: int | None) -> tuple[str, bytes, bytes]:
        """:meth:`expand` of a row that may be packed (``pack``, ``depth``: its columns): a
        packed row's node is read from its pack, checked to be at its place there."""
        if pack is None or self.packed is None:
            return self.expand(id, data, blob, codec, bcodec)
        if not isinstance(id, bytes) or type(depth) is not int:
            raise self._damaged("a node row is unreadable")
        type_, payload, body, _ = self.packed.node(pack, depth, id)
        return type_, payload, body

    def expand(self, id: bytes | None, data: bytes, blob: bytes | None, codec: int | None,
               bcodec: int | None) -> tuple[str, bytes, bytes]:
        """A row's type, payload bytes, and hashed body (type then payload, as in the id)."""
        if codec is not None and isinstance(data, bytes):
            data = self.inflate(data, codec, id, _ROW_LIMIT)
        try:
            if not isinstance(data, bytes):
                raise TypeError("row data is not bytes")
            type, payload = split_row(data)
        except (ValueError, IndexError, UnicodeDecodeError, TypeError):
            raise self._damaged("a node row is unreadable") from None
        if blob is None:
            return type, payload, data
        payload = self.inflate(blob, bcodec, id)
        return type, payload, data[:-1] + payload

    def read(
        self, cur: int, need: int, whole: bool
    ) -> tuple[list[str], list[Any], bytes, bytes | None]:
        """Types, payloads and packed ids of the newest ``need`` nodes of the path ending at
        row ``cur``, oldest first, and the id of the parent of the oldest (None at a root).

        Every node is checked against its id before anything is decoded (``whole``: the path
        must also start at a root), so damaged content raises StoreCorruptError naming the
        node, never a wrong value or a decoding error.
        """
        if self.packed is not None:
            return self.packed.read(cur, need, whole)
        pieces: list[_Piece] = []  # newest first
        got = 0
        base: int | None = None
        piece: _Piece
        next_seq: int | None = cur
        while next_seq is not None and got < need:
            cur = next_seq
            # Optimistic: most paths are one unbroken run of rows, read in one scan.
            lo = cur - (need - got) + 1
            row = self._db.execute(self._sql[READ_RANGE], (lo, cur)).fetchone()
            if row[3] == cur - lo + 1 and row[0]:
                base = self._parent_of(lo)
                # A parent always has a smaller row than its child, so the parents of rows
                # lo+1..cur sum to lo + ... + (cur - 1) exactly when each is the row before.
                unbroken = (row[2] or 0) - (base or 0) == (lo + cur - 1) * (cur - lo) // 2
                if unbroken:
                    blobs = self._blobs_in(lo, cur) if row[1] else []
                    pieces.append(
                        (row[4], _lengths(row[5]), row[0], blobs, self._framed(row[6:9]), lo)
                    )
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
        apart: _Apart = []
        framed: _Framed = ([], [])
        offset = 0
        # (index in the path, first row, count) of each range of rows read
        ranges: list[tuple[int, int, int]] = []
        for p in pieces:
            if p[5] >= 0 and len(p[1]) >= BLOCK:
                ranges.append((offset, p[5], len(p[1])))
            apart += [(offset + index, stored, codec) for index, stored, codec in p[3]]
            framed[0].extend([offset + index for index in p[4][0]] if offset else p[4][0])
            framed[1].extend(p[4][1])
            offset += len(p[1])
        if len(ids) != 32 * len(lengths) or sum(lengths) != len(data):
            raise self._damaged("a node row is unreadable")
        if apart or framed[0]:
            # Some payloads are frames: the hashed bodies are rebuilt, and decoded at once.
            del pieces
            bodies = self._bodies(ids, data, lengths, apart, framed)
            del data, apart
            base_id = self._id_bytes(base)
            self._verify(base_id, ids, bodies, ranges)
            # One copy at a time (the load's memory peak is here): the bodies go as soon as
            # they are joined.
            data = b"".join([_array_head(2 * got), *bodies])
            del bodies
        else:
            base_id = self._id_bytes(base)
            self._verify(base_id, ids, _slices(data, lengths), ranges)
            data = _array_head(2 * got) + data
        try:
            flat: list[Any] = _msgpack.decode(data)
            del data
            types: list[str] = flat[0::2]
            if types and set(map(type, types)) != {str}:  # every row must start with its type
                raise ValueError("a row without a type")
            datas = flat[1::2]
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise self._damaged(f"a node row is unreadable ({exc})") from None
        return types, datas, ids, base_id

    def _bodies(self, ids: bytes, data: bytes, lengths: list[int], apart: _Apart,
                framed: _Framed) -> list[bytes]:
        """Each node's hashed body (type then payload), frames inflated."""
        bodies = _slices(data, lengths)
        rows, codecs = framed
        if rows:
            try:
                inflated = self.codec.unpack_all([bodies[k] for k in rows], codecs, _ROW_LIMIT)
            except CodecError as exc:
                k = rows[exc.index]
                raise self._damaged(
                    f"node {ids[32 * k : 32 * k + 6].hex()}: its payload cannot be inflated ({exc})"
                ) from None
            for k, body in zip(rows, inflated, strict=True):
                bodies[k] = body
        if apart:
            # Payloads stored apart: the row holds the type and nil, the blob the payload.
            try:
                payloads = self.codec.unpack_all(
                    [stored for _, stored, _ in apart], [how for _, _, how in apart], BLOB_LIMIT
                )
            except CodecError as exc:
                k = apart[exc.index][0]
                raise self._damaged(
                    f"node {ids[32 * k : 32 * k + 6].hex()}: its payload cannot be inflated ({exc})"
                ) from None
            for (k, _, _), payload in zip(apart, payloads, strict=True):
                bodies[k] = bodies[k][:-1] + payload
        return bodies

    def _verify(self, parent: bytes | None, ids: bytes, bodies: list[bytes],
                ranges: list[tuple[int, int, int]]) -> None:
        """Hash every node of a path (its parent is the node before it) against its id.

        The whole blocks of rows that have a digest (sums.py) are checked with one blake3
        call each; the other nodes, and those of a block whose digest does not match, with
        one call per node (~1.5 us each), kept to list comprehensions and compared at once.
        """
        if not bodies:
            return
        first = _ROOT_HEAD if parent is None else _PARENT_HEAD + parent
        heads = [first, *[_PARENT_HEAD + ids[i : i + 32] for i in range(0, len(ids) - 32, 32)]]
        checked = self._by_blocks(heads, bodies, ids, ranges) if ranges and self._sums else None
        if checked is None:
            digests = [blake3(h + b).digest() for h, b in zip(heads, bodies, strict=True)]
            if b"".join(digests) == ids:
                return
            bad = next(i for i, d in enumerate(digests) if d != ids[32 * i : 32 * i + 32])
        else:
            rest = [k for k in range(len(bodies)) if not checked[k]]
            bad = next((k for k in rest if blake3(heads[k] + bodies[k]).digest()
                        != ids[32 * k : 32 * k + 32]), -1)
            if bad < 0:
                return
        raise self._damaged(f"node {ids[32 * bad : 32 * bad + 32].hex()[:12]} does not hash to its id")

    def _by_blocks(self, heads: list[bytes], bodies: list[bytes], ids: bytes,
                   ranges: list[tuple[int, int, int]]) -> bytearray | None:
        """Which nodes the block digests of these ranges vouch for (1 each), or None if no
        block has a digest."""
        found = []
        for offset, lo, count in ranges:
            for hi, digest in self._db.execute(SUMS, (lo, lo + count - 1)):
                start = offset + hi - BLOCK + 1 - lo
                found.append((start, digest))
        if not found:
            return None
        parts: list[bytes] = [b""] * (2 * len(bodies))
        parts[0::2] = heads
        parts[1::2] = bodies
        checked = bytearray(len(bodies))
        for start, digest in found:
            end = start + BLOCK
            if block_digest(parts[2 * start : 2 * end], ids[32 * start : 32 * end]) == digest:
                checked[start:end] = b"\x01" * BLOCK
        return checked

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
        row = self._db.execute(self._sql[READ_RUN], (lo, hi)).fetchone()
        if not row[0]:
            raise self._damaged(f"rows {lo}..{hi} are missing")
        blobs = self._blobs_in(lo, hi) if row[1] else []
        return row[2] or b"", _lengths(row[3]), row[0], blobs, self._framed(row[4:7]), lo

    def _framed(self, listed: tuple[str | None, int | None, str | None]) -> _Framed:
        try:
            return _codecs(listed)
        except (ValueError, TypeError):  # a codec that is not a number: a damaged row
            raise self._damaged("a node row is unreadable") from None

    def _blobs_in(self, lo: int, hi: int) -> _Apart:
        return [(seq - lo, data, codec)
                for seq, data, codec in self._db.execute(self._sql[BLOBS_IN], (lo, hi))]

    def _walk_rows(self, cur: int, need: int) -> tuple[_Piece, int | None]:
        rows: list[Any] = []
        next_seq: int | None = cur
        while next_seq is not None and len(rows) < need:
            lo = next_seq - (need - len(rows)) + 1
            before = len(rows)
            for row in self._db.execute(self._sql[WALK_ROWS], (lo, next_seq)):
                if row[0] == next_seq:
                    rows.append(row)
                    next_seq = row[1]
                    if len(rows) >= need:
                        break
            if len(rows) == before:
                raise self._damaged(f"node row {next_seq} is missing")
        rows.reverse()
        if not all(isinstance(r[2], bytes) and isinstance(r[3], bytes) for r in rows):
            raise self._damaged("a node row is unreadable")
        blobs = [(i, r[4], r[6]) for i, r in enumerate(rows) if r[4] is not None]
        framed = ([i for i, r in enumerate(rows) if r[5] is not None],
                  [r[5] for r in rows if r[5] is not None])
        piece = (b"".join(r[2] for r in rows), [len(r[3]) for r in rows],
                 b"".join(r[3] for r in rows), blobs, framed, -1)
        return piece, next_seq


def _slices(data: bytes, lengths: list[int]) -> list[bytes]:
    """``data`` cut into rows of these lengths."""
    if not lengths:
        return []
    ends = list(accumulate(lengths))
    return [data[s:e] for s, e in zip([0, *ends[:-1]], ends, strict=True)]


def _codecs(listed: tuple[str | None, int | None, str | None]) -> _Framed:
    """The indexes and codecs of a range's frames, as SQLite listed them (see _CODECS)."""
    where, first, each = listed
    if not where:
        return [], []
    rows = list(map(int, where.split(",")))
    if each:
        return rows, [int(c) if c.isdigit() else -1 for c in each.split(",")]
    # A codec that is not an integer (a damaged column) is -1: inflating it names its node.
    return rows, [first if type(first) is int else -1] * len(rows)


def _lengths(text: str | None) -> list[int]:
    """The lengths SQLite listed with ``group_concat(length(data))``."""
    return list(map(int, text.split(","))) if text else []


def verify_node(id: bytes, parent: bytes | None, body: bytes) -> bool:
    """True if a node's hashed body (type then payload, see PathReader.expand) hashes to
    ``id`` below ``parent``."""
    if parent is not None and not isinstance(parent, bytes):
        return False  # a damaged id column of the parent's row: SQLite gives what it holds
    head = _ROOT_HEAD if parent is None else _PARENT_HEAD + parent
    return bool(blake3(head + body).digest() == id)
