"""Packs compressed again once they are settled: with the store's dictionary, at a higher
zstd level, off the hot path.

A pack is made right after the commit that makes a tail long enough (packing.py), at zstd's
fast level 3, and without a dictionary while the store has none: a store trains its
dictionary once it holds enough payloads, when a writer pauses or closes (dicts.py), so a
writer that appends without pausing packs its history without one meanwhile (this traffic:
0.44 of its msgpack without, 0.40 with it at level 3, 0.37 with it at
:data:`~sesstree.store.codec.SETTLED_LEVEL`). When a writer pauses or closes and the store
has a dictionary, the packs made since the last one settled are compressed again, with it
and at that level, a pack per short write transaction, for a moment each time. The frame is
the same (what a reader decoded from the pack stays true, and a reader reads a pack's codec,
checksum and bytes in one statement); only its codec, bytes and checksum change, and only
when it gets smaller. ``plain_packs_after`` in meta is the last pack settled, so that each
pack is compressed again once, by whichever writer comes first.
"""

from __future__ import annotations

import time

from ...errors import StoreCorruptError
from ..codec import CodecError
from ..packs import checksum
from .state import ConnState
from .txn import Transactions

__all__ = ["CURSOR", "compress_plain_packs"]

#: The meta key of the last pack settled.
CURSOR = "plain_packs_after"
_SLICE = 64


def compress_plain_packs(state: ConnState, txn: Transactions, budget: float) -> bool:
    """Compress the packs made since the last one settled again, with the store's dictionary
    at the settled level, for about ``budget`` seconds. True when none is left."""
    db = state.db
    reader = state.paths.packed
    if (state.paths.codec.dict_id is None or reader is None or state.read_only
            or db.in_transaction):
        return True
    start = time.monotonic()
    row = db.execute("SELECT value FROM meta WHERE key = ?", (CURSOR,)).fetchone()
    after = int(row[0]) if row is not None and str(row[0]).isdigit() else 0
    seen = after
    try:
        while time.monotonic() - start < budget:
            rows = db.execute("SELECT pid FROM packs WHERE pid > ? ORDER BY pid LIMIT ?",
                              (seen, _SLICE)).fetchall()
            if not rows:
                return True
            for (pid,) in rows:
                _compress(state, txn, int(pid))
                seen = int(pid)
                if time.monotonic() - start >= budget:
                    break
        return False
    finally:
        if seen != after:
            with txn.write():
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (CURSOR, str(seen)))


def _compress(state: ConnState, txn: Transactions, pid: int) -> None:
    """Pack ``pid`` compressed again, if that makes it smaller."""
    reader = state.paths.packed
    assert reader is not None
    with txn.write():
        db = state.db
        row = db.execute("SELECT depth, count, length(data) FROM packs WHERE pid = ?",
                         (pid,)).fetchone()
        if row is None:
            return  # gone (gc)
        try:
            frame = reader.load(pid).frame  # (its checksum checked)
        except (CodecError, StoreCorruptError):
            return  # damaged: left as it is, for reads and fsck to name
        made = state.paths.codec.pack_settled(frame)
        if made is None or len(made[1]) >= row[2]:
            return
        how, data = made
        db.execute("UPDATE packs SET codec = ?, data = ?, sum = ? WHERE pid = ?",
                   (how, data, checksum(how, row[0], row[1], data), pid))
