"""What ``sess watch`` holds of a file it follows, and how it reads one: in bounded blocks,
whole lines only, checked against what was recorded (see :mod:`sesstree.interop.follow`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import blake3

from ..errors import InputError
from ..store.base import WatchMark
from .jsonl import Record, decode_line, parse_records

__all__ = ["BUDGET", "HEAD", "TAIL", "FileState", "digest", "racy", "take_lines"]

#: How many bytes before the end of what was read, and at its start, are read again, to see
#: that a file that grew was only appended to.
TAIL = 4096
HEAD = 512
#: The most bytes read at a time: memory stays bounded on a huge file or a huge append.
BUDGET = 64 << 20
#: How close to a file's mtime a look must be for a write just after it to leave the stat as it
#: was: a few timer ticks where timestamps have nanoseconds (their clock is coarse), 2 s where
#: they have whole seconds only (FAT keeps even seconds).
RACY_NS = 100_000_000
RACY_COARSE_NS = 2_000_000_000


def racy(mark: WatchMark) -> bool:
    """Whether ``mark`` was seen so soon after the file's mtime that the file may have been
    written again since without its stat showing it (then its bytes are checked)."""
    window = RACY_COARSE_NS if mark.mtime_ns % 1_000_000_000 == 0 else RACY_NS
    return mark.seen_ns - mark.mtime_ns < window


class FileState:
    """What a follower holds of one file between looks."""

    def __init__(self, mark: WatchMark | None) -> None:
        self.mark = mark
        #: The records of the bytes read, while the file is followed (None: not read).
        self.records: list[Record] | None = None
        self.problems: list[str] = []
        self.said: set[str] = set()
        self.hasher = blake3.blake3()
        self.tail = b""
        self.head = b""
        self.offset = 0
        self.lines = 0
        #: When the file will have been quiet long enough to be settled and let go of.
        self.quiet_at: float | None = None
        self.unreadable: tuple[int, int] | None = None  # (size, mtime) of a failed read


def take_lines(f: BinaryIO, path: Path, state: FileState) -> int:
    """Read ``f`` from where it is to its end, ``BUDGET`` bytes at a time, and take in its
    whole lines (a last one without its end when it is one whole JSON object); how many
    bytes were taken. A line longer than the budget is passed over, said once, so that
    memory stays bounded whatever the file holds; one the file ends inside of waits."""
    offset = state.offset
    carry = b""
    long_line: tuple[Any, int, int, bytes, bytes] | None = None  # the state before it
    while block := f.read(BUDGET):
        if long_line is not None:
            nl = block.find(b"\n") + 1
            _take(state, block[:nl] if nl else block, None)
            if not nl:
                continue
            long_line, block = None, block[nl:]
        data = carry + block
        end = data.rfind(b"\n") + 1
        if end:
            _take(state, data[:end], path)
        carry = data[end:]
        if len(carry) > BUDGET:
            long_line = (state.hasher.copy(), state.offset, state.lines, state.tail,
                         state.head)
            state.problems.append(f"{path}:{state.lines + 1}: a line longer than "
                                  f"{BUDGET:,} bytes; skipped (not recorded)")
            _take(state, carry, None)
            carry = b""
    if long_line is not None:  # the file ends inside it: taken once its end is there
        state.hasher, state.offset, state.lines, state.tail, state.head = long_line
        state.problems.pop()
    elif carry.strip() and _whole_object(carry):
        _take(state, carry, path)
    return state.offset - offset


def digest(f: BinaryIO, size: int) -> str:
    """The blake3 (hex) of the first ``size`` bytes of ``f``, read a block at a time."""
    f.seek(0)
    hasher = blake3.blake3()
    while size > 0 and (block := f.read(min(size, BUDGET))):
        hasher.update(block)
        size -= len(block)
    return str(hasher.hexdigest())


def _take(state: FileState, data: bytes, path: Path | None) -> None:
    """Take ``data`` (whole lines, read next) into ``state``: its records (none when ``path``
    is None: a line passed over), its digest, its place."""
    if path is not None:
        assert state.records is not None
        state.records.extend(parse_records(data, path, state.problems,
                                           first_line=state.lines + 1))
    state.hasher.update(data)
    state.tail = (state.tail + data[-TAIL:])[-TAIL:]
    if len(state.head) < HEAD:
        state.head = (state.head + data[:HEAD])[:HEAD]
    state.offset += len(data)
    state.lines += data.count(b"\n")


def _whole_object(rest: bytes) -> bool:
    """Whether a last line without its newline already is one whole JSON object (a tool that
    ends its file without one): then it counts."""
    try:
        return isinstance(decode_line(rest), dict)
    except InputError:
        return False
