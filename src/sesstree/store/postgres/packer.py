"""Packing on PostgreSQL (format 5): loose tails made into packs, by the writers that grew them,
by ``repack``, and again by gc when some of a pack's nodes go.

A part the backend owns (:class:`~sesstree.store.postgres.backend.PostgresBackend`). Which
tails and when (see :mod:`sesstree.store.packs`):

- after a commit (outside a batch, or when the batch ends) that leaves a ref this backend
  moved with a loose tail of at least ``PACK_AT`` nodes: that tail's oldest whole runs of
  ``PACK_AT`` nodes (the rest waits);
- when the backend closes: the tail of each ref it moved, if it is at least ``PACK_MIN``
  nodes long, in packs of up to ``PACK_MAX``;
- ``repack``: every ref's tail, whatever its length; and a writer that closes gives the
  packing an upgrade left pending 50 ms (``pack_pending`` keeps the last ref it packed).

A pack is built on the client from the run's rows (each node hashed against its id first: a
damaged row is never packed) and written with one call, its own short transaction
(``sesstree_pack``): a kill leaves the loose rows or the pack, never half. How long a tail is,
the backend knows for the refs it moved (it counts its appends; a ref it has not looked at
yet is measured once); packing reads the tail itself, so a count gone stale (another writer
packed it) costs a look, never a wrong pack.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
from blake3 import blake3

from ...errors import SesstreeError, StoreCorruptError
from ...node import NodeId
from .. import packs
from ..base import PackCounts, Progress
from ..codec import CodecError
from ..rows import type_length
from . import packsql, refs
from .channel import Channel
from .codec import PgPayloads
from .conn import Conn
from .unpack import PackReader

__all__ = ["UPGRADE_AT_CLOSE", "PgPacker"]

#: Seconds a writer that closes spends on the packing an upgrade left pending (as SQLite's
#: writers do when they close), so that writers finish it together even if no one repacks.
UPGRADE_AT_CLOSE = 0.05


class PgPacker:
    """The packing of one PostgreSQL backend (see the module docstring)."""

    def __init__(self, channel: Channel, payloads: PgPayloads, reader: PackReader) -> None:
        self._channel = channel
        self._payloads = payloads
        self._reader = reader
        self._read = channel.read
        #: The refs this backend moved: the head it left each at, and the loose tail it knows
        #: that head has (None: not looked at yet); those whose tail may be PACK_AT long.
        self.heads: dict[str, NodeId] = {}
        self.tails: dict[str, int | None] = {}
        self.due: set[str] = set()

    # -- what the writes tell it ------------------------------------------------------------

    def moved(self, name: str, old: NodeId | None, new: NodeId | None, appended: bool) -> None:
        """Ref ``name`` moved from ``old`` to ``new`` (None: deleted); ``appended``: by one
        node (so its tail grew by one, if this backend left it at ``old``)."""
        if new is None:
            self.heads.pop(name, None)
            self.tails.pop(name, None)
            self.due.discard(name)
            return
        known = self.tails.get(name)
        grew = appended and known is not None and self.heads.get(name) == old
        now = self.tails[name] = known + 1 if grew and known is not None else None
        self.heads[name] = new
        if now is None or now >= packs.PACK_AT:
            self.due.add(name)

    def forget(self, names: Iterable[str]) -> None:
        """A batch that moved ``names`` was rolled back: where they are is not known here."""
        for name in names:
            self.heads.pop(name, None)
            self.due.discard(name)
            if name in self.tails:
                self.tails[name] = None

    def after_commit(self) -> None:
        """Pack the whole runs of ``PACK_AT`` of every tail that reached it (outside a batch:
        each pack its own transaction). Never fails the commit it follows."""
        due, self.due = self.due, set()
        for name in sorted(due):
            if name in self.heads:
                self._quietly(name, bytes.fromhex(self.heads[name]), packs.PACK_AT,
                              packs.PACK_AT)

    def at_close(self) -> None:
        """Pack the tail of each ref this backend moved, if at least ``PACK_MIN`` long (as
        the ref is now: another writer may have moved it since)."""
        moved = bool(self.tails)
        for name, known in list(self.tails.items()):
            if known is None or known >= packs.PACK_MIN:
                self._quietly(name, None, packs.PACK_MIN, packs.PACK_MAX)
        self.heads.clear()  # (a second close has nothing left to do)
        self.tails.clear()
        self.due.clear()
        if moved:  # a writer closing gives an upgrade's packing a moment
            try:
                rows = self._read(refs.GET_META, (packsql.PENDING,))
                if rows:
                    self.pack_refs(str(rows[0][0]), UPGRADE_AT_CLOSE)
            except (SesstreeError, CodecError, psycopg.Error):
                pass  # it is still pending: the next writer or repack goes on

    def _quietly(self, name: str, head: bytes | None, least: int, most: int) -> None:
        """Pack ref ``name``'s tail from ``head`` (None: where the ref is now) after the
        fact: a failure (a lost connection, damage that fsck reports) leaves it loose, to be
        packed later; the write it follows stands."""
        try:
            if head is None:
                rows = self._read(refs.GET_REF, (name,))
                if not rows:
                    self.tails.pop(name, None)
                    return
                head = bytes(rows[0][0])
            left = self.pack_tail(head, least, most)
            # Stopped short (a damaged row, another writer packing it first): looked at again
            # only once the tail has grown as much again, not after every commit.
            self.tails[name] = left if left < least else left - least
        except (SesstreeError, CodecError, psycopg.Error):
            self.tails[name] = None

    # -- packing ------------------------------------------------------------------------------

    def pack_tail(self, head: bytes, least: int, most: int, strict: bool = False,
                  done: Callable[[int], None] | None = None, reclaim: bool = True) -> int:
        """Pack the loose tail that ends at ``head``, oldest first, in runs of up to ``most``
        nodes, while what is left is at least ``least`` long. Returns how many nodes stay
        loose. ``strict``: a damaged row is an error (else it stops the packing quietly);
        ``done`` hears how many nodes each pack took; ``reclaim``: make the packed rows' space
        reusable now (else the caller does, once for many tails)."""
        links = [(int(s), None if p is None else int(p))
                 for s, p in self._read(packsql.TAIL, (head,))]
        links.reverse()
        at = 0
        while len(links) - at >= least:
            made = self._pack_run(links[at : at + most], strict)
            if not made:
                break
            at += made
            if done is not None:
                done(made)
        if at and reclaim:
            self._reclaim()
        return len(links) - at

    def _reclaim(self) -> None:
        """Make the space of the rows just packed reusable now (see :data:`.packsql.RECLAIM`),
        if this role may (else autovacuum does it later)."""
        if self._channel.depth or self._channel.conn.in_batch:
            return  # (VACUUM cannot run in a transaction: a gc or a batch's own)
        try:
            self._read(packsql.RECLAIM, fetch=False)
        except SesstreeError:
            pass  # (a server without these options: autovacuum does it)

    def _pack_run(self, links: Sequence[tuple[int, int | None]], strict: bool) -> int:
        """Pack the oldest nodes of a run of loose rows (as many as PACK_BYTES allows, at
        least one): how many it packed, 0 if another writer packed them first (or, unless
        ``strict``, if a row is damaged)."""
        seqs = [s for s, _ in links]
        rows = self._read(packsql.RUN_ROWS, (seqs,), binary=True)
        if [int(r[0]) for r in rows] != seqs or any(r[6] is not None for r in rows):
            return 0  # packed or removed meanwhile
        base_seq = links[0][1]
        base = None if rows[0][2] is None else bytes(rows[0][2])
        if (base is None) != (base_seq is None):
            return self._damaged(strict, bytes(rows[0][1]), "its parent is missing")
        depth = int(rows[0][3])
        ids: list[bytes] = []
        bodies: list[bytes] = []
        entries: list[bytes] = []
        apart: list[int] = []
        inlined: list[int] = []
        size = 0
        for k, (seq, key, _, at, data, blob, _) in enumerate(rows):
            key = bytes(key)
            if at != depth + k:
                return self._damaged(strict, key, "its depth index is wrong")
            try:
                body = self._payloads.body(bytes(data))
                end = type_length(body)
            except (CodecError, ValueError, IndexError):
                return self._damaged(strict, key, "its row cannot be read")
            entry, kept_apart = body, False
            if blob is not None and len(body) - end > packs.INLINE_MAX \
                    and blake3(body[end:]).digest() == blob:
                entry, kept_apart = packs.apart_body(body[:end], bytes(blob)), True
            if k and size + len(entry) > packs.PACK_BYTES:
                break  # the rest goes into the next pack
            size += len(entry)
            if kept_apart:
                apart.append(k)
            elif blob is not None:
                inlined.append(int(seq))  # its payload goes into the frame
            ids.append(key)
            bodies.append(body)
            entries.append(entry)
        bad = packs.verify_run(base, b"".join(ids), bodies)
        if bad >= 0:
            return self._damaged(strict, ids[bad], "it does not hash to its id")
        pid = self._write(seqs[: len(ids)], depth, base_seq, ids, base, entries, apart, inlined)
        return len(ids) if pid is not None else 0

    def _write(self, seqs: list[int], depth: int, base_seq: int | None, ids: list[bytes],
               base: bytes | None, entries: list[bytes], apart: list[int],
               inlined: list[int]) -> int | None:
        """Compress a run's frame and store it as a pack (one call); its number, or None if
        the rows were packed meanwhile."""
        frame = packs.build_frame(ids, base, entries, apart)
        codec, data = self._compress(frame)
        sum = packs.checksum(codec, depth, len(ids), data)
        params = (seqs, depth, base_seq, len(frame), codec, sum, data, inlined)

        def work(conn: Conn, replay: bool) -> int | None:
            try:
                row = conn.execute(packsql.PACK, params).fetchone()
            except psycopg.errors.RaiseException:  # (P0001) packed meanwhile: nothing done
                return None
            return None if row is None or row[0] is None else int(row[0])

        with self._channel.lock:
            return self._channel.run(work)

    def _compress(self, frame: bytes) -> tuple[int, bytes]:
        if not self._payloads.looked:
            self._payloads.use_newest()
        return self._payloads.codec.pack_blob(frame)

    def _damaged(self, strict: bool, key: bytes, why: str) -> int:
        if strict:
            raise StoreCorruptError(f"the store at {self._channel.url} is damaged: node "
                                    f"{key.hex()[:12]} {why}; it stays loose (see fsck)")
        return 0

    def samples(self, n: int) -> list[bytes]:
        """Up to ``n`` rows (type then payload) of the newest packs, newest first, for the
        compression dictionary to be trained on (a payload kept apart is left out). A pack
        that cannot be read gives none."""
        out: list[bytes] = []
        for pid, depth, count, codec, sum, data in self._read(packsql.NEWEST_PACKS, (8,),
                                                               binary=True):
            try:
                pack = self._reader.raw(pid, depth, count, codec, bytes(sum), bytes(data))
            except StoreCorruptError:
                continue
            out += [b for k, b in enumerate(reversed(pack.bodies))
                    if count - 1 - k not in pack.apart]
            if len(out) >= n:
                break
        return out[:n]

    # -- the Packing capability (base.Packing) ------------------------------------------------

    def pack_counts(self) -> PackCounts:
        """Packs, packed and loose nodes, the packs' bytes stored and before compression:
        counted on the server, no pack read."""
        n, packed, loose, stored, raw = (int(v) for v in self._read(packsql.PACK_COUNTS)[0])
        return PackCounts(n, packed, loose, stored, raw)

    def repack(self, progress: Progress | None = None) -> PackCounts:
        """Pack every loose tail of every ref, whatever its length, a pack per transaction;
        then the pack job an upgrade left pending is done. Killed midway, it is still
        pending, and the next repack goes on (what it packed stays: its tails are short)."""
        total = self.pack_counts().loose_nodes
        done = [0]

        def step(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(min(done[0], total), total)

        self.pack_refs("", None, strict=True, done=step)
        return self.pack_counts()

    def pack_refs(self, after: str, budget: float | None, strict: bool = False,
                  done: Callable[[int], None] | None = None) -> bool:
        """Pack the tail of every ref named after ``after``, in name order, until all are
        (then the upgrade's packing is done: ``pack_pending`` goes; True) or ``budget``
        seconds are spent (where it got is kept in ``pack_pending``, so the next writer to
        close, in any process, goes on from there; False)."""
        start = time.monotonic()
        cursor = after
        try:
            while rows := self._read(packsql.REFS_AFTER, (cursor,)):
                for name, target in rows:
                    self.pack_tail(bytes(target), 1, packs.PACK_MAX, strict=strict, done=done,
                                   reclaim=False)
                    self.tails.pop(str(name), None)
                    cursor = str(name)
                    if budget is not None and time.monotonic() - start > budget:
                        self._read(packsql.SET_PENDING, (cursor,), fetch=False)
                        return False
                self._reclaim()  # (once for each slice of refs, not for every tail)
        finally:
            self._reclaim()
        self._read(packsql.DONE_PENDING, fetch=False)
        return True

    # -- gc ----------------------------------------------------------------------------------

    def rebuild(self, conn: Conn, pids: Sequence[Any]) -> None:
        """In gc's transaction, after some nodes went: drop each of ``pids`` none of whose
        nodes are left, and pack again the kept prefix of one that lost some (what is kept of
        a run is a prefix of it: a kept node's parent is kept), so what went is gone from the
        pack's bytes too. A damaged pack is left as it is (fsck names it)."""
        for pid in sorted({int(p) for p in pids}):
            left, deepest = conn.execute(packsql.LEFT_OF_PACK, (pid,)).fetchone() or (0, None)
            if not left:
                conn.execute(packsql.DROP_PACK, (pid,))
                continue
            row = conn.execute(packsql.ONE_PACK, (pid,), binary=True).fetchone()
            if row is None:
                continue
            _, depth, count, codec, sum, data, base_seq, _ = row
            keep = int(deepest) - depth + 1
            if not 0 < keep < count:
                continue
            try:
                pack = self._reader.raw(pid, depth, count, codec, bytes(sum), bytes(data))
            except StoreCorruptError:
                continue
            frame = packs.build_frame([pack.id_at(k) for k in range(keep)], pack.base,
                                      pack.bodies[:keep], sorted(a for a in pack.apart if a < keep))
            codec, data = self._compress(frame)
            made = conn.execute(packsql.ADD_PACK, (
                depth, base_seq, keep, len(frame), codec,
                packs.checksum(codec, depth, keep, data), data)).fetchone()
            assert made is not None
            conn.execute(packsql.SET_PACK, (made[0], pid))
            conn.execute(packsql.DROP_PACK, (pid,))
