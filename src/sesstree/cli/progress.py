"""Progress of long commands on standard error, only when it is a terminal (as git does).

A command that may take more than a second (gc, fsck, an import of many files) passes a
:class:`TerminalProgress` down as the ``progress`` callback; it redraws one line at most ten
times a second, and :meth:`TerminalProgress.finish` ends the line. Piped or redirected output
gets nothing, so scripts and logs stay clean.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["TerminalProgress", "progress_line", "terminal_progress"]


class TerminalProgress:
    """A ``(done, total)`` callback that redraws ``WHAT: 45% (4,500/10,000)`` on ``stream``."""

    def __init__(self, what: str, stream: TextIO, interval: float = 0.1) -> None:
        self.what = what
        self.stream = stream
        self.interval = interval
        # None, not 0.0: the monotonic clock's origin is unspecified (seconds since boot on
        # Linux), so a zero start would skip the first draw on a machine booted within
        # ``interval`` seconds.
        self._last: float | None = None
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval and done != total:
            return
        self._last = now
        if total > 0:
            text = f"{self.what}: {100 * done // total}% ({done:,}/{total:,})"
        else:
            text = f"{self.what}: {done:,}"
        self.stream.write("\r" + text + "\x1b[K")
        self.stream.flush()
        self._shown = True

    def finish(self) -> None:
        """End the progress line (nothing if none was drawn)."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


def terminal_progress(what: str, stream: TextIO | None = None) -> TerminalProgress | None:
    """A progress line for ``what`` on standard error, or None when it is not a terminal."""
    out = sys.stderr if stream is None else stream
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or unusual stream
        return None
    return TerminalProgress(what, out)


@contextmanager
def progress_line(what: str, show: bool = True) -> Iterator[TerminalProgress | None]:
    """:func:`terminal_progress` for the block (None when it is not a terminal, or not
    ``show``), its line ended however the block ends."""
    progress = terminal_progress(what) if show else None
    try:
        yield progress
    finally:
        if progress is not None:
            progress.finish()
