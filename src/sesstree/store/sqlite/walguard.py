"""A damaged write-ahead log is found before SQLite can drop what it hides, kept, and reported
until the user accepts the loss.

When the first connection opens a store that no process has open (after a crash, or with the
files copied elsewhere), SQLite rebuilds its view of the WAL: it reads frame by frame while
each frame's salts match the log header's and its running checksum holds, and the log ends at
the last commit before the first frame that fails. What follows is ignored without a word, and
the first checkpoint (at the latest when that command closes the store) folds the shortened
log into the store file and deletes the WAL: acknowledged commits gone without a trace.

So before SQLite opens such a store, :func:`guard_wal` reads the WAL as that recovery would and
looks for commits it would drop:

- the index the last writer left (``store.db-shm``), when it is intact and of this log, says
  which frames were committed: every acknowledged commit is in it. Fewer frames kept than that
  is loss (a file cut short, a zeroed or flipped frame anywhere before the end); past what
  it covers (an index older than the log, from a folder copied while a writer ran), the
  next rule;
- without a usable index: a commit frame of the same log past the end whose checksum chains
  from the frame before it (wal.hidden_commit): damage followed by later commits.

A torn last transaction (a crash while writing it) is neither: it was never acknowledged. The
check runs only when the WAL has content and nobody holds a lock on ``store.db-shm``: while a
process has the store open its index is live, SQLite does not recover, and nothing is dropped.

On damage the WAL is copied aside (``store.db-wal.damaged-<hash>``), a marker
(``store.db.wal-damage``) keeps the one-line report, and :class:`WalDamagedError` is raised, by
this open and every later one, reads included, with nothing changed, until
:func:`accept_wal_loss` (``sess fsck --accept-wal-loss``) opens the store as SQLite recovers
it. The copy stays.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import struct
import threading
from pathlib import Path

from blake3 import blake3

from ...errors import StoreLockedError, WalDamagedError
from .create import FILE_MODE, locked
from .media import media_error, translating
from .wal import (
    FRAME_HEADER,
    WAL_HEADER,
    checksum,
    header_valid,
    hidden_commit,
    log_order,
    walk_log,
)

__all__ = ["OPENING", "accept_wal_loss", "beside_sqlite", "damage_marker", "guard_wal"]

#: Held from the check to the end of SQLite's connect, in every thread of the process. The
#: check opens and closes ``store.db-shm`` when it sees no lock on it, and closing any
#: descriptor of a file drops all of this process's POSIX locks on it: a connection another
#: thread made in between would lose the lock that tells other processes the store is open
#: (one of them would then rebuild the index under it).
OPENING = threading.Lock()

# What to do, said at the end of every report.
_ADVICE = ("The store was not changed. 'sess fsck' shows it; 'sess fsck --accept-wal-loss' opens the "
           "store without those commits (the copy stays; see docs/storage.md)")


def beside_sqlite(path: Path) -> Path:
    """The store file ``path`` with every symbolic link resolved: SQLite resolves them to name
    its ``-wal`` and ``-shm`` files, so a store opened through a link has its log beside the
    file the link leads to, and a check of the files beside the link would find none."""
    return Path(os.path.realpath(path))


def damage_marker(path: Path) -> Path:
    """The file that records a damaged WAL found beside store file ``path``."""
    return path.with_name(path.name + ".wal-damage")


def guard_wal(path: Path) -> None:
    """Raise :class:`WalDamagedError` if the store file ``path`` has a damaged WAL on record,
    or one SQLite would now cut short (then keep it and record it first). Cheap when there is
    nothing to look at: a store closed cleanly has no WAL, and one in use is not read."""
    given, path = path, beside_sqlite(path)
    recorded = _recorded(path)
    if recorded is not None:
        raise WalDamagedError(recorded.splitlines()[0])
    if _wal_size(path) <= WAL_HEADER or _in_use(path):
        return
    if find_damage(path) is None:
        return
    # Look again with sesstree's writers held off: a process that opened the store meanwhile
    # may be writing (its own open looked at the log first).
    try:
        with locked(given):  # (the lock file writers of this path take: lock.py)
            if _in_use(path):
                return
            report = find_damage(path)
            if report is None:
                return
            line = _keep(path, report)
    except OSError as exc:  # read-only media, a full disk: nothing can be kept
        report = find_damage(path)
        if report is None:
            return
        try:
            kept: Path | None = _copy_name(path, Path(str(path) + "-wal").read_bytes())
        except OSError:
            kept = None
        what = (f"The log is kept as {kept.name}, but no record of it could be written"
                if kept is not None and kept.is_file() else "No copy could be kept")
        raise WalDamagedError(
            f"store {path} has a damaged write-ahead log: {report}. {what} "
            f"({exc.strerror or exc}): copy the folder before the store is opened by anything "
            "else. " + _ADVICE) from None
    raise WalDamagedError(line)


def accept_wal_loss(path: Path, timeout: float = 10.0) -> str | None:
    """Open the store file ``path`` as SQLite recovers it, dropping the commits its damaged
    WAL hides, and fold the rest into the store file; return the report accepted, or None if
    there was nothing to accept. The copy of the damaged log stays beside the store."""
    path = beside_sqlite(path)
    with OPENING:
        return _accept(path, timeout)


def _accept(path: Path, timeout: float) -> str | None:
    marker = damage_marker(path)
    report = _recorded(path)
    try:
        if report is None and _wal_size(path) > WAL_HEADER and not _in_use(path):
            found = find_damage(path)
            report = _keep(path, found) if found is not None else None
        if report is None:
            return None
        with translating(path):
            db = sqlite3.connect(path, isolation_level=None, timeout=timeout)
            try:
                busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                db.close()
    except OSError as exc:  # a full disk, read-only media: the log must be kept before
        error = media_error(path, exc)
        raise type(error)(f"{error}: the damaged write-ahead log could not be copied aside, "
                          "so no loss was accepted and nothing was changed") from None
    if busy:
        raise StoreLockedError(f"store {path} is in use by another process: close it and retry")
    marker.unlink(missing_ok=True)
    return report


def find_damage(path: Path) -> str | None:
    """What SQLite's recovery of the WAL beside store file ``path`` would drop that was
    committed, as one phrase, or None (see the module docstring). Reads the files only."""
    try:
        data = Path(str(path) + "-wal").read_bytes()
        with open(path, "rb") as f:
            db_header = f.read(65536)  # its first page (the page size is in its header)
    except OSError:
        return None
    if len(db_header) < 100:
        return None
    page_size = struct.unpack(">H", db_header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    db_header = db_header[:page_size]
    valid = header_valid(data)
    if valid:
        page_size = struct.unpack(">I", data[8:12])[0]
    frame = FRAME_HEADER + page_size
    count = (len(data) - WAL_HEADER) // frame
    if not count:
        return None
    index = _stale_index(path)
    if valid:
        salts = data[16:24]
        keep = _sqlite_keeps(db_header, page_size, data)
        if keep is None:  # (SQLite could not be asked: the same walk, in Python)
            keep = walk_log(data, frame, salts)[0]
        if index is not None and index[2] == salts:
            if index[0] > keep:
                where = ("the file was cut short" if count < index[0] else
                         f"a frame after frame {keep} is damaged, or the file was cut short")
                return (f"SQLite would keep its frames up to {keep}, but its index says frames "
                        f"up to {index[0]} were committed ({where}): the commits in frames "
                        f"{keep + 1} to {index[0]} would be lost")
        # An index that covers no more than SQLite keeps may be older than the log (a folder
        # copied while a writer ran: the index is copied first): what it does not cover is
        # looked at as if there were none. (Past the end of a current index there are only
        # frames of a torn or rolled-back transaction: no commit frame.)
        later = hidden_commit(data, frame, log_order(data), salts, WAL_HEADER + keep * frame)
        if later is None:
            return None
        return (f"a frame after frame {keep} is damaged, and the commits after it up to frame "
                f"{later} would be lost")
    # SQLite ignores the whole log. Its frames carry the salts the header had.
    salts = data[40:48]
    if not any(salts):
        return None
    start = WAL_HEADER
    if index is not None and index[2] == salts:
        committed, copied = index[0], index[1]
        if committed > copied:
            return (f"the log's header is damaged, so SQLite ignores it, and the commits in "
                    f"frames {copied + 1} to {committed} would be lost")
        # Everything the index covers is in the store file already; past it (an index older
        # than the log), as if there were none.
        start = WAL_HEADER + committed * frame
    later = hidden_commit(data, frame, log_order(data), salts, start)
    if later is None:
        return None
    return (f"the log's header is damaged, so SQLite ignores it, and the commits it holds up "
            f"to frame {later} would be lost")


def _recorded(path: Path) -> str | None:
    """The report on record for the store file ``path``, if any."""
    try:
        text = damage_marker(path).read_text("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    return text or f"store {path} has a damaged write-ahead log (see {damage_marker(path)})"


def _sqlite_keeps(first_page: bytes, page_size: int, data: bytes) -> int | None:
    """How many frames of the log ``data`` SQLite's own recovery keeps, or None if it could not
    be asked. It is asked on a private copy (a store file of one page and the log), opened
    read-only, so that nothing can touch the store's files: SQLite checks the chain at C
    speed, where the same walk in Python (wal.walk_log) takes ~50 us a frame."""
    import tempfile  # (here: only the first open after a crash needs it)

    try:
        with tempfile.TemporaryDirectory(prefix="sesstree-wal-") as tmp:
            copy = Path(tmp) / "copy.db"
            copy.write_bytes(first_page + bytes(max(0, page_size - len(first_page))))
            Path(f"{copy}-wal").write_bytes(data)
            db = sqlite3.connect(f"{copy.as_uri()}?mode=ro", uri=True, isolation_level=None)
            try:
                db.execute("PRAGMA schema_version").fetchone()  # the first read recovers
            finally:
                db.close()
            index = Path(f"{copy}-shm").read_bytes()[:48]
    except (OSError, sqlite3.Error):
        return None
    if len(index) < 48:
        return None
    return int(struct.unpack("=I", index[16:20])[0])


def _wal_size(path: Path) -> int:
    try:
        return os.stat(str(path) + "-wal").st_size
    except OSError:
        return 0


def _in_use(path: Path) -> bool:
    """True if some process may have the store open: it holds a lock on ``store.db-shm``
    (each connection holds one as long as it is open), or that cannot be told.

    Opening ``store.db-shm`` and closing it again drops every POSIX lock this process holds
    on it, another connection's too. So first this process's own descriptors are looked at:
    one on that file means a connection here has the store open (SQLite keeps it open as long
    as one does), and without one this process holds no lock on the file and it can be opened
    to ask the kernel. (Not /proc/locks: it leaves out processes in other PID namespaces, a
    container sharing the folder, and reading it took 0.05 to 0.8 s with 20,000 locks held.)
    """
    shm = str(path) + "-shm"
    try:
        target = os.stat(shm)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    mine = _open_here(target)
    return True if mine is None or mine else _locked_elsewhere(shm)


def _open_here(target: os.stat_result) -> bool | None:
    """Whether a descriptor of this process is open on the file ``target``; None if the
    descriptors cannot be listed."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for name in fds:
            try:
                st = os.fstat(int(name))
            except (OSError, ValueError):
                continue  # (the listing's own descriptor, closed by now)
            if st.st_ino == target.st_ino and st.st_dev == target.st_dev:
                return True
        return False
    return None


