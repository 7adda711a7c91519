"""``sess`` commands that make sessions travel: serve, remote, clone, fetch, pull, push.

Loaded only when one of them runs (see ``_Group.lazy``): they need the HTTP client, and
``serve`` the server stack, which no other command should wait for.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import click

from ..errors import PushRejectedError, RemoteError
from ..fmt import plural, short
from ..node import NodeId, remote_ref, tag_name
from ..repo.store import Store
from ..store.urls import is_store_url, redact_url
from ..sync import ops
from ..sync.connect import read_token_file
from ..sync.peer import RefResult
from ..sync.remotes import add_remote, get_remote, list_remotes, remove_remote
from ..sync.shown import shown_location
from .core import STORE_DIR, StoreLocator, emit_json, fail, pass_store

__all__ = ["clone", "fetch", "pull", "push", "remote", "serve"]

_token_option = click.option(
    "--token-file", type=click.Path(dir_okay=False), metavar="FILE",
    help="File holding the token to write to an http(s) remote (default: SESS_TOKEN, then the "
         "remote's --token-file).")


class _Progress:
    """Nodes, bytes and rate on stderr, redrawn in place, only when stderr is a terminal."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.start = time.monotonic()
        self.shown = False
        self.enabled = sys.stderr.isatty()

    def __call__(self, nodes: int, size: int) -> None:
        if not self.enabled:
            return
        elapsed = max(time.monotonic() - self.start, 1e-6)
        click.echo(f"\r{self.verb} {plural(nodes, 'node')}, {_size(size)}, "
                   f"{_size(int(size / elapsed))}/s   ", err=True, nl=False)
        self.shown = True

    def done(self) -> None:
        if self.shown:
            click.echo("", err=True)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return f"{n:.1f} GiB"


def _token(token_file: str | None) -> str | None:
    return None if token_file is None else read_token_file(token_file)


def _default_remote(store: Store, given: str | None) -> str:
    """REMOTE when given; else ``origin``, or the only remote there is."""
    if given:
        return given
    remotes = list_remotes(store)
    names = [r.name for r in remotes]
    if "origin" in names or not names:
        if not names:
            raise RemoteError("no remote configured: name one, or add one with "
                              "'sess remote add origin URL'")
        return "origin"
    if len(names) == 1:
        return names[0]
    raise RemoteError(f"several remotes and none is 'origin': name one of {', '.join(names)}")


# -- serve -------------------------------------------------------------------------------------


@click.command()
@click.option("--store", "store_path", metavar="PATH|URL",
              help="Store to serve (default: the global --store, SESS_STORE, or .sess/).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free one, printed).")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="File holding the token every write must carry (at least 16 characters; "
                   "a FILE that does not exist yet gets a new strong token); without it the "
                   "store is served read-only.")
@pass_store
def serve(locator: StoreLocator, store_path: str | None, host: str, port: int,
          token_file: str | None) -> None:
    """Serve the store over HTTP for clone, fetch, pull and push (see docs/sync.md)."""
    token = None if token_file is None else _server_token(Path(token_file))
    if store_path is not None:
        locator = StoreLocator(store_path)
    store = locator.open()
    try:
        address = ipaddress.ip_address(host) if host != "localhost" else None
    except ValueError:
        fail(f"--host {host!r} is not an IP address")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if address is not None and not address.is_loopback:
        click.echo(f"warning: serving on {host}: anyone who can reach it can read every "
                   "session", err=True)
    try:
        # IPPROTO_TCP named, not 0: asyncio turns Nagle off only on sockets that say TCP, and
        # with it on, every response waits ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # now, so a client may connect as soon as the line below is out
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    import uvicorn

    from ..server import create_app

    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    where = locator.url() or str(locator.find())
    mode = "writes need the token" if token else "read-only"
    line = f"Serving {redact_url(where)} on http://{shown}:{bound} ({mode}); Ctrl-C stops"

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            # Said once uvicorn's signal handlers are in place and the app is made: a Ctrl-C
            # from then on stops the server, where one in the middle of start-up was lost.
            if not self.should_exit:
                click.echo(line, err=True)

    # proxy_headers off: uvicorn would otherwise take the client's address from the
    # X-Forwarded-For of any connection from 127.0.0.1, so a local guesser could name a new
    # address with every guess and never be throttled (web/throttle.py counts per address).
    config = uvicorn.Config(create_app(store, token=token, host=host), log_level="warning",
                            server_header=False, proxy_headers=False)
    try:
        Server(config).run(sockets=[sock])
    finally:
        sock.close()


def _server_token(path: Path) -> str:
    """The token in ``path``, refused if it is short enough to guess; if there is no such file
    yet, a new strong token (256 random bits) written there, readable by this user only."""
    from ..web.security import MIN_TOKEN

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _own_token_file(path)
        token = read_token_file(path)
        if len(token) < MIN_TOKEN:
            fail(f"the token in {path} is {len(token)} characters long: a server's token "
                 f"needs at least {MIN_TOKEN}, or it can be guessed (remove the file and "
                 f"'sess serve --token-file {path}' writes a strong one)")
        return token
    except OSError as exc:
        fail(f"cannot write a new token to {path}: {exc.strerror}")
    token = secrets.token_urlsafe(32)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        # A full disk (or quota) cut it short: no part of a token may stay behind, or the next
        # start would take those few characters for the token.
        path.unlink(missing_ok=True)
        fail(f"cannot write a new token to {path}: {exc.strerror}")
    click.echo(f"Wrote a new token to {path} (readable only by you): a client that writes "
               f"reads it with --token-file {path} or SESS_TOKEN", err=True)
    return token


