"""Reading the paths and nodes of a format-5 SQLite store: packs, then the loose tail.

A path is a packed prefix and a loose tail (a node is packed only if its parent is, see
:mod:`sesstree.store.packs`). From the head: loose rows are walked back by their parent links,
each node hashed against its id as before, until a packed row (or the root); a packed row
names its pack, which is read once (one row, its checksum, one inflate, one msgspec decode),
and the prefix that ends at the row's node is taken; the read goes on at the pack's base.
Every step checks its link: the node a read comes from is at its place in its pack, and the
parent it goes on to has the id the frame says, so damage in an index row is an error too.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import msgspec
from blake3 import blake3

from ...errors import StoreCorruptError
from ..codec import BLOB_LIMIT, CodecError, inflate_ahead
from ..packs import OpenedPack, PackDamage, checksum, describe, hashed_head, open_frame, raw_nodes
from ..rows import split_row

__all__ = ["PackedReader"]

_PACK = "SELECT depth, base, count, size, codec, sum, data FROM packs WHERE pid = ?"
_HEAD = "SELECT pack, depth, id FROM nodes WHERE seq = ?"
_LOOSE = (
    "SELECT n.seq, n.parent, n.pack, n.id, coalesce(l.data, n.data), b.data, "
    "coalesce(l.codec, n.codec), b.codec FROM nodes n LEFT JOIN loose l ON l.seq = n.seq "
    "LEFT JOIN blobs b ON b.bid = n.bid WHERE n.seq BETWEEN ? AND ? ORDER BY n.seq DESC"
)
_BLOB = "SELECT data, codec FROM blobs WHERE hash = ?"
_MAP = f"PRAGMA mmap_size={1 << 30}"
_UNMAP = "PRAGMA mmap_size=0"
# The packs of a path from the pack ?1 of a row at depth ?3, newest first, until they hold ?2
# nodes or the path's parent row is not packed: each with its base row's depth and id (the
# row the next pack is reached from).
_WALK = """
WITH RECURSIVE walk(pid, k, got) AS (
    SELECT ?1, 0, ?3 - (SELECT depth FROM packs WHERE pid = ?1) + 1
    UNION ALL
    SELECT n.pack, walk.k + 1, walk.got + (SELECT count FROM packs WHERE pid = n.pack)
    FROM walk JOIN packs p ON p.pid = walk.pid JOIN nodes n ON n.seq = p.base
    WHERE n.pack IS NOT NULL AND walk.got < ?2
)
SELECT p.pid, p.depth, p.base, p.count, p.size, p.codec, p.sum, p.data, b.depth, b.id
FROM walk JOIN packs p ON p.pid = walk.pid LEFT JOIN nodes b ON b.seq = p.base
ORDER BY walk.k
"""
_msgpack = msgspec.msgpack.Decoder()
#: Raw-decoded packs kept for node reads (get, scans): a scan reads each pack's rows in turn.
_RAW_CACHE = 8
#: A row's frame inflates to at most this (see paths.py).
_ROW_LIMIT = 1 << 20


class _Pack:
    """A pack row, checked: where its nodes sit, and its inflated frame."""

    __slots__ = ("base", "count", "depth", "frame", "pid")

    def __init__(self, pid: int, depth: int, base: int | None, count: int, frame: bytes) -> None:
        self.pid, self.depth, self.base, self.count, self.frame = pid, depth, base, count, frame


class PackedReader:
    """Reads through packs for one connection (the caller holds its lock). ``inflate`` and
    ``codec`` are the connection's (see paths.PathReader)."""

    def __init__(self, db: sqlite3.Connection, where: Any, codec: Any) -> None:
        self._db = db
        self.path = where
        self.codec = codec
        self._raw: OrderedDict[int, tuple[_Pack, bytes, list[int], bytes | None, list[bytes]]]
        self._raw = OrderedDict()

    def _damaged(self, what: str) -> StoreCorruptError:
        return StoreCorruptError(f"store {self.path} is damaged: {what}")

    # -- one pack ----------------------------------------------------------------------------

    def load(self, pid: object) -> _Pack:
        """Pack ``pid``'s row, its checksum checked, its frame inflated."""
        row = self._db.execute(_PACK, (pid,)).fetchone() if type(pid) is int else None
        if row is None:
            raise self._damaged(f"{describe(pid, None, None)} is missing")
        pack, data, codec, size = self._checked(pid, *row)
        try:
            frame = self.codec.unpack(data, codec, size)
        except CodecError as exc:
            raise self._pack_cannot_inflate(pack, exc) from None
        self._inflated(pack, frame, size)
        return pack

    def _checked(self, pid: Any, depth: Any, base: Any, count: Any, size: Any, codec: Any,
                 digest: Any, data: Any) -> tuple[_Pack, bytes, int, int]:
        """A pack row's columns checked (their types, then the checksum over how to read it
        and its bytes): the pack, its frame not read yet, and its data, codec and size."""
        if not (type(depth) is int and type(count) is int and count > 0 and type(size) is int
                and type(codec) is int and isinstance(data, bytes)
                and (base is None or type(base) is int)) or checksum(
                    codec, depth, count, data) != digest:
            raise self._damaged(f"{describe(pid, depth, count)} fails its checksum")
        return _Pack(pid, depth, base, count, b""), data, codec, size

    def _pack_cannot_inflate(self, pack: _Pack, exc: CodecError) -> StoreCorruptError:
        return self._damaged(f"{describe(pack.pid, pack.depth, pack.count)} cannot be inflated "
                             f"({exc})")

    def _inflated(self, pack: _Pack, frame: bytes, size: int) -> None:
        """Give ``pack`` its inflated frame, which must be as long as its row says."""
        if len(frame) != size:
            raise self._damaged(f"{describe(pack.pid, pack.depth, pack.count)} inflates to the "
                                "wrong size")
        pack.frame = frame

    def raw(self, pid: int) -> tuple[_Pack, bytes, list[int], bytes | None, list[bytes]]:
        """Pack ``pid``'s ids, apart positions, base id and row bodies, undecoded (cached)."""
        found = self._raw.get(pid)
        if found is not None:
            self._raw.move_to_end(pid)
            return found
        pack = self.load(pid)
        try:
            ids, apart, base, bodies = raw_nodes(pack.frame, pack.count)
        except PackDamage as exc:
            raise self._damaged(f"{describe(pid, pack.depth, pack.count)}: {exc}") from None
        found = (pack, ids, apart, base, bodies)
        self._raw[pid] = found
        if len(self._raw) > _RAW_CACHE:
            self._raw.popitem(last=False)
        return found

    def forget(self) -> None:
        """Drop the cached packs (gc may have removed one)."""
        self._raw.clear()

    def apart(self, digest: object, pack: str) -> bytes:
        """A payload stored apart, by its hash, checked against it."""
        row = self._db.execute(_BLOB, (digest,)).fetchone() if isinstance(digest, bytes) else None
        if row is None:
            raise self._damaged(f"{pack}: a payload it stores apart is missing")
        try:
            payload = self.codec.unpack(row[0], row[1], BLOB_LIMIT)
        except CodecError as exc:
            raise self._damaged(f"{pack}: a payload it stores apart cannot be inflated ({exc})") \
                from None
        if blake3(payload).digest() != digest:
            raise self._damaged(f"{pack}: a payload it stores apart does not match its hash")
        found: bytes = payload
        return found

    def whole(self, entry: bytes, where: str) -> bytes:
        """A frame entry whose payload is stored apart (its type, then the payload's hash)
        made whole: the type, then the payload, checked against its hash."""
        try:
            _, slot = split_row(entry)
            payload = self.apart(_msgpack.decode(slot), where)
        except (ValueError, UnicodeDecodeError, msgspec.DecodeError):
            raise self._damaged(f"{where}: an entry is unreadable") from None
        return entry[: len(entry) - len(slot)] + payload

    def node(self, pid: int, depth: int, id: bytes) -> tuple[str, bytes, bytes, bytes | None]:
        """A packed node's type, payload bytes, hashed body and parent id, checked to be the
        node at its place in its pack."""
        pack, ids, apart, base, bodies = self.raw(pid)
        pos = depth - pack.depth
        where = describe(pid, pack.depth, pack.count, ids)
        if not 0 <= pos < pack.count or ids[32 * pos : 32 * pos + 32] != id:
            raise self._damaged(f"{where} does not hold node {id.hex()[:12]} at its place")
        body = self.whole(bodies[pos], where) if pos in apart else bodies[pos]
        try:
            type, payload = split_row(body)
        except (ValueError, UnicodeDecodeError):
            raise self._damaged(f"{where}: an entry is unreadable") from None
        parent = base if pos == 0 else ids[32 * pos - 32 : 32 * pos]
        return type, payload, body, parent

    # -- a path ------------------------------------------------------------------------------

    def read(self, cur: int, need: int, whole: bool) -> tuple[list[str], list[Any], bytes, bytes | None]:
        """Types, payloads and packed ids of the newest ``need`` nodes of the path ending at
        row ``cur``, oldest first, and the id of the parent of the oldest (None at a root).
        ``whole``: the path must start at a root."""
        parts: list[tuple[list[str], list[Any], bytes]] = []  # newest first
        got = 0
        next_seq: int | None = cur
        base_id: bytes | None = None
        expect: bytes | None = None  # the id the next row must have (from a frame's base)
        while next_seq is not None and got < need:
            head = self._db.execute(_HEAD, (next_seq,)).fetchone()
            if head is None:
                raise self._damaged(f"node row {next_seq} is missing")
            if expect is not None and head[2] != expect:
                raise self._damaged(f"node row {next_seq} is not the parent its pack names")
            if head[0] is None:
                types, datas, ids, next_seq, base_id = self._loose(next_seq, need - got)
                expect = None
            else:
                # Every pack of the path in one statement, inflated one ahead of the decode.
                for pack, opened, (depth, key, seq) in self._packs_from(head, next_seq, need - got):
                    pos = depth - pack.depth if type(depth) is int else -1
                    if not 0 <= pos < pack.count or opened.id_at(pos) != key:
                        raise self._damaged(
                            f"{describe(pack.pid, pack.depth, pack.count, opened.ids)} does not "
                            f"hold the node of row {seq} at its place")
                    take = min(pos + 1, need - got)
                    lo = pos + 1 - take
                    types, datas = opened.types[lo : pos + 1], opened.datas[lo : pos + 1]
                    ids = opened.ids[32 * lo : 32 * (pos + 1)]
                    if opened.apart:
                        self._fill_apart(pack, opened, datas, lo, pos)
                    if (pack.base is None) != (opened.base is None):
                        raise self._damaged(
                            f"{describe(pack.pid, pack.depth, pack.count, opened.ids)} has a "
                            "base its row does not")
                    parts.append((types, datas, ids))
                    got += len(types)
                    if lo:
                        base_id, next_seq = opened.id_at(lo - 1), None
                        break
                    base_id, next_seq, expect = opened.base, pack.base, opened.base
                continue
            parts.append((types, datas, ids))
            got += len(types)
        if got < need or (whole and base_id is not None):
            raise self._damaged("a path does not match its depth index")
        if len(parts) == 1:
            return parts[0][0], parts[0][1], parts[0][2], base_id
        parts.reverse()
        all_types = [t for p in parts for t in p[0]]
        all_datas = [d for p in parts for d in p[1]]
        return all_types, all_datas, b"".join(p[2] for p in parts), base_id

    def _packs_from(self, head: Any, seq: int, need: int) -> Iterator[
            tuple[_Pack, OpenedPack, tuple[Any, Any, int]]]:
        """The packs of the path from the packed row ``seq`` (``head``: its pack, depth and
        id), newest first, as far as ``need`` nodes go or the packs do, each with the row it
        was reached from (depth, id, row number): one statement reads them all, and each
        pack is inflated in a second thread while the one before it is decoded."""
        # Through a memory map for this one statement: a pack spans many overflow pages, and a
        # fresh connection (a resume) would read each with a call of its own. The map goes
        # when the rows are read, so the process does not keep the pages it touched.
        db = self._db
        db.execute(_MAP)
        try:
            rows = db.execute(_WALK, (head[0], need, head[1])).fetchall()
        finally:
            db.execute(_UNMAP)
        checked: list[tuple[_Pack, tuple[bytes, int, int]]] = []
        for row in rows:
            pack, data, codec, size = self._checked(*row[:8])
            checked.append((pack, (data, codec, size)))
        if not checked or checked[0][0].pid != head[0]:
            raise self._damaged(f"{describe(head[0], None, None)} is missing")
        frames = inflate_ahead(self.codec, [how for _, how in checked])
        came_from: tuple[Any, Any, int] = (head[1], head[2], seq)
        for k, (pack, _) in enumerate(checked):
            try:
                frame = next(frames)
            except CodecError as exc:
                raise self._pack_cannot_inflate(pack, exc) from None
            self._inflated(pack, frame, checked[k][1][2])
            try:
                opened = open_frame(pack.frame, pack.count)
            except PackDamage as exc:
                raise self._damaged(f"{describe(pack.pid, pack.depth, pack.count)}: {exc}") \
                    from None
            pack.frame = b""
            yield pack, opened, came_from
            if pack.base is None:
                return
            row = rows[k]
            if k + 1 < len(rows):
                if row[9] != opened.base:
                    raise self._damaged(f"node row {pack.base} is not the parent its pack names")
                came_from = (row[8], row[9], pack.base)

    def _fill_apart(self, pack: _Pack, opened: OpenedPack, datas: list[Any], lo: int,
                    hi: int) -> None:
        where = describe(pack.pid, pack.depth, pack.count, opened.ids)
        for k in opened.apart:
            if lo <= k <= hi:
                try:
                    datas[k - lo] = _msgpack.decode(self.apart(datas[k - lo], where))
                except msgspec.DecodeError:
                    raise self._damaged(f"{where}: a payload stored apart is unreadable") from None

    def _loose(self, cur: int, need: int) -> tuple[list[str], list[Any], bytes, int | None,
                                                   bytes | None]:
        """The loose rows of the path ending at ``cur`` (at most ``need``), walked back by
        their parent links until a packed row or the root, each checked against its id.
        Returns types, payloads, ids, the row to go on at (a packed one, or None) and the
        parent id of the oldest."""
        rows: list[Any] = []
        next_seq: int | None = cur
        stop: bytes | None = None  # the id of the packed row the walk stopped at
        window = min(need, 64)
        while next_seq is not None and len(rows) < need:
            before = len(rows)
            packed = False
            for row in self._db.execute(_LOOSE, (max(next_seq - window + 1, 0), next_seq)):
                if row[0] != next_seq:
                    continue
                if row[2] is not None:
                    packed, stop = True, row[3]
                    break
                rows.append(row)
                next_seq = row[1]
                if len(rows) >= need or next_seq is None:
                    break
            if packed:
                break
            if len(rows) == before:
                raise self._damaged(f"node row {next_seq} is missing")
            window = min(window * 2, 4096)
        rows.reverse()
        if len(rows) >= need and next_seq is not None and stop is None:
            # The walk ended on a count, not at a packed row: the parent's id is its row's.
            found = self._db.execute("SELECT id FROM nodes WHERE seq = ?", (next_seq,)).fetchone()
            if found is None:
                raise self._damaged(f"node row {next_seq} is missing")
            stop = found[0]
        types, datas, ids = self._decode_rows(rows, stop)
        return types, datas, ids, next_seq, stop

    def _decode_rows(self, rows: list[Any], parent: bytes | None) -> tuple[list[str], list[Any], bytes]:
        """Loose rows (oldest first, below ``parent``): inflated, each hashed against its id,
        then decoded in one call."""
        if not all(isinstance(r[3], bytes) and isinstance(r[4], bytes) for r in rows):
            raise self._damaged("a node row is unreadable")
        bodies: list[bytes] = [r[4] for r in rows]
        framed = [k for k, r in enumerate(rows) if r[6] is not None]
        if framed:
            try:
                inflated = self.codec.unpack_all(
                    [bodies[k] for k in framed], [rows[k][6] for k in framed], _ROW_LIMIT)
            except CodecError as exc:  # (its index: which of the frames it was given)
                raise self._cannot_inflate(rows[framed[exc.index]], exc) from None
            for k, body in zip(framed, inflated, strict=True):
                bodies[k] = body
        for k, r in enumerate(rows):
            if r[5] is not None:
                try:
                    bodies[k] = bodies[k][:-1] + self.codec.unpack(r[5], r[7], BLOB_LIMIT)
                except CodecError as exc:
                    raise self._cannot_inflate(r, exc) from None
        ids = b"".join(r[3] for r in rows)
        heads = [hashed_head(parent), *[hashed_head(r[3]) for r in rows[:-1]]]
        for k, (h, b) in enumerate(zip(heads, bodies, strict=True)):
            if blake3(h + b).digest() != rows[k][3]:
                raise self._damaged(f"node {rows[k][3].hex()[:12]} does not hash to its id")
        try:
            flat: list[Any] = _msgpack.decode(_array(2 * len(bodies)) + b"".join(bodies))
            types: list[str] = flat[0::2]
            if set(map(type, types)) - {str}:
                raise ValueError("a row without a type")
        except (msgspec.DecodeError, ValueError) as exc:
            raise self._damaged(f"a node row is unreadable ({exc})") from None
        return types, flat[1::2], ids

    def _cannot_inflate(self, row: Any, exc: CodecError) -> StoreCorruptError:
        """The error of a loose row whose payload cannot be inflated: it names the node."""
        return self._damaged(f"node {row[3].hex()[:12]}: its payload cannot be inflated ({exc})")


def _array(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")
