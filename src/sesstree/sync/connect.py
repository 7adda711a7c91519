"""Opening the other store of a sync, whatever it is: a remote's name, a folder, a
``postgresql://`` URL, an ``http(s)://`` URL of ``sess serve``, or a Store; and finding the
token that writes there (never from the command line, never stored)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import RemoteError
from ..repo.store import STORE_FILE, Store, open_store
from ..store.urls import is_store_url, redact_url
from .peer import LocalPeer, Peer
from .remotes import Remote, get_remote
from .token import sendable_token

__all__ = ["open_peer", "read_token_file", "sendable_token"]


def open_peer(store: Store, remote: str | os.PathLike[str] | Store, *,
              token: str | None = None) -> tuple[Peer, Remote | None]:
    """The peer for ``remote``: a remote's name, a folder, a ``postgresql://`` or an
    ``http(s)://`` URL, or a Store. Also the configured Remote when ``remote`` names one."""
    if isinstance(remote, Store):
        return LocalPeer(remote, "the other store", owned=False), None
    text = os.fspath(remote)
    configured = get_remote(store, text) if "/" not in text and "://" not in text else None
    url = configured.url if configured is not None else text
    if configured is None and "/" not in text and "://" not in text and not Path(text).exists():
        raise RemoteError(f"no remote named {text!r} (see 'sess remote list')")
    if url.lower().startswith(("http://", "https://")):
        from .http import HttpPeer

        return HttpPeer(url, token=_token(token, configured)), configured
    if is_store_url(url):
        return LocalPeer(open_store(url, create=False), redact_url(url)), configured
    if "://" in url:
        raise RemoteError(f"unsupported URL {url.split('://')[0]}://...: use a path, "
                          "postgresql:// or http(s)://")
    folder = Path(url)
    for candidate in (folder, folder / ".sess"):
        if (candidate / STORE_FILE).exists():
            return LocalPeer(open_store(candidate, create=False), str(folder)), configured
    raise RemoteError(f"no store at {folder}")


def _token(given: str | None, remote: Remote | None) -> str | None:
    """The write token: given, else SESS_TOKEN, else the remote's token file."""
    if given:
        return given
    env = os.environ.get("SESS_TOKEN")
    if env:
        return sendable_token(env.strip(), "SESS_TOKEN")
    if remote is not None and remote.token_file:
        return read_token_file(remote.token_file)
    return None


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in file ``path`` (its first line), never shown in a message."""
    try:
        token = Path(path).read_text().strip().splitlines()
    except OSError as exc:
        raise RemoteError(f"cannot read the token file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RemoteError(f"the token file {path} is not text") from None
    if not token or not token[0].strip():
        raise RemoteError(f"the token file {path} is empty")
    return sendable_token(token[0].strip(), f"the token file {path}")
