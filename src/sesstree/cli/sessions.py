"""``sess`` commands that make, move and name sessions: init, status, branch, checkout,
reset."""

from __future__ import annotations

import contextlib
import fnmatch
from pathlib import Path
from typing import Any

import click

from ..errors import (
    InvalidRefNameError,
    SesstreeError,
    StoreError,
    UnknownRevisionError,
)
from ..fmt import cells, fit, fit_left, pad, printable, relative_time, short
from ..node import check_ref_name, session_ref, short_name
from ..repo.files import write_private
from ..repo.head import head_file_for
from ..repo.store import STORE_FILE, Store, open_store
from ..store.urls import is_store_url, redact_url
from .core import STORE_DIR, StoreLocator, cli, complete_rev, emit_json, events, fail, pass_store, usage
from .term import terminal
from .titles import Titles

__all__ = ["branch", "checkout", "init", "reset", "status"]


@cli.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.pass_context
def init(ctx: click.Context, path: str | None) -> None:
    """Create a store in PATH/.sess (default: this folder), or at --store / SESS_STORE.
    PATH may be a postgresql:// URL."""
    locator = ctx.find_object(StoreLocator)
    url = path if is_store_url(path) else locator.url() if locator and not path else None
    if url is not None:
        open_store(url).close()
        click.echo(f"Initialized sesstree store at {redact_url(url)}")
        return
    explicit = locator.explicit() if locator else None
    folder = (explicit if explicit is not None and path is None
              else (Path(path) if path else Path.cwd()) / STORE_DIR)
    existed, made = (folder / STORE_FILE).exists(), not folder.exists()
    try:
        open_store(folder).close()
    except StoreError:
        if made:  # (a full disk, say): the folder this made, and its lock file, go again
            for leftover in (STORE_FILE + ".lock", STORE_FILE + ".turn"):
                (folder / leftover).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if nothing else is in it
        raise
    state = "Reinitialized existing" if existed else "Initialized empty"
    click.echo(f"{state} sesstree store in {folder.resolve()}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def status(locator: StoreLocator, as_json: bool) -> None:
    """Show the current session (HEAD), its head id and length."""
    store = locator.open()
    name, node = store.head()
    length = store.depth(node) if node else 0
    if as_json:
        emit_json({"session": name, "detached": name is None, "head": node, "length": length})
        return
    if name is None:
        click.echo(f"HEAD detached at {short(node)} ({events(length)})")
    elif node is None:
        click.echo(f"On session {name}\nNo events yet")
    else:
        click.echo(f"On session {name}\nhead {short(node)} ({events(length)})")


# -- sessions --------------------------------------------------------------------------------


@cli.command()
@click.argument("names", nargs=-1, shell_complete=complete_rev)
@click.option("-d", "--delete", is_flag=True,
              help="Delete sessions NAME... (their reflogs are kept: undoable).")
@click.option("-D", "force_delete", is_flag=True, help="The same as -d (no session is ever "
              "unmerged: every deletion can be undone from the reflog).")
@click.option("-m", "--move", is_flag=True, help="Rename session OLD to NEW.")
@click.option("-l", "--list", "as_list", is_flag=True,
              help="List only the sessions matching PATTERN... (globs: 'quest-*').")
@click.option("-v", "--verbose", is_flag=True,
              help="With each session its title (an import's, or its first user message) and "
                   "where it came from.")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def branch(locator: StoreLocator, names: tuple[str, ...], delete: bool, force_delete: bool,
           move: bool, as_list: bool, verbose: bool, as_json: bool) -> None:
    """List sessions, or fork one: `branch [SOURCE] NEW` forks SOURCE (default HEAD) into NEW.

    `sess branch quest-1 quest-2` makes quest-2 a new session at quest-1's head, as
    `branch -m OLD NEW` renames OLD to NEW. SOURCE is any revision (`quest-1~3`, an id, a tag).
    """
    store = locator.open()
    if delete or force_delete:
        if not names:
            usage("usage: sess branch -d NAME...")
        for name in names:  # every name is checked before any session is deleted
            if not store.has_session(name):
                raise UnknownRevisionError(f"no session named {name!r}")
        for name in names:
            on_head = store.head()[0] == name
            old = store.delete_session(name)
            click.echo(f"Deleted session {name} (was {short(old)}; "
                       f"'sess branch {name}@{{1}} {name}' restores it)")
            if on_head:
                click.echo(f"HEAD is now detached at {short(old)}")
        return
    if move:
        if len(names) != 2:
            usage("usage: sess branch -m OLD NEW")
        store.rename_session(names[0], names[1])
        click.echo(f"Renamed session {names[0]} to {names[1]}")
        return
    if names and not as_list:
        if len(names) > 2:
            usage("usage: sess branch [SOURCE] NEW")
        source, new = (None, names[0]) if len(names) == 1 else names
        if source is not None:
            _refuse_swapped(store, source, new)
        session = store.fork(new, source)
        click.echo(f"Created session {session.name} at {short(session.head)}"
                   + (f" from {source}" if source is not None else ""))
        return
    _list_sessions(store, names, verbose, as_json)


def _list_sessions(store: Store, patterns: tuple[str, ...], verbose: bool, as_json: bool) -> None:
    current, _ = store.head()
    infos = [i for i in store.sessions()
             if not patterns or any(fnmatch.fnmatchcase(i.name, p) for p in patterns)]
    known = Titles(store)
    titles = {i.name: known.of(i.name) for i in infos} if verbose else {}
    if as_json:
        rows = []
        for i in infos:
            row: dict[str, Any] = {"name": i.name, "head": i.head, "length": i.length,
                                   "moved": i.moved, "current": i.name == current}
            if verbose:
                row.update(title=titles[i.name].title, source=titles[i.name].source)
            rows.append(row)
        emit_json(rows)
        return
    term = terminal()
    width = max((cells(i.name) for i in infos), default=0)
    whens = {i.name: relative_time(i.moved) for i in infos}
    digits, units, whenw = 6, 6, 14
    if verbose:  # columns as wide as their widest value: the rest is the title's and source's
        digits = max((len(str(i.length)) for i in infos), default=1)
        units = 5 if all(i.length == 1 for i in infos) else 6
        whenw = max((len(w) for w in whens.values()), default=0)
    for i in infos:
        mark = "*" if i.name == current else " "
        unit = "event" if i.length == 1 else "events"
        when = whens[i.name]
        name = pad(i.name, width)
        line = (f"{mark} {term.paint(name, 'head' if mark == '*' else 'ref')}  "
                f"{term.paint(short(i.head), 'id')}  {i.length:>{digits}} {unit:<{units}}  ")
        if not verbose:
            click.echo(line + when)
            continue
        used = 2 + width + 2 + 10 + 2 + digits + 1 + units + 2 + whenw + 2
        title, source = titles[i.name].title, titles[i.name].source
        text, shown_source = _title_and_source(title or "(no messages)", source,
                                               term.width - used)
        click.echo(f"{line}{when:<{whenw}}  {text}{term.paint(shown_source, 'dim')}")


#: Of the room a ``branch -v`` line has after its columns, the share the title keeps when
#: title and source do not both fit (the source gets the rest, and whatever the title leaves).
_TITLE_SHARE = 0.55
#: Below this, a source is not shown at all (its start would say nothing).
_SOURCE_MIN = 8


def _title_and_source(title: str, source: str | None, room: int) -> tuple[str, str]:
    """The title and ``  [source]`` of a ``branch -v`` line, fitted to ``room`` cells.

    Both whole if they fit. Else the title keeps its share of the room and the source gets
    the rest, cut where it says least: a run's ``MODEL at URL`` on the right (the model
    stays), a file's path on the left (its name stays). With too little left for a source,
    the title has it all.
    """
    room = max(1, room)
    title = printable(title)
    if not source:
        return fit(title, room), ""
    source = printable(source)
    kind, sep, where = source.partition(": ")
    body = where if sep else source
    frame = 4 + (cells(kind) + 2 if sep else 0)  # "  [" KIND ": " ... "]"
    need = cells(title)
    if need + frame + cells(body) > room:
        need = min(need, max(room - frame - cells(body), int(room * _TITLE_SHARE)))
    left = room - need - frame
    if left < min(_SOURCE_MIN, cells(body)):
        return fit(title, room), ""
    shown = fit(body, left) if kind == "run" else fit_left(body, left)
    return fit(title, need), (f"  [{kind}: {shown}]" if sep else f"  [{shown}]")


def _refuse_swapped(store: Store, source: str, new: str) -> None:
    """`sess branch quest-2 quest-1` in git's order (NEW START) names an unknown SOURCE and an
    existing NEW: refuse with the right order rather than a bare "unknown revision"."""
    try:
        store.resolve(source)
        return
    except UnknownRevisionError:
        pass
    try:
        check_ref_name(source)  # the hint would make it a session: only for a valid name
    except InvalidRefNameError:
        return
    try:
        store.resolve(new)
    except SesstreeError:
        return  # neither exists: the fork itself says that SOURCE is unknown
    fail(f"unknown revision {source!r}, and {new!r} exists: the order is SOURCE NEW; "
          f"to fork {new} into {source}, run 'sess branch {new} {source}'")


@cli.command()
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-b", "new", metavar="NEW", help="Create session NEW at REV (default HEAD) and switch.")
@pass_store
def checkout(locator: StoreLocator, rev: str | None, new: str | None) -> None:
    """Switch HEAD to a session, or (detached) to any other revision; `-` is the one before."""
    store = locator.open()
    before = _raw_head(store)
    if new is not None:
        store.fork(new, rev)
        store.set_head_session(new)
        _remember_previous(locator, before)
        click.echo(f"Switched to a new session {new}")
        return
    if rev is None:
        usage("usage: sess checkout REV | sess checkout - | sess checkout -b NEW [START]")
    if rev == "-":
        rev = _previous(locator)
    name, node = store.checkout(rev)
    if _raw_head(store) != before:
        _remember_previous(locator, before)
    if name is not None:
        click.echo(f"Switched to session {name}")
    else:
        click.echo(f"HEAD is now detached at {short(node)}")


def _raw_head(store: Store) -> str | None:
    """HEAD as `sess checkout` takes it back: a session's name, or the detached node's id."""
    name, node = store.head()
    return name if name is not None else node


def _previous_file(locator: StoreLocator) -> Path:
    """Where `sess checkout -` finds the previous HEAD: beside this checkout's HEAD (in the
    store folder, or beside the file that keeps a shared store's HEAD on this machine)."""
    url = locator.url()
    if url is not None:
        head = head_file_for(url)
        return head.with_name(head.name + ".previous")
    found = locator.find()
    return found / "PREVIOUS_HEAD" if found.is_dir() else found.with_name(
        found.name + ".PREVIOUS_HEAD")


def _remember_previous(locator: StoreLocator, value: str | None) -> None:
    if value is None:
        return
    path = _previous_file(locator)
    try:
        write_private(path, (value + "\n").encode())
    except OSError as exc:
        # The switch is done; only `checkout -` will not know where it came from.
        click.echo(f"warning: cannot remember the previous session in {path}: {exc.strerror}",
                   err=True)


def _previous(locator: StoreLocator) -> str:
    try:
        value = _previous_file(locator).read_text().strip()
    except FileNotFoundError:
        value = ""
    except OSError as exc:
        fail(f"cannot read the previous session: {exc.strerror}")
    if not value:
        fail("no previous session: 'sess checkout -' goes back to where the last checkout "
             "left from")
    return value


@cli.command()
@click.argument("args", nargs=-1, metavar="[SESSION] REV", shell_complete=complete_rev)
@click.option("--empty", is_flag=True,
              help="Empty SESSION (default: HEAD's): it keeps its name, HEAD and metadata, and "
                   "no events; SESSION@{1} is where it was.")
@click.option("--hard", "--soft", "--mixed", "git_mode", is_flag=True, hidden=True)
@pass_store
def reset(locator: StoreLocator, args: tuple[str, ...], empty: bool, git_mode: bool) -> None:
    """Move SESSION (default: the HEAD session) to REV: rewind, fast-forward or jump; logged,
    so `sess reflog` can undo it.

    `sess reset HEAD~2` drops the last two events of the current session; `sess reset quest-2
    quest-1` moves quest-2 to quest-1's head. There is no working tree, so --hard, --soft and
    --mixed (accepted) all mean the same: only the session moves, and nothing is ever lost.
    """
    store = locator.open()
    if empty:
        if len(args) > 1:
            usage("usage: sess reset --empty [SESSION]")
        name = args[0] if args else _head_session(store, "empty")
        name = short_name(name)
        old = store.session_head(name)
        if old is None:
            raise UnknownRevisionError(f"no session named {name!r} with events to empty")
        store.move_ref(session_ref(name), old, None, "reset: emptied")
        click.echo(f"{name}: {short(old)} -> (empty) ('sess reset {name} {name}@{{1}}' "
                   "restores it)")
        return
    if len(args) == 2:
        name, rev = args
    elif len(args) == 1:
        name, rev = _head_session(store, "reset"), args[0]
    else:
        usage("usage: sess reset [SESSION] REV | sess reset --empty [SESSION]")
    name = short_name(name)
    old = store.session_head(name)
    if old is None and (len(args) == 1 or store.reflog(name)):
        # An emptied session (or HEAD's, not started yet) takes events again.
        check_ref_name(name)
        target = store.resolve(rev)
        store.move_ref(session_ref(name), None, target, f"reset: moving to {rev}")
    else:
        target = store.reset(name, rev)
    click.echo(f"{name}: {short(old)} -> {short(target)} ({events(store.depth(target))})")


def _head_session(store: Store, verb: str) -> str:
    name, node = store.head()
    if name is None:
        fail(f"HEAD is detached at {short(node)}: name the session to {verb} "
             f"('sess reset SESSION REV')")
    return name
