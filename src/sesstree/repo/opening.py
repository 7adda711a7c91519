"""Opening a store: which backend a path or URL names, and where its HEAD is kept.

A folder (made private on creation) or a file is a SQLite store; ``":memory:"`` a throwaway
one; a ``postgresql://`` URL a shared store, whose HEAD is this user's, on this machine (see
:mod:`sesstree.repo.head`). :func:`sesstree.repo.store.open_store` wraps the result in a Store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from ..errors import StoreNotFoundError
from ..store.base import Backend
from ..store.sqlite.backend import SqliteBackend
from ..store.sqlite.media import media_error
from ..store.urls import is_store_url, open_url
from .head import FileHead, HeadKeeper, head_file_for

__all__ = ["STORE_FILE", "open_backend"]

#: The SQLite file in a store's folder.
STORE_FILE = "store.db"


def open_backend(
    path: str | os.PathLike[str],
    *,
    durability: Literal["default", "durable"] = "default",
    create: bool = True,
    timeout: float = 10.0,
) -> tuple[Backend, HeadKeeper | None]:
    """The backend ``path`` names, opened as :func:`~sesstree.repo.store.open_store` says, and
    the keeper of its HEAD when it is not kept in the store (None: in the store)."""
    if str(path) == ":memory:":
        from ..store.memory import MemoryBackend

        return MemoryBackend(), None
    if is_store_url(path):
        # A shared store: this user's HEAD is kept on this machine, not in the store.
        return (open_url(str(path), create=create, durable=durability == "durable",
                         timeout=timeout), FileHead(head_file_for(str(path))))
    folder = Path(path)
    if folder.is_file():
        file = folder
    else:
        if not folder.exists():
            if not create:
                raise StoreNotFoundError(f"no store at {folder}")
            _make_private_folder(folder)
        file = folder / STORE_FILE
    return SqliteBackend(file, create=create, durable=durability == "durable",
                         timeout=timeout), None


def _make_private_folder(folder: Path) -> None:
    """Create the store's folder 0700 whatever the umask; another creator may win the race."""
    try:
        folder.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        return  # made by a concurrent creator (which makes it private the same way)
    except OSError as exc:
        raise media_error(folder / STORE_FILE, exc) from None
    os.chmod(folder, 0o700)
