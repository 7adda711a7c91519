"""The progress line's first draw never depends on where the monotonic clock starts."""

from __future__ import annotations

import io

import pytest

from sesstree.cli import progress as progress_module
from sesstree.cli.progress import TerminalProgress


@pytest.mark.parametrize("clock", [0.0, 2.5, 59.0, 3599.0, 1e7])
def test_the_first_call_is_drawn_whatever_the_clock_reads(
        clock: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # A machine booted ``clock`` seconds ago: Linux's monotonic clock counts from boot.
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock)
    out = io.StringIO()
    bar = TerminalProgress("checking nodes", out, interval=3600)
    bar(0, 2000)
    bar(1000, 2000)  # the clock has not moved: within the redraw interval, skipped
    bar(2000, 2000)  # the end is always drawn
    bar.finish()
    assert out.getvalue() == ("\rchecking nodes: 0% (0/2,000)\x1b[K"
                              "\rchecking nodes: 100% (2,000/2,000)\x1b[K\n")
