"""The SQLite backend's compression dictionary: found, or trained once the store holds enough
payloads (see :mod:`sesstree.store.codec`).

Whether one is due is decided from the store, not from what one connection wrote: when a
writer pauses, closes or ends a batch with no dictionary, it trains one if the store's row count (its
newest row number, O(1)) passed a multiple of TRAIN_AFTER since the writer last looked, so
writers that open, append once and close (`sess append`, one import per file) train it as a
long-lived writer does. Training runs only outside any transaction, in one of its own: it can
never take a batch down with it. A long-lived writer looks for a dictionary another process
trained every TRAIN_AFTER plain writes (one indexed read). A dictionary that fails its hash is
not used for writing: payloads stay plain, reads of the frames that need it name their node,
and fsck names the dictionary.
"""

from __future__ import annotations

import sqlite3

from ...errors import SesstreeError, StoreCorruptError, StoreReadOnlyError
from ..codec import SMALL_MIN, TRAIN_AFTER, TRAIN_SAMPLES, CodecError, dict_hash, train
from .state import ConnState
from .txn import Transactions

__all__ = ["Dictionary"]

# A training sample is cut to this: the start of a long payload teaches the dictionary as
# much as its whole, and training time grows with the bytes.
_SAMPLE_MAX = 8192


class Dictionary:
    """Finding and training the store's compression dictionary, for the backend's connection.

    Owns what this connection knows of it: whether it looked for one yet (``looked``), the
    plain payloads it wrote since it last looked, and the store's newest row when it last
    decided whether to train. The dictionary itself is in the connection's codec
    (``state.paths.codec``); training runs in a write transaction of its own (``txn``).
    """

    def __init__(self, state: ConnState, txn: Transactions) -> None:
        self._state = state
        self._txn = txn
        #: Whether this connection looked for a dictionary yet (at its first write).
        self.looked = False
        # Plain payloads this connection wrote since it last looked for a dictionary.
        self._plain_writes = 0
        # The store's newest row when this connection last decided whether to train.
        self._seq_checked = 0

    def count_plain(self, plain: bool) -> None:
        """Count a payload written without a dictionary: every TRAIN_AFTER of them, look
        whether another process stored one meanwhile (one indexed read)."""
        if plain and self._state.paths.codec.dict_id is None:
            self._plain_writes += 1
            if self._plain_writes >= TRAIN_AFTER:
                self._plain_writes = 0
                row = self._state.db.execute("SELECT max(id) FROM dicts").fetchone()
                if row[0] is not None:
                    self._use(int(row[0]))

    def find(self) -> None:
        """Make new frames with the store's newest dictionary, if it has one (at this
        connection's first write)."""
        if not self._state.codec_columns:
            # A store of a format before 4 that could not be upgraded when it was opened: it
            # has no dictionary table, nor the statements a write of format 4 uses.
            if self._state.read_only:
                raise StoreReadOnlyError(
                    f"store {self._state.path} is on read-only media or files (attempt to write "
                    "a readonly database); reads still work"
                )
            self.looked = True
            return
        self.looked = True
        row = self._state.db.execute(
            "SELECT (SELECT max(id) FROM dicts), (SELECT max(seq) FROM nodes)"
        ).fetchone()
        self._seq_checked = row[1] or 0
        if row[0] is not None:
            self._use(int(row[0]))

    def _use(self, dict_id: int) -> None:
        try:
            data = self._state.paths.load_dict(dict_id)
        except CodecError:
            return  # damaged: write plain rather than refuse every write (fsck names it)
        if data is not None:
            self._state.paths.codec.use(dict_id, data)

    def train_if_due(self, wait: float = 0.0) -> None:
        """At a pause, a close or a batch's end, outside any transaction: train the dictionary
        if the store has none and passed a multiple of TRAIN_AFTER rows since this writer last looked
        (``wait``: how long to wait for the write lock; a busy store is left for later)."""
        if (
            self._state.read_only or not self._state.codec_columns or not self.looked
            or self._state.paths.codec.dict_id is not None or self._state.db.in_transaction
        ):
            return
        row = self._state.db.execute("SELECT max(seq) FROM nodes").fetchone()
        newest = row[0] or 0
        if newest // TRAIN_AFTER <= self._seq_checked // TRAIN_AFTER:
            return
        if self._state.queue_depth:  # (a batch just committed: its writer holds the lock)
            self._seq_checked = newest
            self.train()
            return
        if not self._txn.queue.acquire(wait):
            return
        self._state.queue_depth = 1
        try:
            self._seq_checked = newest
            self.train()
        finally:
            self._state.queue_depth = 0
            self._txn.queue.release()

    def train(self) -> None:
        """Train the store's compression dictionary on its newest payloads, in a transaction
        of its own (never inside another: a failure there must not end a batch), or start
        using the one another connection trained meanwhile. A failure (the store busy, a disk
        full) leaves payloads plain; it is tried again TRAIN_AFTER rows later."""
        if self._state.read_only or self._state.db.in_transaction:
            return
        made: bytes | None = None
        try:
            with self._txn.write():
                row = self._state.db.execute("SELECT max(id) FROM dicts").fetchone()
                if row[0] is not None:
                    self._use(int(row[0]))
                    return
                made = train(self._samples(), 1)
                if made is not None:
                    self._state.db.execute(
                        "INSERT INTO dicts(id, hash, data) VALUES (1, ?, ?)", (dict_hash(made), made)
                    )
        except (SesstreeError, sqlite3.Error):
            return  # the training's own transaction was rolled back: nothing else was in it
        if made is not None:
            self._state.paths.codec.use(1, made)

    def _samples(self) -> list[bytes]:
        """The payloads of the newest rows, each cut to _SAMPLE_MAX (damaged ones skipped)."""
        out = []
        for key, data, blob, codec, bcodec, pack, depth in self._state.db.execute(self._state.q(
            "SELECT n.id, coalesce(l.data, n.data), b.data, coalesce(l.codec, n.codec), "
            "b.codec, n.pack, n.depth FROM nodes n LEFT JOIN loose l ON l.seq = n.seq "
            "LEFT JOIN blobs b ON b.bid = n.bid ORDER BY n.seq DESC LIMIT ?"), (TRAIN_SAMPLES,)
        ):
            try:
                # What is compressed: a row's type and payload, or a payload stored apart.
                _, payload, body = self._state.paths.row(key, data, blob, codec, bcodec, pack,
                                                         depth)
            except StoreCorruptError:
                continue
            sample = body if blob is None else payload
            if len(sample) >= SMALL_MIN:
                out.append(sample[:_SAMPLE_MAX])
        return out
