"""Payloads at rest on PostgreSQL (format 4): zstd frames, with the store's trained dictionary.

The server assembles each row as it always did (a payload stored apart is put back in place of
the row's trailing nil), so the statements that read paths are unchanged; what the client gets
back names its own encoding, and is told apart here:

- a row that *is* a zstd frame (it starts with the zstd magic number, where a plain row starts
  with its type, a msgpack str) holds the type and payload compressed;
- a row whose type is followed by a zstd frame is a payload stored apart, compressed (a plain
  payload is one msgpack value, which never starts with the magic number and goes on);
- anything else is plain msgpack, as format 3 stored every row.

A frame names its dictionary in its header (0: none); dictionaries are rows of ``dicts``, each
checked against its blake3 when first loaded. Every row is hashed against its node id once
inflated, as before: damage is an error naming the node, never data.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from ..codec import BLOB_LIMIT, TRAIN_AFTER, TRAIN_SAMPLES, Codec, CodecError, dict_hash, train
from ..rows import type_length

__all__ = ["DICTS_TABLE", "MAGIC", "PgPayloads"]

#: Every zstd frame starts with these four bytes.
MAGIC = b"\x28\xb5\x2f\xfd"
#: The table of format 4 (the fourth step of .schema).
DICTS_TABLE = (
    "CREATE TABLE IF NOT EXISTS dicts(id integer PRIMARY KEY, hash bytea NOT NULL, "
    "data bytea NOT NULL)"
)
# A row kept in nodes is at most BLOB_MIN bytes once inflated; a frame that inflates to more
# is damaged (kept loose so that a store written with a larger threshold still reads).
_ROW_LIMIT = 1 << 20


class PgPayloads:
    """Compressing rows for one backend, and reading them back. ``read(sql, params)`` runs a
    query on the store and returns its rows."""

    def __init__(self, read: Callable[[str, tuple[Any, ...]], list[Any]]) -> None:
        self._read = read
        self.codec = Codec(self._load, name_dict=True)
        #: Payloads written without a dictionary since this connection last looked for one.
        self.plain_writes = 0
        self.looked = False
        #: The store's newest row when this connection last decided whether to train.
        self.seq_checked = 0

    def _load(self, dict_id: int) -> bytes | None:
        rows = self._read("SELECT hash, data FROM dicts WHERE id = %s", (dict_id,))
        if not rows:
            return None
        digest, data = bytes(rows[0][0]), bytes(rows[0][1])
        if dict_hash(data) != digest:
            raise CodecError(f"compression dictionary {dict_id} does not match its hash")
        return data

    def use_newest(self) -> bool:
        """Make new frames with the store's newest dictionary, if it has one that is intact
        (one that fails its hash is not written with: payloads stay plain, the reads that
        need it name their node, fsck names it). False if the store has no dictionary."""
        first = not self.looked
        self.looked = True
        rows = self._read("SELECT (SELECT max(id) FROM dicts), (SELECT max(seq) FROM nodes)", ())
        if first:
            self.seq_checked = int(rows[0][1] or 0)
        if not rows or rows[0][0] is None:
            return False
        try:
            data = self._load(int(rows[0][0]))
        except CodecError:
            return True
        if data is not None:
            self.codec.use(int(rows[0][0]), data)
        return True

    def due_at_close(self) -> bool:
        """Whether a closing writer with no dictionary should train one: the store passed a
        multiple of TRAIN_AFTER rows since it looked (so that writers that open, append and
        close train it too; O(1): the newest row number)."""
        if not self.looked or self.codec.dict_id is not None:
            return False
        rows = self._read("SELECT max(seq) FROM nodes", ())
        newest = int(rows[0][0] or 0) if rows else 0
        if newest // TRAIN_AFTER <= self.seq_checked // TRAIN_AFTER:
            return False
        self.seq_checked = newest
        self.plain_writes = TRAIN_AFTER
        return True

    def train_if_due(
        self, rows: str, write: Callable[[str, tuple[Any, ...]], object],
        packed: Callable[[int], list[bytes]] | None = None,
    ) -> None:
        """Once TRAIN_AFTER payloads went out without a dictionary: train one on the newest
        rows (``rows``: the statement that lists them, assembled; ``packed(n)``: up to ``n``
        rows of the newest packs, for the rows packed since they were written) and store it,
        or use the one another connection stored first. Called outside any transaction
        (PostgreSQL trains after a batch, not inside it); a failure leaves payloads plain
        until as many writes later."""
        if self.plain_writes < TRAIN_AFTER:
            return
        self.plain_writes = 0
        if self.use_newest():
            return  # there is one (if it is damaged, fsck says so: no second one is made)
        samples = []
        for (row,) in self._read(rows, (TRAIN_SAMPLES,)):
            try:
                body = self.body(bytes(row))
            except CodecError:
                continue
            if len(body) >= 64:
                samples.append(body[:8192])
        if packed is not None and len(samples) < TRAIN_SAMPLES:
            samples += [b[:8192] for b in packed(TRAIN_SAMPLES - len(samples)) if len(b) >= 64]
        made = train(samples, 1)
        if made is None:
            return
        write("INSERT INTO dicts VALUES (1, %s, %s) ON CONFLICT (id) DO NOTHING",
              (dict_hash(made), made))
        self.use_newest()

    def pack_row(self, row: bytes) -> bytes:
        """A row kept in ``nodes`` (type and payload): a frame when that is smaller."""
        if not self.looked:
            self.use_newest()
        if self.codec.dict_id is None:
            self.plain_writes += len(row) >= 64
            return row
        return self.codec.pack(row)[1]

    def pack_blob(self, payload: bytes) -> bytes:
        """A payload stored apart: a frame (with the dictionary once there is one)."""
        if not self.looked:
            self.use_newest()
        if self.codec.dict_id is None:
            self.plain_writes += 1
        return self.codec.pack_blob(payload)[1]

    def body(self, row: bytes) -> bytes:
        """A row as the server assembled it, back to the hashed form (type, then payload).
        Raises CodecError when a frame cannot be read."""
        if row[:4] == MAGIC:
            return self.codec.unpack_named(row, _ROW_LIMIT)
        try:
            end = type_length(row)
        except (ValueError, IndexError):
            return row  # not even a type: it will not hash to its id
        if row[end : end + 4] == MAGIC:
            return row[:end] + self.codec.unpack_named(row[end:], BLOB_LIMIT)
        return row

    def bodies(self, data: bytes, lengths: list[int]) -> tuple[list[bytes], int | None]:
        """The hashed form of each row of a path (the rows concatenated), and the index of a
        row whose frame cannot be read (None if all can). Only rows where the magic number
        sits at the start, or right after the type, are looked at; finding them is one scan
        of the bytes in C."""
        ends = list(accumulate(lengths))
        starts = [0, *ends[:-1]]
        bodies = [data[s:e] for s, e in zip(starts, ends, strict=True)]
        seen: set[int] = set()
        at = data.find(MAGIC)
        while at != -1:
            k = bisect_right(starts, at) - 1
            if k not in seen:
                try:
                    new = self.body(bodies[k])
                except CodecError:
                    return bodies, k
                if new is not bodies[k]:
                    seen.add(k)
                    bodies[k] = new
            at = data.find(MAGIC, at + 4)
        return bodies, None
