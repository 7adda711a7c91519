"""``sess`` commands that make, move and name sessions: init, status, branch, checkout,
reset, tag, append, reflog."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from ..errors import (
    InputError,
    InvalidRefNameError,
    SesstreeError,
    UnknownRevisionError,
)
from ..events import is_registered
from ..fmt import relative_time, short
from ..node import check_ref_name
from ..repo import SESSIONS, STORE_FILE, TAGS, Store, open_store
from ..store.urls import is_store_url, redact_url
from .core import STORE_DIR, StoreLocator, cli, emit_json, events, fail, pass_store


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
    existed = (folder / STORE_FILE).exists()
    open_store(folder).close()
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
@click.argument("names", nargs=-1)
@click.option("-d", "--delete", is_flag=True, help="Delete session NAME (its reflog is kept).")
@click.option("-m", "--move", is_flag=True, help="Rename session OLD to NEW.")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def branch(locator: StoreLocator, names: tuple[str, ...], delete: bool, move: bool,
           as_json: bool) -> None:
    """List sessions, or fork one: `branch [SOURCE] NEW` forks SOURCE (default HEAD) into NEW.

    `sess branch quest-1 quest-2` makes quest-2 a new session at quest-1's head, as
    `branch -m OLD NEW` renames OLD to NEW. SOURCE is any revision (`quest-1~3`, an id, a tag).
    """
    store = locator.open()
    if delete:
        if len(names) != 1:
            fail("usage: sess branch -d NAME")
        on_head = store.head()[0] == names[0]
        old = store.delete_session(names[0])
        click.echo(f"Deleted session {names[0]} (was {short(old)}; "
                   f"'sess branch {names[0]}@{{1}} {names[0]}' restores it)")
        if on_head:
            click.echo(f"HEAD is now detached at {short(old)}")
        return
    if move:
        if len(names) != 2:
            fail("usage: sess branch -m OLD NEW")
        store.rename_session(names[0], names[1])
        click.echo(f"Renamed session {names[0]} to {names[1]}")
        return
    if names:
        if len(names) > 2:
            fail("usage: sess branch [SOURCE] NEW")
        source, new = (None, names[0]) if len(names) == 1 else names
        if source is not None:
            _refuse_swapped(store, source, new)
        session = store.fork(new, source)
        click.echo(f"Created session {session.name} at {short(session.head)}"
                   + (f" from {source}" if source is not None else ""))
        return
    current, _ = store.head()
    infos = store.sessions()
    if as_json:
        emit_json([{"name": i.name, "head": i.head, "length": i.length, "moved": i.moved,
                     "current": i.name == current} for i in infos])
        return
    width = max((len(i.name) for i in infos), default=0)
    for i in infos:
        mark = "*" if i.name == current else " "
        unit = "event" if i.length == 1 else "events"
        click.echo(f"{mark} {i.name:<{width}}  {short(i.head)}  {i.length:>6} {unit:<6}  "
                   f"{relative_time(i.moved)}")


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
@click.argument("rev", required=False)
@click.option("-b", "new", metavar="NEW", help="Create session NEW at REV (default HEAD) and switch.")
@pass_store
def checkout(locator: StoreLocator, rev: str | None, new: str | None) -> None:
    """Switch HEAD to a session, or (detached) to any other revision."""
    store = locator.open()
    if new is not None:
        store.fork(new, rev)
        store.set_head_session(new)
        click.echo(f"Switched to a new session {new}")
        return
    if rev is None:
        fail("usage: sess checkout REV | sess checkout -b NEW [START]")
    name, node = store.checkout(rev)
    if name is not None:
        click.echo(f"Switched to session {name}")
    else:
        click.echo(f"HEAD is now detached at {short(node)}")


@cli.command()
@click.argument("session")
@click.argument("rev")
@pass_store
def reset(locator: StoreLocator, session: str, rev: str) -> None:
    """Move SESSION to REV (rewind or fast-forward); logged, so `sess reflog` can undo it."""
    store = locator.open()
    old = store.session_head(session)
    target = store.reset(session, rev)
    click.echo(f"{session}: {short(old)} -> {short(target)} ({events(store.depth(target))})")


@cli.command()
@click.argument("name", required=False)
@click.argument("rev", required=False)
@click.option("-d", "--delete", is_flag=True, help="Delete tag NAME.")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def tag(locator: StoreLocator, name: str | None, rev: str | None, delete: bool,
        as_json: bool) -> None:
    """Name the node at REV (default HEAD), or list tags."""
    store = locator.open()
    if delete:
        if name is None or rev is not None:
            fail("usage: sess tag -d NAME")
        old = store.delete_tag(name)
        click.echo(f"Deleted tag {name} (was {short(old)})")
        return
    if name is not None:
        target = store.tag(name, rev or "HEAD")
        click.echo(f"Tagged {short(target)} as {name}")
        return
    tags = store.tags()
    if as_json:
        emit_json([{"name": t.name, "target": t.target, "moved": t.moved} for t in tags])
        return
    for t in tags:
        click.echo(f"{t.name}  {short(t.target)}")


# -- reading ---------------------------------------------------------------------------------



@cli.command()
@click.argument("args", nargs=-1, required=True)
@pass_store
def append(locator: StoreLocator, args: tuple[str, ...]) -> None:
    """Append one event: `append [SESSION] TYPE [JSON|-]` (JSON from stdin if absent or -).

    SESSION defaults to the HEAD session; it is created if it does not exist.
    """
    store = locator.open()
    if len(args) > 3:
        fail("usage: sess append [SESSION] TYPE [JSON|-]")
    if len(args) == 2 and not is_registered(args[0]) and not is_registered(args[1]):
        fail(f"unknown event type {args[0]!r}")
    if len(args) == 3 or (len(args) == 2 and not is_registered(args[0])):
        target, type, payload = args[0], args[1], (args[2] if len(args) == 3 else "-")
    else:
        target, type, payload = None, args[0], (args[1] if len(args) == 2 else "-")
    if not is_registered(type):
        fail(f"unknown event type {type!r}")
    source = "stdin" if payload == "-" else "argument"
    data = _parse_json(_read_stdin() if payload == "-" else payload, source)
    if target is None or target == "HEAD":
        name, node = store.head()
        if name is None:
            fail(f"HEAD is detached at {short(node)}; create a session with "
                  "'sess checkout -b NAME'")
        target = name
    if target.startswith(SESSIONS):
        target = target[len(SESSIONS):]
    session = store.session(target)
    # The user named a session, not a parent: another writer's append in between is fine.
    appended = session.append(type, data, rebase=True)
    click.echo(f"{short(appended.id)} {target} ({events(len(session))})")


def _reflog_name(store: Store, name: str | None) -> str:
    """The ref whose log `sess reflog NAME` shows: HEAD's session for none or ``HEAD``, a
    session by name, else a tag by its short name (as revisions resolve)."""
    if name is None or name in ("HEAD", "@"):
        head_name, node = store.head()
        if head_name is None:
            fail(f"HEAD is detached at {short(node)}: only sessions and tags have a reflog; "
                  "name one")
        return head_name
    if name.startswith((SESSIONS, TAGS)) or store.reflog(name):
        return name
    if store.reflog(TAGS + name):
        return TAGS + name
    return name


def _read_stdin() -> str:
    raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise InputError(f"stdin is not valid UTF-8 (byte {exc.start})") from None


def _parse_json(text: str, source: str) -> Any:
    """A JSON value typed by the user; every way it can be bad is one InputError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON in {source}: {exc.msg} at line {exc.lineno} "
                         f"column {exc.colno}") from None
    except RecursionError:
        raise InputError(f"JSON in {source} is nested too deeply") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise InputError(f"JSON in {source} cannot be read: {exc}".split(";")[0]) from None


