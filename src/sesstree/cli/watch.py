"""``sess watch``: record the agents' own transcript folders into the store as they grow.

The work is :class:`~sesstree.interop.follow.Follower`'s (what is read, where it lands, the
marks kept in the store); this module finds the folders, waits for the file system to say
something changed (the ``watchfiles`` library: inotify, FSEvents or ReadDirectoryChangesW, or
polling where none works), and says what happened.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from ..fmt import plural
from .core import StoreLocator, cli, events, fail, one_line, pass_store

if TYPE_CHECKING:
    from ..interop.follow import Follower, Look

__all__ = ["default_folders", "watch"]

#: How long a wait for the file system lasts at most (ms): how soon after it is armed the watch
#: starts catching up, and the longest a pending reply waits past its time to be settled.
#: (watchfiles itself wakes every 50 ms to look for signals: this adds nothing measurable.)
_WAKE_MS = 1_000


def default_folders() -> list[Path]:
    """Where the agents keep their sessions (each tool's own setting of its home honoured):
    Claude Code, Codex, pi and Gemini CLI, in that order."""
    home = Path.home()
    claude = Path(os.environ.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    codex = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    pi = Path(os.environ.get("PI_CODING_AGENT_DIR") or home / ".pi" / "agent")
    gemini = Path(os.environ.get("GEMINI_CLI_HOME") or home) / ".gemini"
    return [claude / "projects", codex / "sessions", pi / "sessions", gemini / "tmp"]


@cli.command()
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option("--once", is_flag=True, help="Catch up and exit (for cron, and for scripts).")
@click.option("--poll", is_flag=True,
              help="Look for changes every second instead of asking the system to notify "
                   "(network folders, containers).")
@pass_store
def watch(locator: StoreLocator, folders: tuple[Path, ...], once: bool, poll: bool) -> None:
    """Record the sessions of Claude Code, Codex, pi and Gemini CLI as they are written.

    FOLDERS default to those of the agents that exist: ~/.claude/projects, ~/.codex/sessions,
    ~/.pi/agent/sessions, ~/.gemini/tmp (one made while it runs is watched from then on).
    Each file lands where `sess import` of it would;
    only what was appended since the last look is read, and where each file was read up to
    is kept in the store, so a restarted watch goes on where it stopped. Ctrl-C stops it.
    """
    from ..interop.follow import Follower
    from .progress import progress_line

    named = bool(folders)
    paths = list(folders) if named else [p for p in default_folders() if p.is_dir()]
    for p in paths:
        if not p.exists():
            fail(one_line(f"{p}: no such file or folder"))
    if not paths:
        fail("nothing to watch: none of " + ", ".join(str(p) for p in default_folders())
             + " exists; name a folder")
    paths = [p.absolute() for p in paths]  # the marks and the notifications name files so
    store = locator.open()
    stop = _stop_on_sigterm()
    try:
        follower = Follower(store)
        # Armed first, then caught up: what is written while catching up is seen after it.
        # With no folder named, the agents' folders made later (an agent installed while it
        # runs) are taken in as they appear.
        later = None if named else (lambda: [p for p in default_folders() if p.is_dir()])
        changes = None if once else _changes(paths, poll, follower, later)
        first = next(changes) if changes is not None else set()
        with progress_line("catching up") as progress:
            looks = follower.catch_up(paths, progress)
        _say(looks)
        if changes is None:
            failed = sum(1 for look in looks if look.failed)
            if failed:
                fail(f"{failed} of {plural(len(looks), 'file')} could not be recorded")
            return
        click.echo(one_line(f"watching {', '.join(str(p) for p in paths)} "
                            f"({plural(len(looks), 'file')}); Ctrl-C stops"), err=True)
        _say(follower.look_all(first))
        for changed in changes:
            _say(follower.look_all(changed))
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        signal.signal(signal.SIGTERM, stop)


def _changes(paths: list[Path], poll: bool, follower: Follower,
             later: Callable[[], list[Path]] | None = None) -> Iterator[set[Path]]:
    """The files that may have changed, a set at a time. The first set comes once the watch
    is armed (changes from then on are kept for the next set), so that a catch-up made after
    it misses nothing.

    ``later`` names the folders to watch once they exist: asked at every wake (once a second
    when nothing happens), a folder that appeared is watched too (armed again) and walked.

    A folder made while watching (a new project, Codex's folder of the day) makes the watch
    be armed again to cover it, and is walked for files once it is: inotify watches a new
    folder only once told of it, so what is made in it at once (``mkdir -p``, then a file)
    would go unseen.
    """
    import watchfiles

    from ..interop.follow import is_candidate

    def keep(change: watchfiles.Change, path: str) -> bool:
        if change == watchfiles.Change.added and os.path.isdir(path):
            return True
        return change != watchfiles.Change.deleted and is_candidate(Path(path))

    paths = list(paths)
    walk: set[Path] = set()
    while True:
        armed = False
        for changes in watchfiles.watch(*paths, watch_filter=keep, rust_timeout=_WAKE_MS,
                                        yield_on_timeout=True,
                                        force_polling=True if poll else None,
                                        poll_delay_ms=1000, ignore_permission_denied=True):
            folders = {Path(p) for c, p in changes
                       if c == watchfiles.Change.added and os.path.isdir(p)}
            files = {Path(p) for _, p in changes if is_candidate(Path(p))}
            if not armed:
                files |= follower.candidates(walk)  # covered by this watch now
                walk, armed = set(), True
                yield files
            else:
                due = follower.next_due()
                if files or (due is not None and due <= time.time()):
                    yield files
            new = [p for p in later() if p not in paths] if later is not None else []
            for p in new:
                click.echo(one_line(f"watching {p} too"), err=True)
            paths.extend(new)
            folders.update(new)
            if folders:
                walk = folders
                break  # armed again, covering them
        else:
            return


def _say(looks: list[Look]) -> None:
    """One line per session that moved (stdout); one per problem (stderr)."""
    for look in looks:
        for problem in look.problems:
            click.echo(one_line(f"warning: {problem}"), err=True)
        for r in look.results:
            if r.outcome in ("up to date", "ahead", "empty"):
                continue
            click.echo(one_line(f"{r.session}: {r.outcome}, {events(r.events)} "
                                f"({r.new_nodes} new) from {r.source}"))


def _stop_on_sigterm() -> Any:
    """Make SIGTERM stop the watch as Ctrl-C does (a service manager's stop); the handler it
    replaces, to put back."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)
