"""fsck of the packs of a PostgreSQL store (format 5), a slice of packs per statement.

Each pack: its checksum, every node in it hashed against its id (a payload stored apart
included, itself checked against its hash), its base the node its frame names, and its rows
in ``nodes`` in agreement with it (each row's id at the row's place, one row per place). The
links that SQL can check (a row naming a missing pack, a pack no row names, a packed node
whose parent is loose) are :data:`.packsql.PACK_CHECKS`, run with the other checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ...errors import StoreCorruptError
from .. import packs
from ..rows import type_length
from . import packsql
from .unpack import PackReader, RawPack

__all__ = ["verify_packs"]

#: Packs per statement (each up to about PACK_BYTES before compression).
_SLICE = 32
_decode = msgspec.msgpack.Decoder().decode

Read = Callable[..., list[Any]]


def verify_packs(read: Read, reader: PackReader, done: Callable[[int], None]) -> Iterator[str]:
    """One fault line per damage found in any pack; ``done`` hears how many nodes each pack
    held once it is checked."""
    after = 0
    while True:
        rows = read(packsql.PACK_SLICE, (after, _SLICE), binary=True)
        if not rows:
            return
        members: dict[int, list[tuple[bytes, int]]] = {}
        for pack, key, depth, _ in read(packsql.PACK_ROWS, ([r[0] for r in rows],), binary=True):
            members.setdefault(int(pack), []).append((bytes(key), int(depth)))
        opened: list[tuple[Any, RawPack | None, list[str]]] = []
        wanted: set[bytes] = set()
        for row in rows:
            pack, faults = _open(reader, row)
            opened.append((row, pack, faults))
            if pack is not None:
                wanted.update(_digest(pack, k) for k in pack.apart)
        stored = dict(read("SELECT hash, data FROM blobs WHERE hash = ANY(%s)",
                           (list(wanted),), binary=True)) if wanted else {}
        for row, pack, faults in opened:
            yield from faults
            if pack is not None:
                yield from _check(reader, row, pack, members.get(int(row[0]), []), stored)
            done(int(row[2]))
        after = int(rows[-1][0])


def _open(reader: PackReader, row: Any) -> tuple[RawPack | None, list[str]]:
    pid, depth, count, codec, sum, data, _, _, size = row
    try:
        frame = reader.frame(pid, depth, count, codec, bytes(sum), bytes(data))
        ids, apart, base, bodies = packs.raw_nodes(frame, count)
    except StoreCorruptError as exc:
        return None, [_line(exc)]
    except packs.PackDamage as exc:
        return None, [f"{packs.describe(pid, depth, count)}: {exc}"]
    faults = [] if len(frame) == size else [
        f"{packs.describe(pid, depth, count, ids)}: its size column is wrong"]
    return RawPack(pid, ids, apart, base, bodies), faults


def _check(reader: PackReader, row: Any, pack: RawPack, members: list[tuple[bytes, int]],
           stored: dict[Any, Any]) -> Iterator[str]:
    pid, depth, count, _, _, _, base_seq, base_id, _ = row
    name = packs.describe(pid, depth, count, pack.ids)
    bodies: list[bytes] = []
    for k in range(count):
        blob = stored.get(_digest(pack, k)) if k in pack.apart else None
        try:
            bodies.append(reader.body(pack, depth, count, k, None if blob is None
                                      else bytes(blob)))
        except StoreCorruptError as exc:
            yield _line(exc)
            bodies.append(pack.bodies[k])
    start, parent = 0, pack.base
    while start < count:
        bad = packs.verify_run(parent, pack.ids[32 * start :], bodies[start:])
        if bad < 0:
            break
        at = start + bad
        yield (f"{name}: node {pack.id_at(at).hex()[:12]} does not hash to its id "
               "(content damaged)")
        start, parent = at + 1, pack.id_at(at)
    if (base_seq is None and pack.base is not None) or (
            base_id is not None and bytes(base_id) != pack.base):
        yield f"{name}: its base is not the node its frame names"
    places: set[int] = set()
    for key, at in members:
        pos = at - depth
        if not 0 <= pos < count or pack.id_at(pos) != key:
            yield f"{name}: node {key.hex()[:12]} is not at its place in it"
        places.add(pos)
    if len(members) != count or len(places) != count:
        yield f"{name}: its nodes and the rows that index them do not agree"


def _digest(pack: RawPack, k: int) -> bytes:
    """The hash a pack keeps for its node ``k``'s payload stored apart (b"" if unreadable)."""
    body = pack.bodies[k]
    try:
        found = _decode(body[type_length(body):])
    except (msgspec.DecodeError, ValueError, IndexError):
        return b""
    return found if type(found) is bytes else b""


def _line(exc: StoreCorruptError) -> str:
    """A damage error as one fault line (without the store's URL: fsck names the store)."""
    return str(exc).split("is damaged: ", 1)[-1]