@cli.command()
@click.argument("name", required=False)
@click.option("--expire", is_flag=True,
              help="Forget NAME's history (all of it for a deleted session) so gc can reclaim it.")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def reflog(locator: StoreLocator, name: str | None, expire: bool, as_json: bool) -> None:
    """Every move of a session's ref (default: the HEAD session), newest first."""
    store = locator.open()
    if expire:
        if name is None:
            fail("usage: sess reflog --expire NAME (this gives up undo: name it explicitly)")
        gone = store.expire_reflog(name)
        click.echo(f"Expired {gone} reflog entr{'y' if gone == 1 else 'ies'} of {name}; "
                   "'sess gc' removes what nothing else reaches")
        return
    name = _reflog_name(store, name)
    entries = store.reflog(name)
    if not entries and not store.has_session(name):
        raise UnknownRevisionError(f"no session named {name!r} and no reflog for it")
    entries.reverse()
    if as_json:
        emit_json([msgspec.to_builtins(e) for e in entries])
        return
    for i, e in enumerate(entries):
        ref = e.ref[len(SESSIONS):] if e.ref.startswith(SESSIONS) else e.ref
        ref = ref[len(TAGS):] if ref.startswith(TAGS) else ref
        click.echo(f"{short(e.new)} {ref}@{{{i}}}: {e.reason} (from {short(e.old)}, "
                   f"{relative_time(e.time)})")