def _locked_elsewhere(shm: str) -> bool:
    """True if the kernel reports a lock on ``shm`` (or cannot be asked); called only when this
    process has no descriptor of it, so that opening and closing the file here drops nothing."""
    try:
        fd = os.open(shm, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        # An open file description's lock query sees every process's locks on the file
        # (struct flock: type, whence, start, length 0 = to the end, pid 0, padding).
        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        answer = fcntl.fcntl(fd, getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK), query)
    except OSError:
        return True
    finally:
        os.close(fd)
    return int(struct.unpack("hhqqi4x", answer)[0]) != fcntl.F_UNLCK


def _stale_index(path: Path) -> tuple[int, int, bytes] | None:
    """(frames committed, frames copied into the store file, salts) from the WAL index the
    last connection left, if it is intact (both copies of its header alike and its checksum
    right); read only while no process has the store open (see _in_use)."""
    try:
        with open(str(path) + "-shm", "rb") as f:
            raw = f.read(100)
    except OSError:
        return None
    if len(raw) < 100 or raw[:48] != raw[48:96] or raw[12] != 1:
        return None
    if struct.unpack("=I", raw[:4])[0] != 3007000:
        return None
    if checksum("=", raw, 0, 40, (0, 0)) != struct.unpack("=II", raw[40:48]):
        return None
    return struct.unpack("=I", raw[16:20])[0], struct.unpack("=I", raw[96:100])[0], raw[32:40]


def _keep(path: Path, report: str) -> str:
    """Copy the WAL aside and record the report; return the line every open now raises."""
    data = Path(str(path) + "-wal").read_bytes()
    kept = _copy_name(path, data)
    line = (f"store {path} has a damaged write-ahead log: {report}. The log is kept as "
            f"{kept.name}. {_ADVICE}")
    if not (kept.is_file() and kept.stat().st_size == len(data)):
        # (named by its hash and only ever renamed into place whole: one that is there is
        # this log, kept by an earlier open whose record did not fit on the disk)
        _write_atomically(kept, data)
    _write_atomically(damage_marker(path), (line + "\n").encode())
    return line


def _copy_name(path: Path, data: bytes) -> Path:
    """Where the WAL ``data`` of store file ``path`` is kept: named by its hash."""
    return path.with_name(f"{path.name}-wal.damaged-{blake3(data).hexdigest()[:12]}")


def _write_atomically(target: Path, data: bytes) -> None:
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)  # (a full disk: no half-written copy is left behind)
        raise
    folder = os.open(target.parent, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
