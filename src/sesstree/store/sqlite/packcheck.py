"""fsck's look at the packs of a format-5 SQLite store: every pack read and checked (its
checksum, its frame), every node id in it recomputed from its parent and its body, and its
rows in ``nodes`` agreeing with it (each at its place, with its id; its base where it says)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import msgspec

from ...errors import StoreCorruptError
from ..packs import describe, verify_run
from .packread import PackedReader

__all__ = ["check_packs"]

_decode = msgspec.msgpack.decode


def check_packs(db: sqlite3.Connection, reader: PackedReader) -> list[str]:
    """Faults of the packs and of the rows that name them (at most a few per pack)."""
    faults: list[str] = []
    rows_of: dict[object, list[tuple[object, object, object]]] = {}
    for pack, depth, key, seq in db.execute(
        "SELECT pack, depth, id, seq FROM nodes WHERE pack IS NOT NULL"
    ):
        rows_of.setdefault(pack, []).append((depth, key, seq))
    for (pid,) in db.execute("SELECT pid FROM packs ORDER BY pid").fetchall():
        faults += _check_one(db, reader, pid, rows_of.pop(pid, []))
    for pid, rows in rows_of.items():
        faults.append(f"{len(rows)} node rows name {describe(pid, None, None)}, which is missing")
    for (seq,) in db.execute(
        "SELECT l.seq FROM loose l LEFT JOIN nodes n ON n.seq = l.seq "
        "WHERE n.seq IS NULL OR n.pack IS NOT NULL LIMIT 20"
    ):
        faults.append(f"the loose payload of row {seq} belongs to no loose node")
    for (key,) in db.execute(
        "SELECT n.id FROM nodes n WHERE n.pack IS NULL AND n.data = x'' AND NOT EXISTS "
        "(SELECT 1 FROM loose l WHERE l.seq = n.seq) LIMIT 20"
    ):
        faults.append(f"node {bytes(key).hex()[:12]}: its payload is missing")
    return faults


def _check_one(db: sqlite3.Connection, reader: PackedReader, pid: int,
               rows: list[tuple[object, object, object]]) -> Iterator[str]:
    try:
        pack, ids, apart, base, entries = reader.raw(pid)
    except StoreCorruptError as exc:
        yield str(exc).split(": ", 1)[-1]
        return
    where = describe(pid, pack.depth, pack.count, ids)
    bodies = list(entries)
    try:
        for k in apart:
            bodies[k] = reader.whole(entries[k], where)
    except StoreCorruptError as exc:
        yield f"{where}: a payload it stores apart is unreadable ({exc})"
        return
    bad = verify_run(base, ids, bodies)
    if bad >= 0:
        yield f"{where}: node {ids[32 * bad : 32 * bad + 6].hex()} does not hash to its id"
    if pack.base is None:
        if base is not None or pack.depth != 1:
            yield f"{where}: its row says it starts at a root, its frame does not"
    else:
        found = db.execute("SELECT id, depth, pack FROM nodes WHERE seq = ?", (pack.base,)).fetchone()
        if found is None or found[0] != base or found[1] != pack.depth - 1:
            yield f"{where}: its base row is not the parent its frame names"
        elif found[2] is None:
            yield f"{where}: its parent is not packed"
    placed = 0
    for depth, key, seq in rows:
        pos = depth - pack.depth if type(depth) is int else -1
        if not 0 <= pos < pack.count or ids[32 * pos : 32 * pos + 32] != key:
            yield f"{where}: node row {seq} names it but is not at its place there"
        else:
            placed += 1
    if not placed:
        yield f"{where} is named by no node row"
