"""``sess`` commands that name nodes and write events: tag, append, reflog."""

from __future__ import annotations

import fnmatch
import json
import sys
from typing import Any, NoReturn

import click
import msgspec

from ..errors import InputError, UnknownRevisionError
from ..events import VOCABULARY, is_registered, message_type
from ..fmt import printable, relative_time, short
from ..node import SESSIONS, TAGS, short_name, tag_name, tag_ref
from ..repo.store import Store
from .core import (
    CountCommand,
    StoreLocator,
    cli,
    complete_rev,
    emit_json,
    events,
    fail,
    page,
    pass_store,
    usage,
)
from .term import terminal

__all__ = ["append", "reflog", "tag"]


@cli.command()
@click.argument("name", required=False, shell_complete=complete_rev)
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-d", "--delete", is_flag=True, help="Delete tag NAME.")
@click.option("-l", "--list", "as_list", is_flag=True,
              help="List the tags matching the PATTERN given as NAME (a glob: 'v*').")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def tag(locator: StoreLocator, name: str | None, rev: str | None, delete: bool, as_list: bool,
        as_json: bool) -> None:
    """Name the node at REV (default HEAD), or list tags (-l PATTERN: those matching)."""
    store = locator.open()
    if delete:
        if name is None or rev is not None:
            usage("usage: sess tag -d NAME")
        old = store.delete_tag(name)
        click.echo(f"Deleted tag {name} (was {short(old)})")
        return
    if name is not None and not as_list:
        target = store.tag(name, rev or "HEAD")
        click.echo(f"Tagged {short(target)} as {name}")
        return
    patterns = [p for p in (name, rev) if p is not None]
    tags = [t for t in store.tags()
            if not patterns or any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]
    if as_json:
        emit_json([{"name": t.name, "target": t.target, "moved": t.moved} for t in tags])
        return
    term = terminal()
    for t in tags:
        click.echo(f"{term.paint(t.name, 'tag')}  {term.paint(short(t.target), 'id')}")


@cli.command()
@click.argument("args", nargs=-1, metavar="[SESSION] [TYPE] [JSON|-]",
                shell_complete=complete_rev)
@click.option("--jsonl", "as_jsonl", is_flag=True,
              help="Many events from stdin, one JSON per line: a chat message ({\"role\": ...}) "
                   "or {\"type\": TYPE, \"data\": ...}; with TYPE, each line is its data.")
@pass_store
def append(locator: StoreLocator, args: tuple[str, ...], as_jsonl: bool) -> None:
    """Append events: `append [SESSION] TYPE [JSON|-]` (JSON from stdin if absent or -).

    Stdin may hold one JSON value or many, one per line (JSONL): one event each, all appended
    in one transaction or, if any line is bad, none. `--jsonl` reads lines of any type.
    SESSION defaults to the HEAD session; it is created if it does not exist.
    """
    store = locator.open()
    target, type, payload = _append_args(args, as_jsonl)
    source = "stdin" if payload == "-" else "argument"
    text = _read_stdin() if payload == "-" else payload
    if as_jsonl:
        batch = _jsonl_events(text, type)
    elif payload == "-":
        batch = [(type or "", data) for data in _json_values(text)]
    else:
        batch = [(type or "", _parse_json(text, source))]
    if not batch:
        fail("nothing to append: stdin is empty")
    if target is None or target == "HEAD":
        name, node = store.head()
        if name is None:
            fail(f"HEAD is detached at {short(node)}; create a session with "
                 "'sess checkout -b NAME'")
        target = name
    target = short_name(target)
    session = store.session(target)
    with store.batch():
        # The user named a session, not a parent: another writer's append in between is fine.
        appended = [session.append(t, d, rebase=True) for t, d in batch]
    if len(appended) == 1:
        click.echo(f"{short(appended[0].id)} {target} ({events(len(session))})")
    else:
        click.echo(f"{short(appended[-1].id)} {target} ({events(len(session))}; "
                   f"{len(appended)} appended)")


def _append_args(args: tuple[str, ...], as_jsonl: bool) -> tuple[str | None, str | None, str]:
    """``(session, type, payload)`` from ``[SESSION] TYPE [JSON|-]`` (``[SESSION] [TYPE]``
    with --jsonl)."""
    if len(args) > 3 or (as_jsonl and len(args) > 2):
        usage("usage: sess append [SESSION] TYPE [JSON|-] | sess append [SESSION] [TYPE] --jsonl")
    if as_jsonl:
        if len(args) == 2:
            _check_type(args[1])
            return args[0], args[1], "-"
        if len(args) == 1:
            return (None, args[0], "-") if is_registered(args[0]) else (args[0], None, "-")
        return None, None, "-"
    if not args:
        raise click.UsageError("Missing argument 'TYPE' (or --jsonl for many events of any "
                               "type)")
    if len(args) == 3:
        _check_type(args[1])
        return args[0], args[1], args[2]
    if len(args) == 2:
        if is_registered(args[0]):
            return None, args[0], args[1]
        if is_registered(args[1]):
            return args[0], args[1], "-"
        # Neither is a known type: name the one in TYPE's place (TYPE JSON, or SESSION TYPE).
        value = args[1].lstrip()
        json_like = value == "-" or value.startswith(("{", "[", '"', "-")) or value[:1].isdigit() \
            or value in ("null", "true", "false")
        _unknown_type(args[0] if json_like else args[1])
    _check_type(args[0])
    return None, args[0], "-"


