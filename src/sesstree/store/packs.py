"""Packs: immutable compressed runs of consecutive nodes of one path, the format both engines
share (see docs/storage.md, "Packs").

A node is written as a loose row (one statement per append, acknowledged when committed).
Once a path's loose tail is long enough, a run of it is packed: its nodes' ids, types and
payloads go into one frame, compressed once (zstd, with the store's dictionary when it has
one), with one checksum over it, and the nodes' rows keep only the index (id, parent, depth,
and the pack they are in). A node's place in its pack is its depth less the pack's first
depth: a pack holds consecutive nodes of one path, oldest first.

The frame, before compression, is one msgpack array::

    [ids, apart, base, type_0, payload_0, type_1, payload_1, ...]

- ``ids``: the nodes' 32-byte ids end to end (bin);
- ``apart``: the positions whose payload is stored apart (a payload larger than
  :data:`INLINE_MAX`, kept once by its hash in the blobs of the store, as loose rows keep it):
  their payload slot holds the payload's 32-byte blake3 instead;
- ``base``: the id of the first node's parent (nil for a root), so that a reader going on to
  the parent can check it reached the right one;
- then each node's type (str) and payload (its canonical msgpack, as hashed in its id).

Each type and payload is exactly a loose row's ``data`` (:mod:`sesstree.store.rows`), so a
pack is built by joining the rows' bytes, and read with one msgspec decode of one array.

The checksum is blake3 over a short header (codec, first depth, count) and the compressed
bytes: a flipped bit anywhere in a pack, or in the columns that say how to read it, fails it,
and the read raises :class:`~sesstree.errors.StoreCorruptError` naming the pack and the range
of nodes it holds, never returning wrong data. Node ids are checked when a pack is built from
loose rows (each node hashed against its id), by fsck and on sync receive, not on every read:
the checksum vouches that the pack is what was checked. A reader also checks the links around
a pack: the node it came from is at its place in the pack, and the parent it goes on to has
the pack's ``base`` id, so damage in the index rows cannot splice in another path either.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import msgspec
from blake3 import blake3

from ..node import ID_VERSION

__all__ = [
    "INLINE_MAX",
    "PACK_AT",
    "PACK_BYTES",
    "PACK_MAX",
    "PACK_MIN",
    "OpenedPack",
    "PackDamage",
    "apart_body",
    "build_frame",
    "checksum",
    "describe",
    "hashed_head",
    "open_frame",
    "raw_nodes",
    "verify_run",
]

#: A loose tail this long is packed right after the commit that made it so (whole packs of
#: PACK_AT nodes; the rest waits).
PACK_AT = 256
#: At a writer's pause or close, a loose tail at least this long is packed whatever its length
#: (shorter ones stay loose: a frame of a handful of rows saves little).
PACK_MIN = 16
#: The most nodes, and about the most bytes before compression, one pack holds: reading a
#: prefix of a pack inflates all of it, and building one holds the write lock.
PACK_MAX = 1024
PACK_BYTES = 512 * 1024
#: Payloads larger than this stay apart, stored once by hash, when their node is packed (a
#: 200 KB file read in a thousand sessions is kept once); smaller ones go into the frame.
INLINE_MAX = 64 * 1024

_ROOT_HEAD = b"\x94" + msgspec.msgpack.encode(ID_VERSION) + b"\xc0"
_PARENT_HEAD = b"\x94" + msgspec.msgpack.encode(ID_VERSION) + b"\xc4\x20"
_header = struct.Struct(">qqq")
_decoder = msgspec.msgpack.Decoder()
_raw_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])


class PackDamage(Exception):
    """A pack fails its checksum or cannot be read (the engine names the pack and its nodes)."""


def hashed_head(parent: bytes | None) -> bytes:
    """What a node's hashed form starts with, before its body (type then payload): see
    :mod:`sesstree.node`. A node is checked by hashing this and its body against its id."""
    return _ROOT_HEAD if parent is None else _PARENT_HEAD + parent


def checksum(codec: int, depth: int, count: int, data: bytes) -> bytes:
    """The checksum a pack row keeps: over how to read it and its compressed bytes."""
    return blake3(_header.pack(codec, depth, count) + data).digest()


def describe(pid: object, depth: object, count: object, ids: bytes | None = None) -> str:
    """A pack as an error names it: its number, the depths of the nodes it holds and, when
    its frame could be read, its first and last node ids (short)."""
    span = f"depths {depth}..{depth + count - 1}" if type(depth) is int and type(count) is int \
        else f"depth {depth!r}"
    ends = f", nodes {ids[:6].hex()}..{ids[-32:-26].hex()}" if ids and len(ids) >= 32 else ""
    return f"pack {pid} ({span}{ends})"


def _array_head(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def _bin(data: bytes) -> bytes:
    n = len(data)
    if n < 0x100:
        return b"\xc4" + bytes([n]) + data
    if n < 0x10000:
        return b"\xc5" + struct.pack(">H", n) + data
    return b"\xc6" + struct.pack(">I", n) + data


def build_frame(
    ids: Sequence[bytes], base: bytes | None, bodies: Sequence[bytes], apart: Sequence[int]
) -> bytes:
    """The uncompressed frame of a run of nodes, oldest first.

    ``bodies[k]`` is node k's row data: its type's msgpack then its payload's (for a position
    in ``apart``, the payload slot holds ``_bin(blake3 of the payload)`` instead: see
    :func:`apart_body`). The caller has checked every node against its id.
    """
    return b"".join([
        _array_head(3 + 2 * len(ids)), _bin(b"".join(ids)), msgspec.msgpack.encode(list(apart)),
        b"\xc0" if base is None else _bin(base), *bodies,
    ])


def apart_body(type_bytes: bytes, payload_hash: bytes) -> bytes:
    """A frame entry whose payload is stored apart: the type, then the payload's hash."""
    return type_bytes + _bin(payload_hash)


