"""The ``sess`` command line: git-shaped, thin over the Python API.

Output is for people by default; ``--json`` gives stable machine output. A user error prints
one line (``error: ...``) and exits 1; it never shows a traceback.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import click
import msgspec

from .errors import (
    InputError,
    InvalidRefNameError,
    SesstreeError,
    StoreNotFoundError,
    UnknownRevisionError,
)
from .events import is_registered
from .fmt import relative_time, short, summary, to_jsonable
from .graph import GraphNode, draw_graph
from .maintenance import ancestors
from .node import Node, NodeId, check_ref_name
from .repo import SESSIONS, STORE_FILE, TAGS, Store, open_store
from .store.urls import is_store_url, redact_url

__all__ = ["StoreLocator", "cli", "main"]

STORE_DIR = ".sess"
_json = msgspec.json.Encoder()


class StoreLocator:
    """Finds the store as git finds ``.git``: ``--store``, then ``SESS_STORE``, then ``.sess/``
    in this folder or a parent."""

    def __init__(self, option: str | None) -> None:
        self.option = option
        self._store: Store | None = None

    def find(self) -> Path:
        """The store folder. Raises StoreNotFoundError."""
        explicit = self.explicit()
        if explicit is not None:
            # The store folder itself (what open_store made), or a folder holding .sess/.
            for folder in (explicit, explicit / STORE_DIR):
                if (folder / STORE_FILE).exists():
                    return folder
            if explicit.is_file():
                _check_is_database(explicit)
                return explicit
            raise StoreNotFoundError(
                f"no store at {explicit} (create one with 'sess --store {explicit} init')"
            )
        here = Path.cwd().resolve()
        for folder in (here, *here.parents):
            if (folder / STORE_DIR / STORE_FILE).exists():
                return folder / STORE_DIR
        raise StoreNotFoundError(
            "no store found in this folder or any parent (run 'sess init', or pass --store "
            "or set SESS_STORE)"
        )

    def explicit(self) -> Path | None:
        """The store path given by ``--store`` or ``SESS_STORE``, if any."""
        given = self.option or os.environ.get("SESS_STORE")
        return Path(given) if given else None

    def url(self) -> str | None:
        """The store URL (``postgresql://...``) given by ``--store`` or ``SESS_STORE``, if any:
        a URL is not a path."""
        given = self.option or os.environ.get("SESS_STORE")
        return given if is_store_url(given) else None

    def open(self) -> Store:
        """Open the store once per command."""
        if self._store is None:
            self._store = open_store(self.url() or self.find(), create=False)
        return self._store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_is_database(path: Path) -> None:
    """A file given as the store must at least be an SQLite database: a text file (a
    transcript passed by mistake) is not a damaged store, it is no store at all."""
    with path.open("rb") as f:
        magic = f.read(len(_SQLITE_MAGIC))
    if magic != _SQLITE_MAGIC:
        what = "an empty file" if not magic else "a file that is not an SQLite database"
        raise StoreNotFoundError(f"{path} is not a sesstree store ({what})")


class _OneLineUsage(click.ClickException):
    exit_code = 2


class _Group(click.Group):
    """Turns sesstree's own errors into one line and exit code 1, and loads the commands in
    ``lazy`` only when they are used (``run`` needs the HTTP client; the others should not
    wait for it to load)."""

    lazy: ClassVar[dict[str, str]] = {"run": "sesstree.agent.command:run"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attr = self.lazy[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            # Flushed here, inside the handlers, so a full disk or closed pipe is reported as
            # one line, not by the interpreter at exit.
            sys.stdout.flush()
            return result
        except click.UsageError as exc:
            # One line, as for every other user error (click's own form takes three).
            command = f"sess {exc.ctx.command.name} --help" if exc.ctx else "sess --help"
            raise _OneLineUsage(_one_line(f"{exc.format_message()} (see '{command}')")) from None
        except click.ClickException as exc:
            if exc.message.isprintable():
                raise
            raise click.ClickException(_one_line(exc.message)) from None
        except SesstreeError as exc:
            raise click.ClickException(_one_line(str(exc))) from None
        except BrokenPipeError:  # `sess log | head`
            _silence_stdout()
            sys.stderr.close()
            ctx.exit(0)
        except OSError as exc:
            # A file the user named, or the output itself (a full disk, `> /dev/full`), cannot
            # be read or written: say which and why, in one line.
            if exc.filename is not None:
                raise click.ClickException(f"{exc.filename}: {exc.strerror}") from None
            writing = _raised_by_echo(exc) or _stdout_failed()
            if writing:
                _silence_stdout()
            what = "cannot write the output" if writing else "input/output error"
            raise click.ClickException(f"{what}: {exc.strerror or exc}") from None
        except UnicodeEncodeError as exc:
            # Only input that was not UTF-8 (an argument, stdin) gets here: the stores hold text.
            raise click.ClickException(f"{exc.object[:80]!a} is not valid UTF-8 text") from None
        except (RecursionError, MemoryError) as exc:
            raise click.ClickException(f"input too large or too deeply nested ({type(exc).__name__})"
                                       ) from None
        finally:
            if isinstance(ctx.obj, StoreLocator):
                ctx.obj.close()


def _one_line(text: str) -> str:
    """An error message as one printable line: a name or revision it quotes may hold line
    breaks (U+2028 too) or control characters, which are shown escaped."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _raised_by_echo(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is click.echo.__code__:
            return True
        tb = tb.tb_next
    return False


def _stdout_failed() -> bool:
    """True if what is buffered for stdout cannot be written."""
    try:
        sys.stdout.flush()
        return False
    except OSError:
        return True


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit adds no second
    report of an output that cannot be written."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file (a test's capture): nothing will be flushed at exit


@click.group(cls=_Group)
@click.option("--store", "store_path", metavar="PATH", help="Store folder (default: SESS_STORE, "
              "then .sess/ here or in a parent).")
@click.version_option(package_name="sesstree")
@click.pass_context
def cli(ctx: click.Context, store_path: str | None) -> None:
    """Store agent sessions the way git stores commits."""
    ctx.obj = StoreLocator(store_path)


pass_store = click.make_pass_decorator(StoreLocator)


def _count(n: int, word: str) -> str:
    """``1 event``, ``2 events``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _events(n: int) -> str:
    return _count(n, "event")


def _emit_json(value: Any) -> None:
    click.echo(_json.encode(value).decode())


def _fail(message: str) -> NoReturn:
    raise click.ClickException(message)


# -- setup and status ------------------------------------------------------------------------


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
        _emit_json({"session": name, "detached": name is None, "head": node, "length": length})
        return
    if name is None:
        click.echo(f"HEAD detached at {short(node)} ({_events(length)})")
    elif node is None:
        click.echo(f"On session {name}\nNo events yet")
    else:
        click.echo(f"On session {name}\nhead {short(node)} ({_events(length)})")


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
            _fail("usage: sess branch -d NAME")
        on_head = store.head()[0] == names[0]
        old = store.delete_session(names[0])
        click.echo(f"Deleted session {names[0]} (was {short(old)}; "
                   f"'sess branch {names[0]}@{{1}} {names[0]}' restores it)")
        if on_head:
            click.echo(f"HEAD is now detached at {short(old)}")
        return
    if move:
        if len(names) != 2:
            _fail("usage: sess branch -m OLD NEW")
        store.rename_session(names[0], names[1])
        click.echo(f"Renamed session {names[0]} to {names[1]}")
        return
    if names:
        if len(names) > 2:
            _fail("usage: sess branch [SOURCE] NEW")
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
        _emit_json([{"name": i.name, "head": i.head, "length": i.length, "moved": i.moved,
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
    _fail(f"unknown revision {source!r}, and {new!r} exists: the order is SOURCE NEW; "
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
        _fail("usage: sess checkout REV | sess checkout -b NEW [START]")
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
    click.echo(f"{session}: {short(old)} -> {short(target)} ({_events(store.depth(target))})")


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
            _fail("usage: sess tag -d NAME")
        old = store.delete_tag(name)
        click.echo(f"Deleted tag {name} (was {short(old)})")
        return
    if name is not None:
        target = store.tag(name, rev or "HEAD")
        click.echo(f"Tagged {short(target)} as {name}")
        return
    tags = store.tags()
    if as_json:
        _emit_json([{"name": t.name, "target": t.target, "moved": t.moved} for t in tags])
        return
    for t in tags:
        click.echo(f"{t.name}  {short(t.target)}")


# -- reading ---------------------------------------------------------------------------------


def _ref_labels(store: Store) -> dict[NodeId, list[str]]:
    labels: dict[NodeId, list[str]] = {}
    head_name, head = store.head()
    for ref in store.backend.list_refs(""):
        name = ref.name
        if name.startswith(SESSIONS):
            name = name[len(SESSIONS):]
            if name == head_name:
                name = "HEAD -> " + name
        elif name.startswith(TAGS):
            name = "tag: " + name[len(TAGS):]
        labels.setdefault(ref.target, []).append(name)
    if head_name is None and head is not None:
        labels.setdefault(head, []).insert(0, "HEAD")
    return labels


def _label(node: Node, labels: dict[NodeId, list[str]]) -> str:
    refs = labels.get(node.id)
    names = f"({', '.join(refs)}) " if refs else ""
    return f"{short(node.id)} {names}{summary(node, 64, with_type=True)}"


@cli.command()
@click.argument("rev", required=False, default="HEAD")
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N events.")
@click.option("--oneline", is_flag=True, help="One short line per event.")
@click.option("--reverse", is_flag=True, help="Oldest first.")
@click.option("--graph", is_flag=True, help="Draw the tree of sessions and where they fork.")
@click.option("--all", "all_refs", is_flag=True, help="With --graph: every session and tag "
              "(refused without --graph).")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def log(locator: StoreLocator, rev: str, limit: int | None, oneline: bool, reverse: bool,
        graph: bool, all_refs: bool, as_json: bool) -> None:
    """Walk back from REV (default HEAD): id, type and a one-line summary, newest first."""
    store = locator.open()
    if graph and as_json:
        _fail("--graph draws for people; use --json without it (nodes carry their parent)")
    if all_refs and not graph:
        _fail("--all draws every session and needs --graph ('sess log --graph --all'); "
              "'sess branch' lists the sessions")
    if graph:
        _log_graph(store, rev, all_refs, limit)
        return
    nodes = store.log(rev, limit)
    if reverse:
        nodes.reverse()
    if as_json:
        _emit_json([to_jsonable(n) for n in nodes])
        return
    labels = _ref_labels(store)
    width = max((len(n.type) for n in nodes), default=0)
    for n in nodes:
        if oneline:
            click.echo(_label(n, labels))
        else:
            refs = labels.get(n.id)
            names = f" ({', '.join(refs)})" if refs else ""
            click.echo(f"{short(n.id)}  {n.type:<{width}}  {summary(n)}{names}")


def _log_graph(store: Store, rev: str, all_refs: bool, limit: int | None) -> None:
    labels = _ref_labels(store)
    if all_refs:
        targets = {r.target for r in store.backend.list_refs("")}
        _, head = store.head()
        if head is not None:
            targets.add(head)
        stored = list(store.backend.iter_nodes())
        keep = ancestors(targets, {n.id: n.parent for n in stored})
        nodes = [Node(n.id, n.parent, n.type, msgspec.msgpack.decode(n.encoded))
                 for n in stored if n.id in keep]
    else:
        nodes = store.log(rev)
        nodes.reverse()
    drawn = [GraphNode(n.id, n.parent, _label(n, labels)) for n in nodes]
    for line in draw_graph(drawn, limit):
        click.echo(line)


@cli.command()
@click.argument("rev", default="HEAD", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def show(locator: StoreLocator, rev: str, as_json: bool) -> None:
    """Show one node in full."""
    store = locator.open()
    node = store.show(rev)
    if as_json:
        _emit_json({**to_jsonable(node), "depth": store.depth(node.id)})
        return
    labels = _ref_labels(store).get(node.id)
    click.echo(f"node    {node.id}")
    click.echo(f"parent  {node.parent or '(root)'}")
    click.echo(f"type    {node.type}")
    click.echo(f"depth   {store.depth(node.id)}")
    if labels:
        click.echo(f"refs    {', '.join(labels)}")
    click.echo("")
    click.echo(json.dumps(node.data, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("rev", default="HEAD", required=False)
@click.option("--json", "fmt", flag_value="json", help="One JSON array.")
@click.option("--jsonl", "fmt", flag_value="jsonl", help="One message per line.")
@click.option("--sending", is_flag=True,
              help="What a model API is sent: every tool call answered, no result without a "
                   "call, no two user messages in a row (the stored messages are unchanged).")
@pass_store
def messages(locator: StoreLocator, rev: str, fmt: str | None, sending: bool) -> None:
    """Print the chat messages of REV exactly as they were stored (--sending: as sent)."""
    store = locator.open()
    derived = store.derive(rev, sending=sending)
    for p in derived.problems:
        if p.kind == "pending-call":
            click.echo(f"note: tool call {p.tool_call_id} has no result yet (pending)", err=True)
        elif p.kind == "merged-user":
            click.echo(f"note: {p.detail}", err=True)
        else:
            click.echo(f"warning: {p.kind} {p.tool_call_id}: {p.detail}", err=True)
    if fmt == "json":
        _emit_json(derived.messages)
    elif fmt == "jsonl":
        for m in derived.messages:
            _emit_json(m)
    else:
        for m in derived.messages:
            click.echo(summary(Node(NodeId(""), None, "", m), 200))


@cli.command()
@click.argument("args", nargs=-1, required=True)
@pass_store
def append(locator: StoreLocator, args: tuple[str, ...]) -> None:
    """Append one event: `append [SESSION] TYPE [JSON|-]` (JSON from stdin if absent or -).

    SESSION defaults to the HEAD session; it is created if it does not exist.
    """
    store = locator.open()
    if len(args) > 3:
        _fail("usage: sess append [SESSION] TYPE [JSON|-]")
    if len(args) == 2 and not is_registered(args[0]) and not is_registered(args[1]):
        _fail(f"unknown event type {args[0]!r}")
    if len(args) == 3 or (len(args) == 2 and not is_registered(args[0])):
        target, type, payload = args[0], args[1], (args[2] if len(args) == 3 else "-")
    else:
        target, type, payload = None, args[0], (args[1] if len(args) == 2 else "-")
    if not is_registered(type):
        _fail(f"unknown event type {type!r}")
    source = "stdin" if payload == "-" else "argument"
    data = _parse_json(_read_stdin() if payload == "-" else payload, source)
    if target is None or target == "HEAD":
        name, node = store.head()
        if name is None:
            _fail(f"HEAD is detached at {short(node)}; create a session with "
                  "'sess checkout -b NAME'")
        target = name
    if target.startswith(SESSIONS):
        target = target[len(SESSIONS):]
    session = store.session(target)
    # The user named a session, not a parent: another writer's append in between is fine.
    appended = session.append(type, data, rebase=True)
    click.echo(f"{short(appended.id)} {target} ({_events(len(session))})")


def _reflog_name(store: Store, name: str | None) -> str:
    """The ref whose log `sess reflog NAME` shows: HEAD's session for none or ``HEAD``, a
    session by name, else a tag by its short name (as revisions resolve)."""
    if name is None or name in ("HEAD", "@"):
        head_name, node = store.head()
        if head_name is None:
            _fail(f"HEAD is detached at {short(node)}: only sessions and tags have a reflog; "
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
            _fail("usage: sess reflog --expire NAME (this gives up undo: name it explicitly)")
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
        _emit_json([msgspec.to_builtins(e) for e in entries])
        return
    for i, e in enumerate(entries):
        ref = e.ref[len(SESSIONS):] if e.ref.startswith(SESSIONS) else e.ref
        ref = ref[len(TAGS):] if ref.startswith(TAGS) else ref
        click.echo(f"{short(e.new)} {ref}@{{{i}}}: {e.reason} (from {short(e.old)}, "
                   f"{relative_time(e.time)})")


@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def diff(locator: StoreLocator, a: str, b: str, as_json: bool) -> None:
    """Show the common ancestor of A and B and what each added after it."""
    store = locator.open()
    d = store.diff(a, b)
    if as_json:
        _emit_json({"base": d.base, "a": [to_jsonable(n) for n in d.only_a],
                    "b": [to_jsonable(n) for n in d.only_b]})
        return
    if d.base is None:
        click.echo("no common ancestor")
    else:
        click.echo(f"common ancestor {short(d.base)} ({_events(store.depth(d.base))})")
    for rev, nodes in ((a, d.only_a), (b, d.only_b)):
        click.echo(f"only in {rev} ({len(nodes)}):")
        for n in nodes:
            click.echo(f"  {short(n.id)}  {n.type:<18} {summary(n, 60)}")


# -- import, export, maintenance -------------------------------------------------------------


@cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--as", "name", metavar="NAME", help="Session name (default: from the source).")
@click.option("--format", "fmt", default="auto", show_default=True, help="Input format.")
@click.option("-r", "--recursive", is_flag=True, help="Import every file under a folder.")
@click.option("--force", is_flag=True,
              help="With --as: replace a session of another history (its head stays in the reflog).")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def import_(locator: StoreLocator, files: tuple[Path, ...], name: str | None, fmt: str,
            recursive: bool, force: bool, as_json: bool) -> None:
    """Import transcripts (seed JSONL: one message per line, optional NAME.meta.json).

    A re-import lands where the earlier import of the same file is, even renamed.
    """
    from .interop import import_files

    store = locator.open()
    results = import_files(store, list(files), name=name, format=fmt, recursive=recursive,
                           force=force)
    if as_json:
        # Ids a file quotes may hold lone surrogates ("\ud800"), which UTF-8 cannot carry.
        def safe(text: str) -> str:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")

        _emit_json([{**msgspec.to_builtins(r), "source": safe(r.source),
                     "problems": [safe(p) for p in r.problems]} for r in results])
        return
    failed = 0
    for r in results:
        # A problem quotes the file (ids, keys): one printable line each, never raw escapes.
        for problem in r.problems:
            click.echo(_one_line(f"warning: {problem}"), err=True)
        if r.outcome == "failed":
            failed += 1
            click.echo(_one_line(f"{r.source}: failed"), err=True)
            continue
        if r.outcome == "skipped":
            continue  # its warning said why
        click.echo(_one_line(f"{r.session}: {r.outcome}, {_events(r.events)} "
                             f"({r.new_nodes} new) from {r.source}"))
    if failed:
        _fail(f"{failed} of {_count(len(results), 'file')} could not be imported")


@cli.command()
@click.argument("rev", default="HEAD", required=False)
@click.option("-o", "out", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="Output file (default: NAME.jsonl here); - for standard output.")
@click.option("--format", "fmt", default="seed", show_default=True, help="Output format.")
@click.option("--force", is_flag=True, help="Replace files that already exist.")
@pass_store
def export(locator: StoreLocator, rev: str, out: Path | None, fmt: str, force: bool) -> None:
    """Write a session back out (seed format: NAME.jsonl + NAME.meta.json).

    Files are replaced atomically and never written through a symbolic link.
    """
    from .interop import export_session, render_export

    store = locator.open()
    if out is not None and str(out) == "-":
        # The main file only: seed's NAME.meta.json has no place on a stream.
        data = render_export(store, rev, format=fmt)[0][1]
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    for path in export_session(store, rev, out=out, format=fmt, force=force):
        click.echo(f"wrote {path}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def stats(locator: StoreLocator, as_json: bool) -> None:
    """Nodes, refs, and bytes: as separate JSONL files (logical) against on disk (physical)."""
    s = locator.open().stats()
    if as_json:
        _emit_json({**msgspec.to_builtins(s), "ratio": round(s.ratio, 3)})
        return
    click.echo(f"nodes           {s.nodes}")
    click.echo(f"sessions        {s.sessions}")
    click.echo(f"tags            {s.tags}")
    click.echo(f"reflog entries  {s.reflog_entries}")
    click.echo(f"logical bytes   {s.logical_bytes}  (as one JSONL file per session)")
    click.echo(f"physical bytes  {s.physical_bytes}  (on disk)")
    click.echo(f"ratio           {s.ratio:.1f}x")


@cli.command()
@pass_store
def fsck(locator: StoreLocator) -> None:
    """Re-hash every node and check parents, refs, reflog and indexes; exit 1 on any fault."""
    store = locator.open()
    faults = store.fsck()
    for fault in faults:
        click.echo(f"fault: {fault}")
    if faults:
        _fail(f"{_count(len(faults), 'fault')} found")
    click.echo(f"ok: {store.backend.count_nodes()} nodes, every id, parent and ref checked")


@cli.command()
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@pass_store
def gc(locator: StoreLocator, dry_run: bool) -> None:
    """Remove nodes that no session, tag, HEAD or reflog entry reaches."""
    result = locator.open().gc(dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {_count(len(result.unreachable), 'unreachable node')}; {result.kept} kept")


def main() -> None:
    """Entry point of the ``sess`` console script.

    Every error a user can cause is turned into one line inside the commands. Anything else is
    a bug in sesstree: it too is one line (with ``SESS_DEBUG=1`` for the traceback), exit 70,
    because a user should never have to read Python. Tests run ``cli`` itself, so a bug still
    fails them loudly.
    """
    try:
        cli(prog_name="sess")
    except Exception as exc:  # the last line of defence, see above
        if os.environ.get("SESS_DEBUG"):
            raise
        message = _one_line(f"{type(exc).__name__}: {exc}")[:300]
        click.echo(f"Error: internal error ({message}); please report it "
                   "(SESS_DEBUG=1 shows the traceback)", err=True)
        sys.exit(70)
