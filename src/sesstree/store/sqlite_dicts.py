"""The SQLite backend's compression dictionary: found, or trained once the store holds enough
payloads (see :mod:`sesstree.store.codec`).

A writer counts the payloads it stores without a dictionary; past ``TRAIN_AFTER`` it trains one
on the store's newest payloads and stores it in ``dicts`` (or starts using the one another
connection trained meanwhile): when it next pauses or closes (no append waits for it), or,
inside a batch, at once, in the batch's transaction, so that a long import compresses the
rest of what it writes; a rollback takes the dictionary back too.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager

from ..errors import SesstreeError, StoreCorruptError
from .codec import SMALL_MIN, TRAIN_SAMPLES, dict_hash, train
from .sqlite_paths import PathReader

__all__ = ["DictWrites"]

# A training sample is cut to this: the start of a long payload teaches the dictionary as
# much as its whole, and training time grows with the bytes.
_SAMPLE_MAX = 8192


class DictWrites:
    """Finding and training the dictionary (mixed into the backend, which provides these)."""

    read_only: bool
    _db: sqlite3.Connection
    _lock: threading.RLock
    _paths: PathReader
    _plain_writes: int
    _dict_looked: bool
    _dict_in_txn: bool
    _batch_depth: int

    def _write(self) -> AbstractContextManager[None]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _count_plain(self, plain: bool) -> None:
        """Count a payload written without a dictionary (see _train)."""
        if plain and self._paths.codec.dict_id is None:
            self._plain_writes += 1

    def _find_dict(self) -> None:
        """Make new frames with the store's newest dictionary, if it has one."""
        self._dict_looked = True
        row = self._db.execute("SELECT max(id) FROM dicts").fetchone()
        if row[0] is not None:
            self._use_dict(int(row[0]))

    def _use_dict(self, dict_id: int) -> None:
        # (PathReader's loader checks the dictionary against its hash.)
        data = self._paths.load_dict(dict_id)
        if data is not None:
            self._paths.codec.use(dict_id, data)

    def _train(self) -> None:
        """Train the store's compression dictionary on its newest payloads, in a transaction
        of its own, once enough payloads were written without one; or start using the one
        another connection trained meanwhile. A failure here (the store busy, a disk full)
        leaves payloads plain and is tried again after as many writes: what was written is
        committed already."""
        self._plain_writes = 0
        batched = self._batch_depth > 0
        if self.read_only or (self._db.in_transaction and not batched):
            return
        made: bytes | None = None
        try:
            with self._write():
                row = self._db.execute("SELECT max(id) FROM dicts").fetchone()
                if row[0] is not None:
                    self._use_dict(int(row[0]))
                    return
                made = train(self._samples(), 1)
                if made is not None:
                    self._db.execute(
                        "INSERT INTO dicts(id, hash, data) VALUES (1, ?, ?)", (dict_hash(made), made)
                    )
        except (SesstreeError, sqlite3.Error):
            return
        if made is not None:
            self._paths.codec.use(1, made)
            self._dict_in_txn = batched

    def _samples(self) -> list[bytes]:
        """The payloads of the newest rows, each cut to _SAMPLE_MAX (damaged ones skipped)."""
        out = []
        for key, data, blob, codec, bcodec in self._db.execute(
            "SELECT n.id, n.data, b.data, n.codec, b.codec FROM nodes n "
            "LEFT JOIN blobs b ON b.bid = n.bid ORDER BY n.seq DESC LIMIT ?", (TRAIN_SAMPLES,)
        ):
            try:
                # What is compressed: a row's type and payload, or a payload stored apart.
                _, payload, body = self._paths.expand(key, data, blob, codec, bcodec)
            except StoreCorruptError:
                continue
            sample = body if blob is None else payload
            if len(sample) >= SMALL_MIN:
                out.append(sample[:_SAMPLE_MAX])
        return out
