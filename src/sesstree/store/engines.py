"""Which engine opens a store: dispatch on where the store is, engines registered by scheme.

:func:`open_backend` opens the backend of any store location:

- ``":memory:"``: a throwaway store in memory (:mod:`sesstree.store.memory`);
- a URL whose scheme an engine registered: that engine (today ``postgresql://`` and
  ``postgres://``, :mod:`sesstree.store.postgres`);
- anything else: a folder holding an SQLite file, or that file itself
  (:mod:`sesstree.store.sqlite`); so is ``mysql://...`` while no engine registered
  ``mysql``, as sesstree always read it: a path.

An engine that opens URLs registers its scheme with :func:`register`, giving an opener that
takes the URL and the options of :func:`open_backend`. An opener imports its engine when it is
called: a store in a folder never pays for psycopg, and a machine without it gets one clear
error only when it asks for a PostgreSQL URL. No engine imports this module, so dispatch never
makes an import cycle with the engines it dispatches to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from ..errors import StoreError, StoreNotFoundError
from .base import Backend
from .sqlite.backend import SqliteBackend
from .sqlite.media import media_error
from .urls import URL_SCHEMES

__all__ = ["MEMORY", "STORE_FILE", "Opener", "engine_of", "open_backend", "register"]

#: The location of a throwaway store in memory.
MEMORY = ":memory:"
#: The SQLite file inside a store's folder.
STORE_FILE = "store.db"


class Opener(Protocol):
    """Opens the backend of a store URL of one scheme (see :func:`register`)."""

    def __call__(self, url: str, *, create: bool, durable: bool, timeout: float) -> Backend:
        """The backend of the store at ``url``; raises a StoreError when it cannot be opened."""
        ...


_OPENERS: dict[str, Opener] = {}


def register(scheme: str, opener: Opener) -> None:
    """Open store URLs ``scheme://...`` (the scheme compared without case) with ``opener``.
    A later registration of the same scheme replaces the earlier one."""
    _OPENERS[scheme.lower()] = opener


def engine_of(location: object) -> Opener | None:
    """The opener registered for ``location``'s URL scheme, or None (not a URL an engine
    registered: a folder, a file, or ``":memory:"``)."""
    if not isinstance(location, str):
        return None
    scheme, sep, _ = location.partition("://")
    return _OPENERS.get(scheme.lower()) if sep else None


def open_backend(
    location: str | os.PathLike[str], *, create: bool = True, durable: bool = False,
    timeout: float = 10.0,
) -> Backend:
    """The backend of the store at ``location`` (see the module docstring).

    ``create``: make the store if there is none (for a folder, the folder too, private to
    its owner). ``durable``: every commit survives power loss. ``timeout``: how long a writer
    waits for the store (a lock, a connection), in seconds.

    Raises:
        StoreNotFoundError: no store there and ``create`` is false.
        StoreError: any error of the engine's backend.
    """
    if str(location) == MEMORY:
        from .memory import MemoryBackend

        return MemoryBackend()
    opener = engine_of(location)
    if opener is not None:
        return opener(str(location), create=create, durable=durable, timeout=timeout)
    return _open_folder(Path(location), create=create, durable=durable, timeout=timeout)


def _open_folder(folder: Path, *, create: bool, durable: bool, timeout: float) -> Backend:
    """The SQLite store in ``folder`` (or the store file ``folder`` itself)."""
    if folder.is_file():
        file = folder
    else:
        if not folder.exists():
            if not create:
                raise StoreNotFoundError(f"no store at {folder}")
            _make_private_folder(folder)
        file = folder / STORE_FILE
    return SqliteBackend(file, create=create, durable=durable, timeout=timeout)


def _make_private_folder(folder: Path) -> None:
    """Create the store's folder 0700 whatever the umask; another creator may win the race."""
    try:
        folder.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        return  # made by a concurrent creator (which makes it private the same way)
    except OSError as exc:
        raise media_error(folder / STORE_FILE, exc) from None
    os.chmod(folder, 0o700)


def _open_postgres(url: str, *, create: bool, durable: bool, timeout: float) -> Backend:
    """The PostgreSQL store at ``url`` (psycopg is loaded here, when a URL asks for it).

    Raises:
        StoreError: psycopg is not installed (``pip install 'sesstree[postgres]'``), or any
            of the errors of :class:`~sesstree.store.postgres.backend.PostgresBackend`.
    """
    try:
        from .postgres.backend import PostgresBackend
    except ImportError as exc:
        raise StoreError(
            f"a PostgreSQL store needs psycopg, which is not installed ({exc.name}): "
            "pip install 'sesstree[postgres]'"
        ) from None
    return PostgresBackend(url, create=create, durable=durable, timeout=timeout)


for _scheme in URL_SCHEMES:
    register(_scheme.removesuffix("://"), _open_postgres)
