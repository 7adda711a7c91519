"""The write-ahead log: its size up front, checkpoints when a writer pauses, and a scan for
commits a damaged frame has hidden."""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ...errors import StoreError
from .threads import start_daemon

__all__ = [
    "FRAME_HEADER", "WAL_HEADER", "IdleCheckpointer", "checksum", "frame_checksum", "header_valid",
    "hidden_commit", "log_order", "preallocate_wal", "scan_wal", "walk_log",
]


def preallocate_wal(db: sqlite3.Connection, path: Path, pages: int, *, sync: bool = True) -> None:
    """Extend the WAL of the store at ``path`` with zeros to hold ``pages`` frames, so that
    durable commits overwrite blocks the file already has.

    A commit that grows a file makes its fsync also commit the file system's metadata, which
    on the disks measured here doubles the cost of a durable append. SQLite reuses the WAL from
    its start after each checkpoint, so with a checkpoint every ``pages`` pages the file never
    needs to grow again. Zeros past the last frame read as the end of the log, which is how
    SQLite treats a WAL it has not filled yet. Without ``sync`` the zeros are left to the OS:
    a crash can only leave the tail as holes or stale frames, which read as the end too.
    """
    page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    target = 32 + (pages + 64) * (24 + page_size)
    wal = str(path) + "-wal"
    # The write lock: no other connection can be appending frames while the file grows.
    # If another writer holds it, skip: this only saves time, and the WAL grows as usual.
    timeout = db.execute("PRAGMA busy_timeout").fetchone()[0]
    db.execute("PRAGMA busy_timeout=0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return
    finally:
        db.execute(f"PRAGMA busy_timeout={int(timeout)}")
    try:
        fd = os.open(wal, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            chunk = b"\0" * (1 << 20)
            while size < target:
                size += os.pwrite(fd, chunk[: target - size], size)
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
    finally:
        db.execute("ROLLBACK")


class IdleCheckpointer:
    """Fold a writer's recent commits into the main file once it has been idle a moment.

    A committed transaction first lives only in the WAL; SQLite copies it into the main file
    at a checkpoint, every ``wal_autocheckpoint`` pages (~20 MB here). A flipped bit in the
    WAL makes SQLite treat the log as ending just before the damaged frame, so that commit and
    every later one would be lost at the next open (walguard.py finds that before SQLite
    opens the store, and keeps the log, but cannot bring the commits back). Checkpointing
    as soon as a writer pauses (an agent waiting for its model, a CLI command ending) keeps
    that exposure to what was written in the last :attr:`idle` seconds of activity instead of
    the last 20 MB.

    One daemon thread per connection that writes, started on its first write; a write only
    counts itself. A period of :attr:`idle` seconds without a write is a pause (so the
    checkpoint comes one to two periods after the last write). The checkpoint is PASSIVE:
    it waits for no reader or writer.
    """

    def __init__(self, run: Callable[[], bool], idle: float) -> None:
        self.idle = idle
        self._run = run
        self._writes = 0  # counted, not timed: a write costs one increment
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set after each idle checkpoint (tests wait on it).
        self.done = threading.Event()

    @property
    def wrote_since_checkpoint(self) -> bool:
        """True if a write came after the last idle checkpoint."""
        return self._writes > 0

    def wrote(self) -> None:
        """Called after each commit: cheap, it only counts."""
        self._writes += 1
        if self._thread is None:
            self._thread = start_daemon(self._loop, "sesstree-checkpoint")

    def _loop(self) -> None:
        seen = 0
        while not self._stop.wait(self.idle):
            writes = self._writes
            if writes and writes == seen:  # wrote, then nothing for a whole period: a pause
                self._writes = 0
                try:
                    more = self._run()
                except (sqlite3.Error, OSError, StoreError):
                    self._writes = writes  # try again at the next pause
                    continue
                if more:  # work left for later pauses (an upgrade's packing): come back
                    self._writes = 1
                self.done.set()
            seen = self._writes

    def stop(self) -> None:
        """End the thread (the caller checkpoints one last time itself if it wrote)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def scan_wal(path: Path, tries: int = 3) -> str | None:
    """A fault if the WAL beside store file ``path`` holds commits SQLite will ignore.

    SQLite reads the WAL frame by frame while each frame's salt matches the header's and its
    running checksum holds: the log ends at the last commit before the first frame that
    fails, and the index (the ``-shm`` file) records where. A commit frame of the same log
    (same salts) past that point whose checksum chains from the frame before it means
    commits a damaged frame made invisible: that is what this reports, whether the damage
    broke the chain or the salts (a zeroed frame). Frames that continue the chain are a write
    in progress, and a torn last frame (a crash while writing) has no commit after it, so
    neither is reported. Only the frames past SQLite's end are checked, so this costs little
    even for a large log. A writer at work can be caught half-way through a frame while the
    file is read, so a finding counts only if it is the same on ``tries`` readings in a row.
    (The check before SQLite opens a store at rest is in walguard.py.)
    """
    path = Path(os.path.realpath(path))  # SQLite's log is beside the file a link leads to
    first = _scan_once(path)
    for _ in range(tries - 1):
        if first is None:
            return None
        again = _scan_once(path)
        if again != first:
            return None  # it moved with the writer: a write in progress, not damage
    return first


def _scan_once(path: Path) -> str | None:
    wal = Path(str(path) + "-wal")
    index = _read_in_child(Path(str(path) + "-shm"), 48)
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return None
    if len(index) < 48 or len(data) < WAL_HEADER:
        return None
    # SQLite's WAL index header: the valid frames, the page size (1 means 64 KB), the running
    # checksum after the last valid frame, and the salts of the log.
    valid = struct.unpack("=I", index[16:20])[0]
    page_size = struct.unpack("=H", index[14:16])[0]
    page_size = 65536 if page_size == 1 else page_size
    checksum: tuple[int, int] = struct.unpack("=II", index[24:32])
    salts = index[32:40]
    magic = struct.unpack(">I", data[:4])[0]
    if not page_size:
        return None
    frame = FRAME_HEADER + page_size
    count = (len(data) - WAL_HEADER) // frame
    if magic not in _MAGIC or data[16:24] != salts:
        if valid:
            return None  # the log was started over since the index was written
        # SQLite found no valid header: every frame of the log is ignored.
        same = sum(1 for i in range(count) if data[40 + i * frame : 48 + i * frame]
                   == data[40:48] and any(data[40:48]))
        return (f"{wal.name}: the log header is damaged; SQLite ignores all {same} frames "
                "of it, and the commits they hold are lost") if same else None
    order = log_order(data)
    # SQLite's log ends at the last commit before the first bad frame: walk on from there
    # while the chain holds (the rest of that transaction, or a write in progress).
    for i in range(valid, count):
        at = WAL_HEADER + i * frame
        if data[at + 8 : at + 16] == salts:
            checksum = frame_checksum(order, data, at, frame, checksum)
            if checksum == struct.unpack_from(">II", data, at + 16):
                continue
        later = hidden_commit(data, frame, order, salts, at + 1)
        if later is None:
            return None  # the end of the log, or a torn last write: nothing acknowledged
        return (f"{wal.name}: frame {i + 1} is damaged; SQLite ignores the log from frame "
                f"{valid + 1} on, and the commits it holds up to frame {later} are lost")
    return None


# -- reading frames --------------------------------------------------------------------------

#: Sizes of the WAL's header and of a frame's header; the header's magic numbers (the low bit
#: says the checksums read big-endian words) and its one version.
WAL_HEADER, FRAME_HEADER = 32, 24
_MAGIC = (0x377F0682, 0x377F0683)
_VERSION = 3007000
_MASK = 0xFFFFFFFF


def log_order(data: bytes) -> str:
    """The byte order of the words SQLite's checksums read in this log ("<" or ">")."""
    return ">" if data[3] & 1 else "<"


def header_valid(data: bytes) -> bool:
    """True if the WAL's 32-byte header is one SQLite's recovery accepts (magic, version,
    page size, checksum); if not, SQLite ignores every frame of the log."""
    if len(data) < WAL_HEADER:
        return False
    magic, version, page_size = struct.unpack_from(">III", data)
    if magic not in _MAGIC or version != _VERSION:
        return False
    if page_size & (page_size - 1) or not 512 <= page_size <= 65536:
        return False
    seed = checksum(log_order(data), data, 0, 24, (0, 0))
    return seed == struct.unpack_from(">II", data, 24)


def checksum(order: str, data: bytes, start: int, end: int,
             seed: tuple[int, int]) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data[start:end]`` (two running 32-bit sums over pairs of
    words), continuing from ``seed``. Unrolled, and masked once per eight pairs (the sums grow
    by less than 2**12 in eight steps): about half the time of the plain loop."""
    s0, s1 = seed
    words = struct.unpack_from(f"{order}{(end - start) // 4}I", data, start)
    n = len(words)
    cut = n - n % 16
    for k in range(0, cut, 16):
        a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5, a6, b6, a7, b7 = words[k : k + 16]
        s0 += a0 + s1
        s1 += b0 + s0
        s0 += a1 + s1
        s1 += b1 + s0
        s0 += a2 + s1
        s1 += b2 + s0
        s0 += a3 + s1
        s1 += b3 + s0
        s0 += a4 + s1
        s1 += b4 + s0
        s0 += a5 + s1
        s1 += b5 + s0
        s0 += a6 + s1
        s1 += b6 + s0
        s0 += a7 + s1
        s1 += b7 + s0
        s0 &= _MASK
        s1 &= _MASK
    for k in range(cut, n, 2):
        s0 = (s0 + words[k] + s1) & _MASK
        s1 = (s1 + words[k + 1] + s0) & _MASK
    return s0, s1


def frame_checksum(order: str, data: bytes, at: int, frame: int,
                   seed: tuple[int, int]) -> tuple[int, int]:
    """The running checksum after the frame at offset ``at`` (its page number and commit
    field, then its page), from the checksum after the frame before it."""
    return checksum(order, data, at + FRAME_HEADER, at + frame,
                    checksum(order, data, at, at + 8, seed))


def walk_log(data: bytes, frame: int, salts: bytes) -> tuple[int, int]:
    """The log as SQLite's recovery reads it: (frames it keeps, up to and with the last commit
    of the unbroken chain; the first frame that breaks the chain, or the frame count)."""
    order = log_order(data)
    seed: tuple[int, int] = struct.unpack_from(">II", data, 24)
    count = (len(data) - WAL_HEADER) // frame
    keep = 0
    for i in range(count):
        at = WAL_HEADER + i * frame
        if data[at + 8 : at + 16] != salts or not any(data[at : at + 4]):
            return keep, i
        seed = frame_checksum(order, data, at, frame, seed)
        if seed != struct.unpack_from(">II", data, at + 16):
            return keep, i
        if any(data[at + 4 : at + 8]):
            keep = i + 1
    return keep, count


def hidden_commit(data: bytes, frame: int, order: str, salts: bytes, start: int) -> int | None:
    """The number of the first commit frame of the log with ``salts`` at offset ``start`` or
    later whose checksum chains from the frame just before it, or None.

    The running checksum cannot be followed across a damaged frame, but every frame's header
    keeps the sum after it, so a later frame is checked from its predecessor's (a resync).
    Frames are looked for at any offset (bytes cut out of the middle shift all later frames),
    by their salts. A commit frame written after the end SQLite sees means acknowledged commits
    it would drop: frames of a transaction rolled back have no commit frame, and a torn last
    transaction has no commit frame after the tear.
    """
    zero = b"\0\0\0\0"
    found = data.find(salts, start + 8)
    while found >= 0:
        at = found - 8
        if at + frame <= len(data) and data[at : at + 4] != zero and \
                data[at + 4 : at + 8] != zero:
            before = at - frame
            if at == WAL_HEADER:
                seed: tuple[int, int] | None = struct.unpack_from(">II", data, 24)
            elif before >= WAL_HEADER and data[before + 8 : before + 16] == salts:
                seed = struct.unpack_from(">II", data, before + 16)
            else:
                seed = None
            if seed is not None and frame_checksum(order, data, at, frame, seed) == \
                    struct.unpack_from(">II", data, at + 16):
                return (at - WAL_HEADER) // frame + 1
        found = data.find(salts, found + 1)
    return None


def _read_in_child(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of ``path``, read by another process.

    Not by this one: SQLite holds POSIX locks on ``store.db-shm`` (a reader's place in the
    log), and closing any descriptor of a file drops all of a process's POSIX locks on it.
    A writer could then start the log over under this process's open snapshot. (The ``-wal``
    file carries no locks, so it is read here.)
    """
    import subprocess  # (here: only a store whose log is read this way needs it)

    code = "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read(int(sys.argv[2])))"
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(path), str(size)],
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return b""
    return done.stdout if done.returncode == 0 else b""
