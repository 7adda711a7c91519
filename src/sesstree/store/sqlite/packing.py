"""Packing a format-5 SQLite store: a path's loose tail made into packs (see
:mod:`sesstree.store.packs` for the format and why).

A tail is the loose rows from a head back to the first packed ancestor (or the root); it is
packed oldest first, at most :data:`~sesstree.store.packs.PACK_MAX` nodes (and about
:data:`~sesstree.store.packs.PACK_BYTES`) a pack, each pack in one short write transaction of
its own that first checks its rows are still loose below a packed parent (another writer may
have packed them meanwhile: then it does nothing). Each node is hashed against its id as the
pack is built, so a pack only ever holds what was checked. A kill at any point leaves either
the loose rows or the pack and its rows, never half: no committed event is lost.

When (all decided by :class:`Packer`, called by the writer and the backend):

- right after a commit that makes a tail this connection appends to :data:`PACK_AT` long:
  whole packs of ``PACK_AT`` (a writer that never pauses still reads back fast);
- at a writer's pause and when it closes: each tail it moved of at least :data:`PACK_MIN`;
- ``repack`` (``sess repack``, ``sess gc --aggressive``): every tail of every ref, and the
  history an upgrade from format 4 left loose (``pack_pending`` in meta until it is done).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import SesstreeError, StoreCorruptError
from ..base import PackCounts, Progress
from ..codec import CodecError
from ..packs import (
    INLINE_MAX,
    PACK_AT,
    PACK_BYTES,
    PACK_MAX,
    PACK_MIN,
    apart_body,
    build_frame,
    checksum,
    verify_run,
)
from .state import ConnState
from .txn import Transactions

if TYPE_CHECKING:
    from .background import Background

__all__ = ["PENDING", "Packer", "trim_packs"]

#: The meta key that says an upgrade's packing of the old history is not finished.
PENDING = "pack_pending"
# The loose rows from a head back to its first packed ancestor (or the root), newest first.
_TAIL = """
WITH RECURSIVE up(seq, parent) AS (
    SELECT seq, parent FROM nodes WHERE seq = ?1 AND pack IS NULL
    UNION ALL
    SELECT n.seq, n.parent FROM nodes n JOIN up ON n.seq = up.parent WHERE n.pack IS NULL
)
SELECT seq, parent FROM up
"""
_ROWS = (
    "SELECT n.seq, n.parent, n.pack, n.id, coalesce(l.data, n.data), b.data, "
    "coalesce(l.codec, n.codec), b.codec, n.bid, b.hash, n.depth FROM nodes n "
    "LEFT JOIN loose l ON l.seq = n.seq LEFT JOIN blobs b ON b.bid = n.bid "
    "WHERE n.seq IN ({marks})"
)
# Every ref's head (the newest entry of each ref name): one index seek per name.
_HEADS = """
WITH RECURSIVE names(ref) AS (
    SELECT (SELECT ref FROM reflog WHERE ref > ?1 ORDER BY ref LIMIT 1)
    UNION ALL
    SELECT (SELECT ref FROM reflog WHERE ref > names.ref ORDER BY ref LIMIT 1)
    FROM names WHERE names.ref IS NOT NULL
)
SELECT names.ref, l.new FROM names
JOIN reflog l ON l.ref = names.ref
    AND l.n = (SELECT n FROM reflog WHERE ref = names.ref ORDER BY n DESC LIMIT 1)
