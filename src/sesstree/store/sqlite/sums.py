"""Digests over blocks of rows: one blake3 call checks 256 nodes of a path.

Checking every node against its id costs one blake3 call per node (about 1.5 µs with the
Python around it: a third of a long load). blake3 over the same bytes in one call costs a
tenth of that. So format-4 writers kept ``sums``, a derived index: for each aligned block of
:data:`BLOCK` rows (rows ``hi - 255 .. hi``), the blake3 of each node's hashed form (its
parent's id, its type and payload, exactly what its id hashes) one after the other, then the
block's ids. A block's digest is made only after each of its nodes was checked against its
id, one by one; so when a reader's path holds a whole block and the digest of what it read
matches, every node of the block would pass the one-by-one check too (the same bytes hash to
the same ids), and the reader skips it. When it does not match (damage, a stale or damaged
digest), the reader checks those nodes one by one, which names the damaged node. A digest is
never trusted unless it matches: a wrong one costs speed, never data.

Format 4's writers made them (when they paused or closed). Format 5 makes none: its loose
tails are short, and a pack has a checksum of its own; the upgrade to format 5 deletes them.
What is left here is what reads a format-4 store opened as it is (read-only) need.
"""

from __future__ import annotations

import msgspec
from blake3 import blake3

from ...node import ID_VERSION

__all__ = [
    "BLOCK", "PARENT_HEAD", "ROOT_HEAD", "SUMS", "SUMS_TABLE", "block_digest",
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

def block_digest(parts: list[bytes], ids: bytes) -> bytes:
    """The digest of a block: ``parts`` are head, body, head, body... of its nodes (a head is
    the start of a node's hashed form, with its parent's id), ``ids`` its packed ids."""
    h = blake3(b"".join(parts))
    h.update(ids)
    return h.digest()