def _own_token_file(path: Path) -> None:
    """Refuse a token file another user could have chosen: one that is theirs (or a symlink
    of theirs, say planted in /tmp and pointing at a file whose first line they know), or one
    others may write. Whoever chooses the file's content chooses the server's token."""
    if not hasattr(os, "getuid"):  # Windows: no owners to compare
        return
    try:
        link, target = os.lstat(path), os.stat(path)
    except OSError:
        return  # read_token_file says what is wrong with it
    if link.st_uid != os.getuid() or target.st_uid != os.getuid():
        fail(f"the token file {path} belongs to another user, who could choose the server's "
             "token: use a file of your own")
    if target.st_mode & 0o022:
        fail(f"the token file {path} can be written by other users, who could choose the "
             f"server's token: 'chmod go-w {path}' first")


# -- remote ------------------------------------------------------------------------------------


@click.group()
def remote() -> None:
    """Name other stores: folders, postgresql:// URLs, or http(s):// URLs of `sess serve`."""


@remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="File holding the token to write there (the file's path is kept, never "
                   "the token).")
@pass_store
def remote_add(locator: StoreLocator, name: str, url: str, token_file: str | None) -> None:
    """Add remote NAME at URL (a path, postgresql://..., or http(s)://...)."""
    added = add_remote(locator.open(), name, url, token_file=token_file)
    click.echo(f"Added remote {added.name} at {_shown(added.url)}")


@remote.command("remove")
@click.argument("name")
@pass_store
def remote_remove(locator: StoreLocator, name: str) -> None:
    """Forget remote NAME and its remote-tracking sessions NAME/*."""
    removed = remove_remote(locator.open(), name)
    click.echo(f"Removed remote {removed.name} ({_shown(removed.url)})")


@remote.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Show URLs.")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def remote_list(locator: StoreLocator, verbose: bool, as_json: bool) -> None:
    """List remotes."""
    remotes = list_remotes(locator.open())
    if as_json:
        emit_json([{"name": r.name, "url": _shown(r.url), "token_file": r.token_file}
                   for r in remotes])
        return
    for r in remotes:
        click.echo(f"{r.name}\t{_shown(r.url)}" if verbose else r.name)


@remote.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def remote_show(locator: StoreLocator, name: str, as_json: bool) -> None:
    """Show remote NAME: its URL and its sessions as of the last fetch (NAME/SESSION)."""
    store = locator.open()
    found = get_remote(store, name)
    if found is None:
        raise RemoteError(f"no remote named {name!r} (see 'sess remote list')")
    prefix = remote_ref(f"{name}/")
    refs = store.refs(prefix)
    if as_json:
        emit_json({"name": name, "url": _shown(found.url), "sessions": [
            {"name": r.name[len(prefix):], "head": r.target, "length": store.depth(r.target),
             "fetched": r.moved} for r in refs]})
        return
    click.echo(f"remote {name}\n  url: {_shown(found.url)}")
    width = max((len(r.name) - len(prefix) for r in refs), default=0)
    for r in refs:
        click.echo(f"  {name}/{r.name[len(prefix):]:<{width}}  {short(r.target)}  "
                   f"{plural(store.depth(r.target), 'event')}")


def _shown(url: str) -> str:
    return shown_location(url)


# -- clone, fetch, pull, push ------------------------------------------------------------------


@click.command()
@click.argument("url")
@click.argument("path", required=False)
@_token_option
def clone(url: str, path: str | None, token_file: str | None) -> None:
    """Copy every session and tag of the store at URL into a new store in PATH/.sess (or at
    a postgresql:// URL); URL becomes remote `origin`."""
    if path is None:
        path = _default_clone_path(url)
    target = path if is_store_url(path) else Path(path) / STORE_DIR
    if not is_store_url(path) and Path(target).exists():
        fail(f"{path} already holds a store ({target}): clone into a new folder")
    source = url if "://" in url else str(Path(url).resolve())
    progress = _Progress("Receiving")
    made = None if is_store_url(path) or Path(path).exists() else Path(path)
    try:
        store = ops.clone(source, target, token=_token(token_file), progress=progress)
    except BaseException:
        if made is not None:  # a failed clone leaves no folder behind to trip the rerun
            shutil.rmtree(made, ignore_errors=True)
        raise
    finally:
        progress.done()
    with store:
        n = len(store.sessions())
        click.echo(f"Cloned {plural(n, 'session')} and {plural(len(store.tags()), 'tag')} "
                   f"from {_shown(source)} into {redact_url(str(target))}")