WHERE names.ref IS NOT NULL AND l.new IS NOT NULL
"""
_NEWEST = "SELECT new FROM reflog WHERE ref = ? ORDER BY n DESC LIMIT 1"
#: Time given to an upgrade's packing at a writer's pause, and when it closes (seconds).
UPGRADE_AT_PAUSE = 0.2
UPGRADE_AT_CLOSE = 0.05


class _Run(NamedTuple):
    """A pack built and not committed yet: its rows as read (row, parent row, id), where it
    goes, and its compressed frame."""

    rows: list[tuple[int, int | None, bytes]]
    base: int | None
    base_id: bytes | None
    depth: int
    size: int
    codec: int
    data: bytes
    inlined: list[int]


class Packer:
    """Packs the tails of one connection's store. Owns the count of loose appends this
    connection made to each ref since its tail was last packed."""

    def __init__(self, state: ConnState, txn: Transactions,
                 find_dict: Callable[[], None]) -> None:
        self._state = state
        self._txn = txn
        self._find_dict = find_dict
        #: ref name -> loose appends this connection made to it (a hint, never the truth).
        self.moved: dict[str, int] = {}
        self._failed: set[int] = set()  # heads whose tail could not be packed (damage)
        self._cursor = ""  # how far an upgrade's packing got through the ref names
        #: The writer's background thread (background.py), which packs the tails commits made
        #: long; None: they are packed inline, right after the commit.
        self.background: Background | None = None

    # -- when -------------------------------------------------------------------------------

    def note(self, name: str) -> bool:
        """Count an append to ``name``; True when its tail may now be PACK_AT long."""
        count = self.moved.get(name, 0) + 1
        self.moved[name] = count
        return count >= PACK_AT

    def after_commit(self, names: Iterable[str]) -> None:
        """Whole packs of PACK_AT for the refs whose tails are due (after a commit): queued
        for the background thread, or (none, or closed) made now."""
        background = self.background
        for name in names:
            if self.moved.get(name, 0) >= PACK_AT:
                if background is not None and background.pack(name):
                    self.moved[name] = 0  # (still listed: the pause packs what is left)
                    continue
                head = self.head(name)
                left = self.pack_tail(head, PACK_AT, PACK_AT) if head is not None else 0
                self.moved[name] = left

    def at_pause(self, closing: bool = False) -> bool:
        """Pack each tail this connection moved of at least PACK_MIN; then give an upgrade's
        packing a moment. True if that packing is not finished (the next pause goes on)."""
        moved, self.moved = self.moved, {}
        for name in moved:
            head = self.head(name)
            if head is not None:
                self.pack_tail(head, PACK_MIN, None)
        cursor = self._pending()
        if cursor is None:
            return False
        self._cursor = max(self._cursor, cursor)
        return not self.repack_refs(None, UPGRADE_AT_CLOSE if closing else UPGRADE_AT_PAUSE)

    def repack(self, progress: Progress | None = None) -> PackCounts:
        """Every tail of every ref, whatever its length; an upgrade's packing finished."""
        self.moved = {}
        self._failed.clear()
        self._cursor = ""
        self.repack_refs(progress, None)
        return self.counts()

    def repack_refs(self, progress: Progress | None, budget: float | None) -> bool:
        """Pack every ref's tail (from where the last call stopped) until done or ``budget``
        seconds are spent. True when every ref was done (and ``pack_pending`` is cleared)."""
        state = self._state
        start = time.monotonic()
        total = 0
        if progress is not None:
            with state.lock, state.errors():
                total = int(state.db.execute("SELECT count(DISTINCT ref) FROM reflog").fetchone()[0])
        done = 0
        while True:
            with state.lock, state.errors():
                rows = state.db.execute(_HEADS + " LIMIT 200", (self._cursor,)).fetchall()
            if not rows:
                break
            for name, head in rows:
                self.pack_tail(int(head), 1, None)
                self._cursor = name
                done += 1
                if progress is not None:
                    progress(done, total)
                if budget is not None and time.monotonic() - start > budget:
                    # Where it got is kept in the store, so the next writer (another
                    # process, or this one reopened) goes on from there.
                    with self._txn.write():
                        state.db.execute("UPDATE meta SET value = ? WHERE key = ?",
                                         (name, PENDING))
                    return False
        self._cursor = ""
        with self._txn.write():
            state.db.execute("DELETE FROM meta WHERE key = ?", (PENDING,))
        return True

    # -- how ---------------------------------------------------------------------------------

    def pack_tail(self, head: int, least: int, step: int | None,
                  src: ConnState | None = None) -> int:
        """Pack the loose tail that ends at row ``head`` if it is at least ``least`` long:
        packs of ``step`` nodes (the rest stays loose), or (None) all of it. Returns how many
        nodes are left loose. Damage found while building is left for reads and fsck to
        report (the rows stay as they are). ``src``: the connection the rows are read and
        the packs built on (by default the backend's; the background packer's own, see
        background.py); each pack is committed on the backend's connection."""
        if head in self._failed:
            return 0
        src = src if src is not None else self._state
        with src.lock, src.errors():
            tail = src.db.execute(_TAIL, (head,)).fetchall()
        if len(tail) < least:
            return len(tail)
        tail.reverse()
        base = tail[0][1]
        seqs = [int(r[0]) for r in tail]
        at = 0
        while at < len(seqs):
            size = step if step is not None else PACK_MAX
            if step is not None and len(seqs) - at < step:
                break
            try:
                made = self._pack_run(seqs[at : at + size], base, src)
            except (StoreCorruptError, CodecError):
                self._failed.add(head)
                return 0
            if made == 0:
                return 0  # someone else packed them, or gc removed them: nothing to do
            base = seqs[at + made - 1]
            at += made
        return len(seqs) - at

    def _pack_run(self, seqs: list[int], base: int | None, src: ConnState) -> int:
        """Pack the oldest of ``seqs`` (consecutive nodes of one path below row ``base``): as
        many as fit in PACK_BYTES (at least one), built on ``src`` outside any write
        transaction, then committed in a short one of its own. Returns how many were packed
        (0: they are not loose below a packed parent any more)."""
        if src is self._state:
            self._find_dict()
            with src.lock, src.errors():
                run = self._build(src, seqs, base)
        else:
            with src.errors():
                run = self._build(src, seqs, base)
        return 0 if run is None else self._commit(run)

    def _build(self, src: ConnState, seqs: list[int], base: int | None) -> _Run | None:
        """Read the rows on ``src``, check each node against its id and make the pack (its
        frame compressed): nothing is written. None if the rows are not loose below a packed
        parent (packed or removed meanwhile)."""
        db = src.db
        marks = ",".join("?" * len(seqs))
        found = {r[0]: r for r in db.execute(_ROWS.format(marks=marks), seqs)}
        base_id: bytes | None = None
        if base is not None:
            row = db.execute("SELECT id, pack FROM nodes WHERE seq = ?", (base,)).fetchone()
            if row is None or row[1] is None:
                return None
            base_id = row[0]
        rows: list[Any] = [found.get(s) for s in seqs]
        ids: list[bytes] = []
        bodies: list[bytes] = []  # each node's hashed body (for its id)
        entries: list[bytes] = []  # what the frame holds for it
        apart: list[int] = []
        inlined: list[int] = []  # blob rows whose payload went into the frame
        size = 0
        parent = base
        first_depth = rows[0][10] if rows[0] is not None else None
        for k, r in enumerate(rows):
            if r is None or r[2] is not None or r[1] != parent:
                return None  # packed or removed meanwhile (or not the path it was)
            if type(first_depth) is not int or r[10] != first_depth + k:
                raise StoreCorruptError(
                    f"store {src.path} is damaged: node row {r[0]} has a wrong depth index")
            body, entry, kept_apart = self._body(src, r)
            if k and size + len(entry) > PACK_BYTES:
                break
            size += len(entry)
            ids.append(r[3])
            bodies.append(body)
            entries.append(entry)
            if kept_apart:
                apart.append(k)
            elif r[8] is not None:
                inlined.append(r[8])
            parent = r[0]
        count = len(ids)
        bad = verify_run(base_id, b"".join(ids), bodies)
        if bad >= 0:
            raise StoreCorruptError(
                f"store {src.path} is damaged: node {ids[bad].hex()[:12]} does not hash "
                "to its id")
        frame = build_frame(ids, base_id, entries, apart)
        codec, data = src.paths.codec.pack_blob(frame)
        depth = first_depth if type(first_depth) is int else 0  # (checked above)
        return _Run([(r[0], r[1], r[3]) for r in rows[:count]], base, base_id, depth,
                    len(frame), codec, data, inlined)

    def _commit(self, run: _Run) -> int:
        """Commit a built pack on the backend's connection, in one short write transaction
        that first checks its rows are still loose below their packed parent, as they were
        read (another writer may have packed them, or gc removed them, meanwhile: then it
        writes nothing and returns 0). Returns how many nodes it packed."""
        state = self._state
        db = state.db
        packed = [r[0] for r in run.rows]
        count = len(packed)
        where = f"seq IN ({','.join('?' * count)})"
        with self._txn.write():
            now = db.execute(f"SELECT seq, parent, id FROM nodes WHERE {where} AND pack IS NULL",
                             packed).fetchall()
            if len(now) != count or set(now) != set(run.rows):
                return 0
            if run.base is not None:
                row = db.execute("SELECT id, pack FROM nodes WHERE seq = ?",
                                 (run.base,)).fetchone()
                if row is None or row[1] is None or row[0] != run.base_id:
                    return 0
            pid = _store_pack(state, run.codec, run.data, run.size, run.depth, run.base, count)
            # The payloads leave `loose` (whole pages freed for the next appends); a node's row
            # only gains its pack (a row written before format 5 also drops its payload).
            db.execute(f"DELETE FROM loose WHERE {where}", packed)
            db.execute(f"UPDATE nodes SET pack = ?, data = x'', codec = NULL WHERE {where}",
                       [pid, *packed])
            inlined = run.inlined
            if inlined:
                marks = ",".join("?" * len(inlined))
                db.execute(f"UPDATE nodes SET bid = NULL WHERE {where} AND bid IN ({marks})",
                           [*packed, *inlined])
                db.execute(f"DELETE FROM blobs WHERE bid IN ({marks}) AND NOT EXISTS "
                           "(SELECT 1 FROM nodes WHERE nodes.bid = blobs.bid)", inlined)
        return count

    @staticmethod
    def _body(src: ConnState, r: tuple[object, ...]) -> tuple[bytes, bytes, bool]:
        """A loose row's hashed body, what the frame holds for it, and whether its payload
        stays apart (inflated with ``src``'s codec)."""
        data, blob, codec, bcodec, digest = r[4], r[5], r[6], r[7], r[9]
        if not isinstance(data, bytes):
            raise StoreCorruptError(f"store {src.path} is damaged: a node row is unreadable")
        paths = src.paths
        key = r[3] if isinstance(r[3], bytes) else None
        if codec is not None:
            data = paths.inflate(data, codec, key, 1 << 20)  # type: ignore[arg-type]
        if blob is None:
            return data, data, False
        payload = paths.inflate(blob, bcodec, key)  # type: ignore[arg-type]
        body = data[:-1] + payload
        if len(payload) > INLINE_MAX and isinstance(digest, bytes):
            return body, apart_body(data[:-1], digest), True
        return body, body, False

    # -- what --------------------------------------------------------------------------------

    def counts(self) -> PackCounts:
        """Packs, packed and loose rows, and the packs' bytes (a few aggregates)."""
        state = self._state
        with state.lock, state.errors():
            packs, stored, raw, packed = state.db.execute(
                "SELECT count(*), coalesce(sum(length(data)), 0), coalesce(sum(size), 0), "
                "coalesce(sum(count), 0) FROM packs").fetchone()
            nodes = int(state.db.execute("SELECT count(*) FROM nodes").fetchone()[0])
        return PackCounts(int(packs), int(packed), nodes - int(packed), int(stored), int(raw))

    def head(self, name: str, src: ConnState | None = None) -> int | None:
        """The row ref ``name`` is at (read on ``src``, by default the backend's connection),
        or None (no such ref, or it cannot be read now)."""
        state = src if src is not None else self._state
        try:
            with state.lock, state.errors():
                row = state.db.execute(_NEWEST, (name,)).fetchone()
        except (SesstreeError, sqlite3.Error):
            return None
        return int(row[0]) if row is not None and row[0] is not None else None

    def use_dict_of(self, src: ConnState) -> None:
        """Make ``src``'s codec compress with the store's newest dictionary, as the backend's
        connection does (a connection of the background thread builds packs too)."""
        row = src.db.execute("SELECT max(id) FROM dicts").fetchone()
        if row[0] is not None and row[0] != src.paths.codec.dict_id:
            try:
                data = src.paths.load_dict(int(row[0]))
            except CodecError:
                return  # damaged: packs stay plain zstd (fsck names the dictionary)
            if data is not None:
                src.paths.codec.use(int(row[0]), data)

    def _pending(self) -> str | None:
        """Where an upgrade's packing got to (the last ref name it did; "1" for none yet), or
        None when none is pending."""
        state = self._state
        with state.lock, state.errors():
            row = state.db.execute("SELECT value FROM meta WHERE key = ?", (PENDING,)).fetchone()
        return None if row is None else str(row[0])


