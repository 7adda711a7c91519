"""Packs made before the store had a dictionary, compressed again with it.

A store trains its compression dictionary once it holds enough payloads, when a writer
pauses or closes (dicts.py); a writer that appends without pausing packs its tails inline
meanwhile, without one (zstd alone leaves this traffic at 0.44 of its size, with the
dictionary 0.39). When a writer pauses or closes and the store has a dictionary, the packs
made without one are compressed again with it, a pack per short write transaction, for a
moment each time: the frame is the same (what a reader decoded from the pack stays true, and
a reader reads a pack's codec, checksum and bytes in one statement), only its codec, bytes
and checksum change, and only when it gets smaller. ``plain_packs_after`` in meta is the
last pack looked at, so that each pack is looked at once, by whichever writer comes first.
"""

from __future__ import annotations

import time

from ..codec import CodecError
from ..packs import checksum
from .state import ConnState
from .txn import Transactions

__all__ = ["CURSOR", "compress_plain_packs"]

#: The meta key of the last pack looked at.
CURSOR = "plain_packs_after"
_SLICE = 64


def compress_plain_packs(state: ConnState, txn: Transactions, budget: float) -> bool:
    """Compress the packs made without a dictionary again with the store's, for about
    ``budget`` seconds. True when none is left to look at."""
    db = state.db
    codec = state.paths.codec
    reader = state.paths.packed
    if codec.dict_id is None or reader is None or state.read_only or db.in_transaction:
        return True
    start = time.monotonic()
    row = db.execute("SELECT value FROM meta WHERE key = ?", (CURSOR,)).fetchone()
    after = int(row[0]) if row is not None and str(row[0]).isdigit() else 0
    seen = after
    try:
        while time.monotonic() - start < budget:
            rows = db.execute("SELECT pid, codec FROM packs WHERE pid > ? ORDER BY pid LIMIT ?",
                              (seen, _SLICE)).fetchall()
            if not rows:
                return True
            for pid, how in rows:
                if how == 0:
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
    """Pack ``pid`` compressed again with the dictionary, if it is still without one."""
    reader = state.paths.packed
    assert reader is not None
    with txn.write():
        db = state.db
        row = db.execute("SELECT depth, count, codec, length(data) FROM packs WHERE pid = ?",
                         (pid,)).fetchone()
        if row is None or row[2] != 0:
            return  # gone (gc), or done by another writer
        try:
            frame = reader.load(pid).frame  # (its checksum checked)
        except CodecError:
            return
        how, data = state.paths.codec.pack_blob(frame)
        if how == 0 or len(data) >= row[3]:
            return
        db.execute("UPDATE packs SET codec = ?, data = ?, sum = ? WHERE pid = ? AND codec = 0",
                   (how, data, checksum(how, row[0], row[1], data), pid))