def _check_type(type: str) -> None:
    if not is_registered(type):
        _unknown_type(type)


def _unknown_type(type: str) -> NoReturn:
    known = ", ".join(sorted(VOCABULARY))
    fail(f"unknown event type {type!r}; known types: {known} (or one registered with "
         "sesstree.register_event_type)")


def _json_values(text: str) -> list[Any]:
    """Stdin as one JSON value, or as JSON Lines (one value per line): lines when the first
    line is a whole value by itself."""
    stripped = text.strip()
    if "\n" not in stripped:
        return [_parse_json(text, "stdin")]
    try:
        return [json.loads(stripped)]  # one value written over several lines
    except ValueError:
        pass
    except RecursionError:
        raise InputError("JSON in stdin is nested too deeply") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    try:
        json.loads(lines[0][1])
    except (ValueError, RecursionError):
        return [_parse_json(text, "stdin")]  # one value, broken: say where
    return [_parse_json(line, f"stdin line {n}") for n, line in lines]


def _jsonl_events(text: str, type: str | None) -> list[tuple[str, Any]]:
    """The events of --jsonl: each line a message, ``{"type", "data"}``, or TYPE's data."""
    out: list[tuple[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"stdin line {n}"
        value = _parse_json(line, where)
        if type is not None:
            out.append((type, value))
        elif isinstance(value, dict) and isinstance(value.get("type"), str) and "data" in value:
            if not is_registered(value["type"]):
                known = ", ".join(sorted(VOCABULARY))
                fail(f"{where}: unknown event type {value['type']!r}; known types: {known}")
            out.append((value["type"], value["data"]))
        elif isinstance(value, dict) and "role" in value:
            out.append((message_type(value), value))
        else:
            fail(f"{where}: expected a chat message (with \"role\") or "
                 "{\"type\": TYPE, \"data\": ...}")
    return out


def _reflog_name(store: Store, name: str | None) -> str:
    """The ref whose log `sess reflog NAME` shows: HEAD's session for none or ``HEAD``, a
    session by name, else a tag by its short name (as revisions resolve)."""
    if name is None or name in ("HEAD", "@"):
        head_name, node = store.head()
        if head_name is None:
            fail(f"HEAD is detached at {short(node)}: only sessions and tags have a reflog; "
                  "name one")
        return head_name
    if name.startswith((SESSIONS, TAGS)) or store.reflog_page(name, 1)[1]:
        return name
    if store.reflog_page(tag_ref(name), 1)[1]:
        return tag_ref(name)
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


@cli.command(cls=CountCommand)
@click.argument("name", required=False, shell_complete=complete_rev)
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=1),
              help="Show at most N entries (-N works too).")
@click.option("--expire", is_flag=True,
              help="Forget NAME's history (all of it for a deleted session) so gc can reclaim it.")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def reflog(locator: StoreLocator, name: str | None, limit: int | None, expire: bool,
           as_json: bool) -> None:
    """Every move of a session's ref (default and HEAD: the HEAD session's), newest first."""
    store = locator.open()
    if expire:
        if name is None:
            usage("usage: sess reflog --expire NAME (this gives up undo: name it explicitly)")
        gone = store.expire_reflog(name)
        click.echo(f"Expired {gone} reflog entr{'y' if gone == 1 else 'ies'} of {name}; "
                   "'sess gc' removes what nothing else reaches")
        return
    name = _reflog_name(store, name)
    if limit is None:
        entries = store.reflog(name)
        entries.reverse()
    else:  # -n N reads N entries, not the whole log
        entries = store.reflog_page(name, limit)[0]
    if not entries and not store.has_session(name):
        raise UnknownRevisionError(f"no session named {name!r} and no reflog for it")
    if as_json:
        emit_json([msgspec.to_builtins(e) for e in entries])
        return
    page()
    term = terminal()
    for i, e in enumerate(entries):
        ref = short_name(e.ref)
        ref = tag_name(ref) or ref
        click.echo(f"{term.paint(short(e.new), 'id')} {ref}@{{{i}}}: {printable(e.reason)} "
                   f"(from {short(e.old)}, {relative_time(e.time)})")
