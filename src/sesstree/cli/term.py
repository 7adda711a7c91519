"""What a person at a terminal gets and a script does not: a pager, colour, and lines fitted to
the terminal's width.

Every decision is taken once, when the command starts, from what stdout is then:

- colour: ``--color=always`` or ``never``; ``auto`` (the default) colours a terminal only, and
  never when ``NO_COLOR`` is set (https://no-color.org) or ``TERM=dumb``;
- pager: only when stdout is a terminal and ``--no-pager`` was not given; the command is
  ``SESS_PAGER``, else ``PAGER``, else ``less``; ``cat`` or an empty value means none. ``less``
  runs with ``LESS=FRX`` unless ``LESS`` is set, as git runs it: it quits at once when the
  output fits on one screen, passes the colours through and leaves the text on the screen.
  The pager starts at the first line written, so an error before any output is printed
  plainly;
- width: the terminal's columns; else ``COLUMNS``; else 100 for a file or a pipe. Lines are
  fitted to it in screen cells, not characters (:func:`sesstree.fmt.cells`: a CJK character
  takes two, a combining mark none).
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import sys
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

import click

if TYPE_CHECKING:
    import subprocess

__all__ = ["DEFAULT_WIDTH", "Terminal", "install", "paint", "terminal"]

#: The width lines are fitted to when stdout is no terminal and ``COLUMNS`` is not set.
DEFAULT_WIDTH = 100
_META_KEY = "sesstree.terminal"


class Terminal:
    """The output settings of one command: colour, width, and the pager once started."""

    #: Colours of the things a line shows (``click.style`` arguments).
    STYLES: ClassVar[dict[str, dict[str, Any]]] = {
        "id": {"fg": "yellow"},
        "ref": {"fg": "green", "bold": True},
        "head": {"fg": "cyan", "bold": True},
        "tag": {"fg": "yellow", "bold": True},
        "user": {"fg": "green", "bold": True},
        "assistant": {"fg": "blue", "bold": True},
        "tool": {"fg": "magenta"},
        "system": {"fg": "cyan"},
        "turn": {"dim": True},
        "dim": {"dim": True},
        "error": {"fg": "red"},
        "added": {"fg": "green"},
        "removed": {"fg": "red"},
    }

    def __init__(self, color: str = "auto", pager: bool = True) -> None:
        out = sys.stdout
        self.tty = _isatty(out)
        if color == "always":
            self.color = True
        elif color == "never":
            self.color = False
        else:
            self.color = (self.tty and not os.environ.get("NO_COLOR")
                          and os.environ.get("TERM") != "dumb")
        self.width = _width(out, self.tty)
        self.use_pager = pager and self.tty
        self._pager: subprocess.Popen[bytes] | None = None
        self._saved: TextIO | None = None

    def paint(self, text: str, what: str) -> str:
        """``text`` in the colour of ``what`` (plain when colour is off)."""
        if not self.color or not text:
            return text
        return click.style(text, **self.STYLES.get(what, {}))

    def page(self) -> None:
        """Send what the command prints from now on through the pager, if one is wanted; it
        starts at the first write."""
        if not self.use_pager or self._saved is not None:
            return
        command = _pager_command()
        if command is None:
            return
        self._saved = sys.stdout
        sys.stdout = _LazyPager(self, command)

    def _start(self, command: list[str]) -> TextIO:
        import subprocess  # only when a pager runs: most commands never need it

        env = dict(os.environ)
        env.setdefault("LESS", "FRX")
        env.setdefault("LV", "-c")
        assert self._saved is not None
        self._saved.flush()
        self._pager = subprocess.Popen(command, stdin=subprocess.PIPE, env=env)
        assert self._pager.stdin is not None
        return io.TextIOWrapper(self._pager.stdin, encoding="utf-8", errors="strict",
                                line_buffering=False, write_through=False)

    def close(self) -> None:
        """Wait for the pager (the person reads, then quits it) and restore stdout."""
        if self._saved is None:
            return
        lazy = sys.stdout
        sys.stdout = self._saved
        self._saved = None
        if isinstance(lazy, _LazyPager) and lazy.stream is not None:
            try:
                lazy.stream.close()
            except OSError:  # the person quit the pager before the end: nothing is lost
                pass
        if self._pager is not None:
            try:
                self._pager.wait()
            except KeyboardInterrupt:  # ^C reaches the pager too; wait for it to go
                self._pager.wait()
            self._pager = None


class _LazyPager(io.TextIOBase):
    """stdout while a pager may be wanted: the pager starts at the first write."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, terminal: Terminal, command: list[str]) -> None:
        super().__init__()
        self._terminal = terminal
        self._command = command
        self.stream: TextIO | None = None

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes with b"" whether a stream takes bytes
            raise TypeError("write() argument must be str")
        if self.stream is None:
            if not text:
                return 0
            self.stream = self._terminal._start(self._command)
        return self.stream.write(text)

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _width(stream: Any, tty: bool) -> int:
    if tty:
        try:
            return max(20, os.get_terminal_size(stream.fileno()).columns)
        except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
            pass
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(20, int(columns))
    return DEFAULT_WIDTH


def _pager_command() -> list[str] | None:
    """The pager to run as an argument list, or None for none (or one that is not there)."""
    raw = os.environ.get("SESS_PAGER")
    if raw is None:
        raw = os.environ.get("PAGER", "less")
    try:
        words = shlex.split(raw)
    except ValueError:
        return None
    if not words or words == ["cat"]:
        return None
    if shutil.which(words[0]) is None:
        return None  # no pager installed: print straight to the terminal
    return words


def terminal(ctx: click.Context | None = None) -> Terminal:
    """The Terminal of the running command (a plain one outside a command)."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is None:
        return Terminal("never", pager=False)
    root = ctx.find_root()
    found = root.meta.get(_META_KEY)
    if found is None:
        found = root.meta[_META_KEY] = Terminal("auto", pager=False)
    assert isinstance(found, Terminal)
    return found


def install(ctx: click.Context, color: str, pager: bool) -> Terminal:
    """Set the Terminal of this command (called by the ``sess`` group)."""
    term = Terminal(color, pager)
    ctx.find_root().meta[_META_KEY] = term
    ctx.color = term.color
    return term


def paint(text: str, what: str) -> str:
    """``text`` in the colour of ``what`` for the running command."""
    return terminal().paint(text, what)
