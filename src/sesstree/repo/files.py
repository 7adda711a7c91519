"""Small files of this user's checkout (HEAD of a shared store, the remotes, the previous
HEAD for ``sess checkout -``): written whole or not at all, readable by this user only."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..errors import StoreError, StoreFullError

__all__ = ["unwritable", "write_private"]


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a private temporary file beside it (mode
    0600, as ``mkstemp`` makes it), renamed over it, so a reader sees the old file or the new
    one and two writers never mix. Creates the folder (0700) if needed. Durable when it
    returns: the data is synced before the rename (or a power loss could leave the new name
    on an empty file) and the folder after it (or the rename itself could be lost), so what
    is written next (a store's transaction, the removal of a note) comes after it on disk.

    Raises:
        OSError: the folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    import tempfile  # (here: only a write needs it)

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Sync ``folder``'s entries (a rename in it) to disk, where the platform can."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # (Windows cannot open a folder: its renames are durable by other means)
    try:
        os.fsync(fd)
    except OSError:
        pass  # a file system that cannot sync a folder (EINVAL) syncs its entries itself
    finally:
        os.close(fd)


def unwritable(what: str, path: Path, exc: OSError) -> StoreError:
    """The error for ``what`` (``HEAD``, ``the remotes``) not written to ``path``: on a full
    disk the full-disk error naming the folder, as the store's own writes give it."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(
            f"cannot write {what} in {path.parent}: the disk is full; nothing was changed, "
            "free space there and retry"
        )
    return StoreError(f"cannot write {what} at {path}: {exc.strerror}")
