"""Where HEAD is kept: in the store for a local one, on this machine for a shared one.

HEAD is a checkout's notion, as git keeps it in ``.git/HEAD``. A local store is one checkout:
its HEAD lives in the store (in the store folder's file), and moves in the same transaction as
the refs it follows. A shared store on a server (PostgreSQL) has many users at once, and one
user's ``sess checkout`` must not move everyone's HEAD: there HEAD is a small file of this
user on this machine, one per store URL, under ``$SESS_HOME`` (default
``$XDG_STATE_HOME/sesstree``, else ``~/.local/state/sesstree``), private (0600).

Its value is ``ref: sessions/NAME`` or a node id (detached), as in git.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from blake3 import blake3

from .errors import StoreError
from .files import unwritable, write_private
from .store.base import Backend

__all__ = ["FileHead", "HeadKeeper", "MetaHead", "head_file_for"]


class HeadKeeper(Protocol):
    """Reads and writes the raw HEAD value (None: never set)."""

    #: True if HEAD moves in the store's own transactions (so with the refs it follows).
    in_store: bool

    def get(self) -> str | None:
        """The raw value, or None."""

    def set(self, value: str) -> None:
        """Write the raw value."""


class MetaHead:
    """HEAD in the store itself: a local store is one checkout."""

    in_store = True

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def get(self) -> str | None:
        """The raw value, or None."""
        return self._backend.get_head()

    def set(self, value: str) -> None:
        """Write the raw value (inside the store's transaction, if one is open)."""
        self._backend.set_head(value)


class FileHead:
    """HEAD of this user's checkout of a shared store: a file on this machine."""

    in_store = False

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self) -> str | None:
        """The raw value, or None."""
        try:
            return self.path.read_text().strip() or None
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read HEAD at {self.path}: {exc.strerror}") from None

    def set(self, value: str) -> None:
        """Write the raw value, atomically (a temporary file renamed over the old one)."""
        try:
            write_private(self.path, (value + "\n").encode())
        except OSError as exc:
            raise unwritable("HEAD", self.path, exc) from None


def head_file_for(url: str) -> Path:
    """The file that keeps this user's HEAD of the store at ``url`` (its password left out
    of the key, so a changed password keeps the same HEAD)."""
    from .store.urls import redact_url

    home = os.environ.get("SESS_HOME")
    if home:
        base = Path(home)
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(state) / "sesstree"
    key = blake3(redact_url(url).encode()).hexdigest()[:24]
    return base / "heads" / key
