"""Reading packs on the client (format 5): each pack checked against its checksum, inflated,
decoded, and its links checked, before anything of it is returned.

A pack's nodes are not hashed again on read: they were, one by one, when the pack was built
from loose rows (and fsck does it again); the checksum vouches that the pack is what was
checked. What the checksum cannot vouch for is the index around it, so each read also checks
the links: the node a read came from is at its place in the pack (the pack's id there is the
row's id), and the node it goes on to is the one the pack's frame names as its base. A
payload stored apart is checked against the hash the frame keeps for it. Any of these failing
is a :class:`~sesstree.errors.StoreCorruptError` naming the pack (:func:`packs.describe`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import msgspec
from blake3 import blake3

from ...errors import StoreCorruptError
from .. import packs
from ..codec import BLOB_LIMIT, Codec, CodecError, inflate_ahead
from ..rows import type_length
from .codec import MAGIC

__all__ = ["PackReader", "PathPart", "RawPack"]

# A frame is at most about PACK_BYTES (one node may carry it past that by one inline payload)
# plus its ids: one that says it inflates to more is damaged.
_FRAME_LIMIT = 2 * packs.PACK_BYTES + packs.INLINE_MAX + 64 * packs.PACK_MAX
_decode = msgspec.msgpack.Decoder().decode

#: A stretch of a path out of one pack, oldest first: types, decoded payloads, ids end to end.
PathPart = tuple[list[str], list[Any], bytes]


class RawPack:
    """A pack's nodes as stored: ``ids`` end to end, ``apart`` (positions whose payload slot
    holds its hash), ``base`` (the first node's parent id, None for a root) and each node's
    ``bodies`` (type then payload, or then the hash of a payload stored apart)."""

    __slots__ = ("apart", "base", "bodies", "ids", "pid")

    def __init__(self, pid: int, ids: bytes, apart: list[int], base: bytes | None,
                 bodies: list[bytes]) -> None:
        self.pid = pid
        self.ids = ids
        self.apart = set(apart)
        self.base = base
        self.bodies = bodies

    def id_at(self, pos: int) -> bytes:
        """The id of the node at ``pos``."""
        return self.ids[32 * pos : 32 * pos + 32]


class PackReader:
    """Checks, inflates and decodes the packs one backend reads (``url`` names the store in
    errors; ``codec`` is the backend's, which knows its dictionaries)."""

    def __init__(self, codec: Codec, url: str) -> None:
        self._codec = codec
        self._url = url

    def damage(self, pid: object, depth: object, count: object, why: str,
               ids: bytes | None = None, at: bytes | None = None) -> StoreCorruptError:
        """The error a damaged pack is reported by (``at``: the node whose read reached it,
        when its own ids cannot be read)."""
        held = f", holding node {at.hex()[:12]}" if at is not None and ids is None else ""
        return StoreCorruptError(f"the store at {self._url} is damaged: "
                                 f"{packs.describe(pid, depth, count, ids)}{held}: {why}")

    def frame(self, pid: int, depth: int, count: int, codec: int, sum: bytes,
              data: bytes, at: bytes | None = None) -> bytes:
        """A pack's frame, inflated once its checksum matched (``at``: the node being read)."""
        if packs.checksum(codec, depth, count, data) != sum:
            raise self.damage(pid, depth, count, "it does not match its checksum", at=at)
        try:
            return self._codec.unpack(data, codec, _FRAME_LIMIT)
        except CodecError as exc:
            raise self.damage(pid, depth, count, f"it cannot be inflated ({exc})",
                              at=at) from None

    def raw(self, pid: int, depth: int, count: int, codec: int, sum: bytes,
            data: bytes, at: bytes | None = None) -> RawPack:
        """A pack's nodes as stored (their bytes undecoded): what a node read, gc and fsck need."""
        frame = self.frame(pid, depth, count, codec, sum, data, at)
        try:
            ids, apart, base, bodies = packs.raw_nodes(frame, count)
        except packs.PackDamage as exc:
            raise self.damage(pid, depth, count, str(exc), at=at) from None
        return RawPack(pid, ids, apart, base, bodies)

    def apart(self, pid: int, depth: int, count: int, digest: Any, stored: bytes | None) -> bytes:
        """A payload a pack keeps apart (``stored``: its blob row, as written), checked
        against the hash the pack keeps for it."""
        if type(digest) is not bytes or stored is None:
            raise self.damage(pid, depth, count, "a payload it keeps apart is missing")
        try:
            payload = (self._codec.unpack_named(stored, BLOB_LIMIT) if stored[:4] == MAGIC
                       else stored)
        except CodecError:
            payload = b""
        if blake3(payload).digest() != digest:
            raise self.damage(pid, depth, count, f"the payload it keeps apart as "
                              f"{digest.hex()[:12]} does not match its hash")
        return payload

    def body(self, pack: RawPack, depth: int, count: int, pos: int, stored: bytes | None) -> bytes:
        """Node ``pos``'s body (type then payload), its payload put back if stored apart
        (``stored``: that payload's blob row)."""
        body = pack.bodies[pos]
        if pos not in pack.apart:
            return body
        end = type_length(body)
        try:
            digest = _decode(body[end:])
        except msgspec.DecodeError:
            digest = None
        return body[:end] + self.apart(pack.pid, depth, count, digest, stored)

    def node_body(self, pack: RawPack, depth: int, count: int, id: bytes, at: int,
                  parent: bytes | None, stored: bytes | None) -> bytes:
        """The body of node ``id``, which its row puts at depth ``at`` of ``pack`` (which
        starts at ``depth``), with its links checked: it is at its place, and its row's parent
        is the node before it (or the pack's base)."""
        pos = at - depth
        if not 0 <= pos < count or pack.id_at(pos) != id:
            raise self.damage(pack.pid, depth, count,
                              f"node {id.hex()[:12]} is not at its place in it", pack.ids)
        if (pack.id_at(pos - 1) if pos else pack.base) != parent:
            raise self.damage(pack.pid, depth, count, f"the parent of node {id.hex()[:12]} is "
                              "not the node before it", pack.ids)
        return self.body(pack, depth, count, pos, stored)

    def path(self, cols: Sequence[Any], entry: bytes | None, need: int) -> tuple[list[PathPart], int,
                                                                         bytes | None]:
        """The packed stretch of a path as :data:`.pathsql.PATH` returned it (``cols``: its
        pack columns), entered at the node ``entry``, at most ``need`` nodes: its parts
        oldest first, how many nodes they hold, and the id of the oldest one's parent."""
        pids, entries, places, depths, counts = cols[:5]
        based, hashes, blobs = cols[8:]
        stored = dict(zip(hashes or (), blobs or (), strict=True))
        parts: list[PathPart] = []
        got = 0
        expect: bytes | None = entry
        frames = self._frames(cols)
        for i, pid in enumerate(pids or ()):
            depth, count, pos = depths[i], counts[i], places[i]
            try:
                op = packs.open_frame(next(frames), count)
            except packs.PackDamage as exc:
                raise self.damage(pid, depth, count, str(exc), at=bytes(entries[i])) from None
            if not 0 <= pos < count or bytes(entries[i]) != expect or op.id_at(pos) != expect:
                raise self.damage(pid, depth, count, "the node read is not at its place in it",
                                  op.ids)
            take = min(pos + 1, need - got)
            first = pos + 1 - take
            out = op.datas[first : pos + 1]
            for k in op.apart:
                if first <= k <= pos:
                    out[k - first] = _decode(self.apart(
                        pid, depth, count, op.datas[k], _bytes(stored.get(op.datas[k]))))
            parts.append((op.types[first : pos + 1], out, op.ids[32 * first : 32 * pos + 32]))
            got += take
            if first:
                expect = op.id_at(first - 1)
                break
            if op.base is None and based[i]:
                raise self.damage(pid, depth, count, "it has a base its frame does not name",
                                  op.ids)
            expect = op.base
            if expect is None or got >= need:
                break
        else:
            if pids and expect is not None and got < need:
                i = len(pids) - 1
                raise self.damage(pids[i], depths[i], counts[i],
                                  "the node it hangs from is missing or not packed")
        frames.close()  # (a pack inflated ahead and not needed is not waited for)
        parts.reverse()
        return parts, got, expect

    def _frames(self, cols: Sequence[Any]) -> Generator[bytes, None, None]:
        """The frames of a path's packs, each checked against its checksum, then inflated, in
        order; with enough bytes, a second thread inflates the next pack while the caller
        decodes this one (codec.inflate_ahead)."""
        pids, entries, _, depths, counts, codecs, sums, datas = cols[:8]
        frames = [bytes(d) for d in datas or ()]
        for i, data in enumerate(frames):  # (damage is named before anything is inflated)
            if packs.checksum(codecs[i], depths[i], counts[i], data) != bytes(sums[i]):
                raise self.damage(pids[i], depths[i], counts[i], "it does not match its "
                                  "checksum", at=bytes(entries[i]))
        inflated = inflate_ahead(self._codec, [
            (data, codecs[i], _FRAME_LIMIT) for i, data in enumerate(frames)])
        try:
            for i in range(len(frames)):
                try:
                    frame = next(inflated)
                except CodecError as exc:
                    raise self.damage(pids[i], depths[i], counts[i], f"it cannot be inflated "
                                      f"({exc})", at=bytes(entries[i])) from None
                yield frame
        finally:
            inflated.close()  # (a frame inflated ahead that is not wanted any more is let go)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)
