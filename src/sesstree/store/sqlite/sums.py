"""Digests over blocks of rows: one blake3 call checks 256 nodes of a path.

Checking every node against its id costs one blake3 call per node (about 1.5 µs with the
Python around it: a third of a long load). blake3 over the same bytes in one call costs a
tenth of that. So writers keep ``sums``, a derived index: for each aligned block of
:data:`BLOCK` rows (rows ``hi - 255 .. hi``), the blake3 of each node's hashed form (its
parent's id, its type and payload, exactly what its id hashes) one after the other, then the
block's ids. A block's digest is made only after each of its nodes was checked against its
id, one by one; so when a reader's path holds a whole block and the digest of what it read
matches, every node of the block would pass the one-by-one check too (the same bytes hash to
the same ids), and the reader skips it. When it does not match (damage, a stale or damaged
digest), the reader checks those nodes one by one, which names the damaged node. A digest is
never trusted unless it matches: a wrong one costs speed, never data.

Digests are made when a writer pauses (with its idle checkpoint) and when it closes, a
bounded number of blocks at a time, in a short write transaction of their own; gc drops the
digests of the blocks it removes rows from. A block with a row missing gets none.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import msgspec
from blake3 import blake3

from ...node import ID_VERSION

__all__ = [
    "BLOCK", "FILL_CLOSE", "FILL_IDLE", "PARENT_HEAD", "ROOT_HEAD", "SUMS", "SUMS_TABLE",
    "block_digest", "fill_sums", "forget_sums",
]

# The hashed form of a node starts [ID_VERSION, parent, ...; see sesstree.node. A row's body is
# the rest of it (type, then payload), so a node is checked by hashing a head + its body.
ROOT_HEAD = b"\x94" + msgspec.msgpack.encode(ID_VERSION) + b"\xc0"
PARENT_HEAD = b"\x94" + msgspec.msgpack.encode(ID_VERSION) + b"\xc4\x20"

#: Rows per block (aligned: a block ends at a multiple of BLOCK).
BLOCK = 256
SUMS_TABLE = "CREATE TABLE IF NOT EXISTS sums(hi INTEGER PRIMARY KEY, digest BLOB NOT NULL)"
#: The digests of the blocks that lie within rows ?1..?2.
SUMS = f"SELECT hi, digest FROM sums WHERE hi >= ?1 + {BLOCK - 1} AND hi <= ?2"
#: Blocks given a digest when a writer pauses, and when it closes (a bound on how long it
#: holds the write lock then: about 1 ms a block).
FILL_IDLE = 16
FILL_CLOSE = 512
_ROWS = (
    "SELECT n.id, n.parent, p.id, n.data, b.data, n.codec, b.codec FROM nodes n "
    "LEFT JOIN nodes p ON p.seq = n.parent LEFT JOIN blobs b ON b.bid = n.bid "
    "WHERE n.seq BETWEEN ? AND ? ORDER BY n.seq"
)


def block_digest(parts: list[bytes], ids: bytes) -> bytes:
    """The digest of a block: ``parts`` are head, body, head, body... of its nodes (a head is
    the start of a node's hashed form, with its parent's id), ``ids`` its packed ids."""
    h = blake3(b"".join(parts))
    h.update(ids)
    return h.digest()


def fill_sums(
    db: sqlite3.Connection,
    expand: Callable[[bytes, bytes, bytes | None, int | None, int | None], bytes],
    most: int,
) -> int:
    """Make the digests of up to ``most`` complete blocks above the newest one that has a
    digest; the caller holds a write transaction. ``expand(id, data, blob, codec, bcodec)``
    gives a row's hashed body. Returns how many blocks got a digest."""
    top = int(db.execute("SELECT coalesce(max(seq), 0) FROM nodes").fetchone()[0])
    done = int(db.execute("SELECT coalesce(max(hi), 0) FROM sums").fetchone()[0])
    made = 0
    hi = done + BLOCK
    while hi <= top and most > 0:
        most -= 1
        digest = _block(db, expand, hi - BLOCK + 1, hi)
        if digest is not None:
            db.execute("INSERT OR REPLACE INTO sums VALUES (?, ?)", (hi, digest))
            made += 1
        hi += BLOCK
    return made


def _block(
    db: sqlite3.Connection,
    expand: Callable[[bytes, bytes, bytes | None, int | None, int | None], bytes],
    lo: int, hi: int,
) -> bytes | None:
    """The digest of rows lo..hi, or None if one is missing or does not hash to its id."""
    parts: list[bytes] = []
    ids: list[bytes] = []
    for key, parent_seq, parent, data, blob, codec, bcodec in db.execute(_ROWS, (lo, hi)):
        if parent_seq is not None and parent is None:
            return None  # a missing parent: fsck names it
        try:
            body = expand(key, data, blob, codec, bcodec)
        except Exception:  # damage of any kind: no digest (reads and fsck name it)
            return None
        head = ROOT_HEAD if parent is None else PARENT_HEAD + parent
        if blake3(head + body).digest() != key:
            return None
        parts += (head, body)
        ids.append(key)
    if len(ids) != hi - lo + 1:
        return None
    return block_digest(parts, b"".join(ids))


def forget_sums(db: sqlite3.Connection, seqs: list[int]) -> None:
    """Drop the digests of the blocks that hold these rows (gc is removing them)."""
    his = sorted({(s + BLOCK - 1) // BLOCK * BLOCK for s in seqs})
    db.executemany("DELETE FROM sums WHERE hi = ?", [(h,) for h in his])
