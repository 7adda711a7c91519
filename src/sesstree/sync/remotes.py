"""Remotes: named URLs of other stores, kept as client-side configuration, like HEAD.

A local store keeps its remotes in ``remotes.json`` beside its database (in the store folder);
a shared PostgreSQL store keeps each user's under ``$SESS_HOME`` (see :mod:`sesstree.repo.head`), so
one user's ``sess remote add`` changes nobody else's. A store in memory keeps them in memory.
The file never holds a token: at most the path of a file that holds one.
"""

from __future__ import annotations

import re
import weakref
from pathlib import Path

import msgspec

from ..errors import RemoteError, StoreError
from ..node import remote_ref
from ..repo.files import unwritable, write_private
from ..repo.head import head_file_for
from ..repo.store import STORE_FILE, Store
from ..store.urls import is_store_url
from .shown import shown_location

__all__ = [
    "Remote", "add_remote", "check_remote_name", "get_remote", "list_remotes", "normalize_url",
    "remotes_file", "remove_remote",
]

REMOTES_FILE = "remotes.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_in_memory: weakref.WeakKeyDictionary[Store, dict[str, Remote]] = weakref.WeakKeyDictionary()


class Remote(msgspec.Struct, frozen=True):
    """A named other store: a folder, a ``postgresql://`` URL or an ``http(s)://`` URL, and
    optionally the file holding the token to write there."""

    name: str
    url: str
    token_file: str | None = None


class _File(msgspec.Struct):
    remotes: dict[str, Remote] = {}


def remotes_file(store: Store) -> Path | None:
    """Where ``store``'s remotes are kept (None: in memory)."""
    where = store.location
    if isinstance(where, Path):
        return (where.parent / REMOTES_FILE if where.name == STORE_FILE
                else where.with_name(where.name + "." + REMOTES_FILE))
    if isinstance(where, str):
        key = head_file_for(where).name
        return head_file_for(where).parent.parent / "remotes" / (key + ".json")
    return None


def _load(store: Store) -> dict[str, Remote]:
    path = remotes_file(store)
    if path is None:
        return dict(_in_memory.get(store, {}))
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreError(f"cannot read the remotes at {path}: {exc.strerror}") from None
    try:
        return dict(msgspec.json.decode(raw, type=_File).remotes)
    except msgspec.DecodeError as exc:
        raise StoreError(f"{path}: not a valid remotes file ({exc})") from None


def _save(store: Store, remotes: dict[str, Remote]) -> None:
    path = remotes_file(store)
    if path is None:
        _in_memory[store] = dict(remotes)
        return
    data = msgspec.json.format(msgspec.json.encode(_File(dict(sorted(remotes.items())))))
    try:
        write_private(path, data + b"\n")
    except OSError as exc:
        raise unwritable("the remotes", path, exc) from None


def check_remote_name(name: str) -> str:
    """A remote's name: letters, digits, ``.``, ``_``, ``-`` (no ``/``: ``NAME/SESSION`` is
    how its sessions are read)."""
    if not _NAME.match(name):
        raise RemoteError(f"invalid remote name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def normalize_url(url: str) -> str:
    """A remote's location as stored: a ``postgresql://`` URL as given, an ``http(s)://`` URL
    checked (it must parse and name a host) and without ``user:password@`` (never used: the
    token travels in a header), a path made absolute.

    Raises:
        RemoteError: an http(s) URL that does not parse or names no host, or another scheme.
    """
    if url.lower().startswith(("http://", "https://")):
        return _http_url(url)
    if is_store_url(url):
        return url
    if "://" in url:
        raise RemoteError(f"unsupported URL {url.split('://')[0]}://...: use a path, "
                          "postgresql:// or http(s)://")
    return str(Path(url).expanduser().resolve())


def _http_url(url: str) -> str:
    import httpx

    from .shown import shown_url, url_problem

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise RemoteError(f"invalid URL {shown_url(url)!r}: {url_problem(url, exc)}") from None
    if not parsed.host:
        raise RemoteError(f"invalid URL {shown_url(url)!r}: expected http(s)://HOST[:PORT]")
    return str(parsed.copy_with(username=None, password=None))


def list_remotes(store: Store) -> list[Remote]:
    """Every remote of ``store``, by name."""
    return [r for _, r in sorted(_load(store).items())]


def get_remote(store: Store, name: str) -> Remote | None:
    """The remote called ``name``, or None."""
    return _load(store).get(name)


def add_remote(store: Store, name: str, url: str, *, token_file: str | None = None) -> Remote:
    """Add remote ``name`` at ``url`` (a path, ``postgresql://`` or ``http(s)://``)."""
    remotes = _load(store)
    if name in remotes:
        raise RemoteError(f"remote {name!r} already exists "
                          f"({shown_location(remotes[name].url)})")
    remote = Remote(check_remote_name(name), normalize_url(url),
                    None if token_file is None else str(Path(token_file).expanduser().resolve()))
    remotes[name] = remote
    _save(store, remotes)
    return remote


def remove_remote(store: Store, name: str) -> Remote:
    """Forget remote ``name`` and its remote-tracking refs (logged, like every ref move)."""
    remotes = _load(store)
    remote = remotes.pop(name, None)
    if remote is None:
        raise RemoteError(f"no remote named {name!r} (see 'sess remote list')")
    prefix = remote_ref(f"{name}/")
    with store.batch():
        for ref in store.refs(prefix):
            store.move_ref(ref.name, ref.target, None, f"remote: removed {name}")
    _save(store, remotes)
    return remote
