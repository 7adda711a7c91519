"""Finding the store a command works on, as git finds ``.git``: ``--store``, then
``SESS_STORE``, then ``.sess/`` in this folder or a parent; and, when there is none, the hint
that names a store folder right here (``--store sessions``)."""

from __future__ import annotations

import itertools
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StoreNotFoundError
from ..store.urls import is_store_url

if TYPE_CHECKING:
    from ..repo.store import Store

__all__ = ["STORE_DIR", "StoreLocator"]

STORE_DIR = ".sess"
#: The database file inside a store folder (as :data:`sesstree.repo.store.STORE_FILE`).
_STORE_FILE = "store.db"


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
                if (folder / _STORE_FILE).exists():
                    return folder
            if explicit.is_file():
                _check_is_database(explicit)
                return explicit
            raise StoreNotFoundError(
                f"no store at {explicit} (create one with 'sess --store {explicit} init')"
            )
        here = Path.cwd().resolve()
        for folder in (here, *here.parents):
            if (folder / STORE_DIR / _STORE_FILE).exists():
                return folder / STORE_DIR
        nearby = _stores_below(here)
        if nearby:
            shown = " or ".join(f"--store {shlex.quote(n)}" for n in nearby)
            raise StoreNotFoundError(
                f"no store found in this folder or any parent, but {nearby[0]}/ here holds "
                f"one: pass {shown} (or set SESS_STORE={shlex.quote(nearby[0])}), or run "
                "'sess init' to make a new one here"
            )
        raise StoreNotFoundError(
            "no store found in this folder or any parent: run 'sess init' to make one here, "
            "or pass --store PATH or set SESS_STORE=PATH to use one elsewhere"
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
            from ..repo.store import open_store

            self._store = open_store(self.url() or self.find(), create=False)
        return self._store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


_SQLITE_MAGIC = b"SQLite format 3\x00"
# How many entries of the current folder are looked at for a store a user may have meant.
_LOOK_AT = 500


def _stores_below(here: Path) -> list[str]:
    """Folders right inside ``here`` that hold a store (one ``open_store("sessions")`` made,
    or a ``.sess/`` of their own), for the hint when none was found: at most three, by name."""
    found = []
    try:
        with os.scandir(here) as entries:
            for entry in itertools.islice(entries, _LOOK_AT):
                # (Not entry.is_dir(): it raises on a symlink loop; a path through a file or a
                # loop is no regular file either.)
                folder = Path(entry.path)
                if not entry.name.startswith(".") and any(
                        _is_database(f / _STORE_FILE) for f in (folder, folder / STORE_DIR)):
                    found.append(entry.name)
    except OSError:
        return []
    return sorted(found)[:3]


def _is_database(path: Path) -> bool:
    try:
        if not path.is_file():  # (a named pipe would block the read until a writer came)
            return False
        with path.open("rb") as f:
            return f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _check_is_database(path: Path) -> None:
    """A file given as the store must at least be an SQLite database: a text file (a
    transcript passed by mistake) is not a damaged store, it is no store at all."""
    with path.open("rb") as f:
        magic = f.read(len(_SQLITE_MAGIC))
    if magic != _SQLITE_MAGIC:
        what = "an empty file" if not magic else "a file that is not an SQLite database"
        raise StoreNotFoundError(f"{path} is not a sesstree store ({what})")