def _default_clone_path(url: str) -> str:
    """Like git: the last component of the source's path (``.sess`` left out); a URL with no
    path (``http://host:8765``) or a database URL needs PATH."""
    path = urlsplit(url).path if "://" in url else url
    parts = [p for p in path.split("/") if p and p not in (".", "..", STORE_DIR)]
    if not parts or is_store_url(url):
        fail(f"cannot name a folder after {_shown(url)}: give PATH (sess clone URL PATH)")
    return parts[-1]


@click.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False)
@_token_option
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def fetch(locator: StoreLocator, remote_name: str | None, token_file: str | None,
          as_json: bool) -> None:
    """Bring what REMOTE (default origin) has; its sessions become readable as REMOTE/NAME."""
    store = locator.open()
    name = _default_remote(store, remote_name)
    progress = _Progress("Receiving")
    result = ops.fetch(store, name, token=_token(token_file), progress=progress)
    progress.done()
    if as_json:
        emit_json({"remote": result.remote, "nodes": result.nodes, "bytes": result.bytes,
                   "round_trips": result.round_trips,
                   "moved": [{"ref": r, "old": o, "new": n} for r, o, n in result.moved],
                   "skipped_tags": result.skipped_tags})
        return
    for ref, old, new in result.moved:
        shown = ref.split("/", 1)[1]
        click.echo(_move_line(old, new, shown))
    for tag in result.skipped_tags:
        click.echo(f" ! [kept]           tag {tag} (the remote's points elsewhere)")
    if result.nodes:
        click.echo(f"Received {plural(result.nodes, 'node')} ({_size(result.bytes)}) from "
                   f"{result.remote}")


def _move_line(old: NodeId | None, new: NodeId | None, ref: str) -> str:
    if old is None:
        return f" * [new]            {ref}"
    if new is None:
        return f" - [deleted]        {ref}"
    return f"   {short(old)}..{short(new)}  {ref}"


@click.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False)
@click.argument("sessions", nargs=-1)
@_token_option
@pass_store
def pull(locator: StoreLocator, remote_name: str | None, sessions: tuple[str, ...],
         token_file: str | None) -> None:
    """Fetch, then fast-forward SESSIONs (default: the current one) to REMOTE's; never
    merges: a divergence is refused, naming the node where the two sides part."""
    store = locator.open()
    name = _default_remote(store, remote_name)
    progress = _Progress("Receiving")
    result = ops.pull(store, name, list(sessions) or None, token=_token(token_file),
                      progress=progress)
    progress.done()
    for session, status, old, new in result.sessions:
        if status == "fast-forward":
            click.echo(f"{session}: fast-forward {short(old)}..{short(new)}")
        elif status == "created":
            click.echo(f"{session}: created at {short(new)}")
        elif status == "ahead":
            click.echo(f"{session}: ahead of {_shown(name)}/{session}, nothing to pull")
        else:
            click.echo(f"{session}: already up to date")


@click.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False)
@click.argument("sessions", nargs=-1)
@click.option("--all", "all_sessions", is_flag=True, help="Push every session.")
@click.option("--tags", is_flag=True, help="Push every tag too.")
@click.option("-f", "--force", is_flag=True,
              help="Replace the remote's session even when it does not fast-forward (still "
                   "refused if it moved since this push read it).")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be sent; send nothing.")
@_token_option
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def push(locator: StoreLocator, remote_name: str | None, sessions: tuple[str, ...],
         all_sessions: bool, tags: bool, force: bool, dry_run: bool, token_file: str | None,
         as_json: bool) -> None:
    """Send SESSIONs (default: the current one) to REMOTE (default origin), with only the
    nodes it lacks. Refused unless each fast-forwards the remote's, or --force."""
    store = locator.open()
    name = _default_remote(store, remote_name)
    progress = _Progress("Sending")
    try:
        result = ops.push(store, name, list(sessions) or None, force=force, tags=tags,
                          all_sessions=all_sessions, dry_run=dry_run,
                          token=_token(token_file), progress=progress)
    except PushRejectedError as exc:
        progress.done()
        for r in exc.results:
            if isinstance(r, RefResult) and r.status != "rejected":
                click.echo(_push_line(r))
        raise
    progress.done()
    if as_json:
        emit_json({"remote": result.remote, "nodes": result.nodes, "bytes": result.bytes,
                   "round_trips": result.round_trips, "dry_run": result.dry_run,
                   "refs": [{"ref": r.ref, "old": r.old, "new": r.new, "status": r.status}
                            for r in result.results]})
        return
    for r in result.results:
        click.echo(_push_line(r))
    if not result.nodes and all(r.status == "up-to-date" for r in result.results):
        click.echo(f"Everything up to date on {result.remote}")
        return
    verb = "Would send" if dry_run else "Sent"
    click.echo(f"{verb} {plural(result.nodes, 'node')}"
               + ("" if dry_run else f" ({_size(result.bytes)})") + f" to {result.remote}")


def _push_line(r: RefResult) -> str:
    ref = r.ref.split("/", 1)[1]
    kind = "tag " if tag_name(r.ref) is not None else ""
    if r.status == "up-to-date":
        return f" = [up to date]     {kind}{ref}"
    return _move_line(r.old, r.new, kind + ref)