class OpenedPack:
    """A pack's frame, inflated and decoded: ``ids`` (32 bytes each, end to end), ``base``
    (the first node's parent id, or None), ``apart`` (positions whose payload slot is a hash),
    ``types`` and ``datas`` (decoded payloads; a hash where ``apart`` says so)."""

    __slots__ = ("apart", "base", "datas", "ids", "types")

    def __init__(self, ids: bytes, apart: list[int], base: bytes | None, types: list[str],
                 datas: list[Any]) -> None:
        self.ids = ids
        self.apart = apart
        self.base = base
        self.types = types
        self.datas = datas

    def __len__(self) -> int:
        return len(self.types)

    def id_at(self, pos: int) -> bytes:
        return self.ids[32 * pos : 32 * pos + 32]


def _valid_head(ids: Any, apart: Any, base: Any, count: int) -> bool:
    return (
        type(ids) is bytes and len(ids) == 32 * count
        and type(apart) is list and all(type(k) is int and 0 <= k < count for k in apart)
        and (base is None or (type(base) is bytes and len(base) == 32))
    )


def open_frame(frame: bytes, count: int) -> OpenedPack:
    """Decode an inflated frame of ``count`` nodes (one msgspec call). Raises PackDamage if it
    is not one (the checksum matched, so only a bug or a forged pack gets here)."""
    try:
        flat: list[Any] = _decoder.decode(frame)
    except msgspec.DecodeError as exc:
        raise PackDamage(f"its frame does not decode ({exc})") from None
    if type(flat) is not list or len(flat) != 3 + 2 * count:
        raise PackDamage("its frame does not hold as many nodes as its row says")
    ids, apart, base = flat[0], flat[1], flat[2]
    types: list[str] = flat[3::2]
    if not _valid_head(ids, apart, base, count) or set(map(type, types)) - {str}:
        raise PackDamage("its frame is not a pack")
    return OpenedPack(ids, apart, base, types, flat[4::2])


def raw_nodes(frame: bytes, count: int) -> tuple[bytes, list[int], bytes | None, list[bytes]]:
    """A frame's ids, apart positions, base and each node's row data (type then payload
    bytes, undecoded): what node reads, fsck and a repack need. Raises PackDamage."""
    try:
        raw = _raw_decoder.decode(frame)
        if len(raw) != 3 + 2 * count:
            raise PackDamage("its frame does not hold as many nodes as its row says")
        ids, apart, base = (_decoder.decode(r) for r in raw[:3])
    except (msgspec.DecodeError, ValueError) as exc:
        raise PackDamage(f"its frame does not decode ({exc})") from None
    if not _valid_head(ids, apart, base, count):
        raise PackDamage("its frame is not a pack")
    bodies = [bytes(t) + bytes(p) for t, p in zip(raw[3::2], raw[4::2], strict=True)]
    return ids, apart, base, bodies


def verify_run(base: bytes | None, ids: bytes, bodies: Sequence[bytes]) -> int:
    """Hash each node of a run (oldest first, ``bodies`` their hashed bodies, a payload
    stored apart included in full) against its id: -1 if all match, else the first that does
    not."""
    heads = [hashed_head(base), *[_PARENT_HEAD + ids[i : i + 32]
                                  for i in range(0, len(ids) - 32, 32)]]
    digests = [blake3(h + b).digest() for h, b in zip(heads, bodies, strict=True)]
    if b"".join(digests) == ids:
        return -1
    return next(i for i, d in enumerate(digests) if d != ids[32 * i : 32 * i + 32])