def _store_pack(state: ConnState, codec: int, data: bytes, size: int, depth: int,
                base: int | None, count: int) -> int:
    """Insert the compressed frame ``data`` (``size`` bytes before compression, made with
    ``codec``) as a pack of ``count`` nodes from ``depth`` below row ``base``, with its
    checksum; its number. (Inside the caller's write transaction.)"""
    cur = state.db.execute(
        "INSERT INTO packs(depth, base, count, size, codec, sum, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (depth, base, count, size, codec, checksum(codec, depth, count, data), data))
    assert cur.lastrowid is not None
    return cur.lastrowid


def trim_packs(state: ConnState, txn: Transactions) -> int:
    """After gc removed rows: drop the packs none of whose rows are left, and rebuild each pack
    some of whose rows went from the prefix that is left (what a run keeps is always a prefix:
    a kept node's parent is kept), so that what gc removed is gone from the file too. One short
    write transaction per pack. Returns how many packs were dropped or rebuilt."""
    with state.lock, state.errors():
        left = dict(state.db.execute(
            "SELECT pack, count(*) FROM nodes WHERE pack IS NOT NULL GROUP BY pack").fetchall())
        packs = state.db.execute("SELECT pid, count FROM packs").fetchall()
    changed = 0
    reader = state.paths.packed
    for pid, count in packs:
        if left.get(pid, 0) == count or reader is None:
            continue
        with txn.write():
            db = state.db
            rows = db.execute("SELECT seq, depth, id FROM nodes WHERE pack = ?", (pid,)).fetchall()
            if not rows:
                db.execute("DELETE FROM packs WHERE pid = ?", (pid,))
                changed += 1
                continue
            pack, ids, apart, base_id, entries = reader.raw(pid)
            kept = len(rows)
            if sorted(int(r[1]) - pack.depth for r in rows) != list(range(kept)) or any(
                    ids[32 * (r[1] - pack.depth) : 32 * (r[1] - pack.depth + 1)] != r[2]
                    for r in rows):
                continue  # not a prefix: damage, which fsck reports; nothing is rewritten
            frame = build_frame([ids[32 * k : 32 * k + 32] for k in range(kept)], base_id,
                                entries[:kept], [k for k in apart if k < kept])
            codec, data = state.paths.codec.pack_blob(frame)
            made = _store_pack(state, codec, data, len(frame), pack.depth, pack.base, kept)
            db.execute("UPDATE nodes SET pack = ? WHERE pack = ?", (made, pid))
            db.execute("DELETE FROM packs WHERE pid = ?", (pid,))
            changed += 1
    if reader is not None:
        reader.forget()
    return changed
