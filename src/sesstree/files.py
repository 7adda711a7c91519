"""Small files of this user's checkout (HEAD of a shared store, the remotes, the previous
HEAD for ``sess checkout -``): written whole or not at all, readable by this user only."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_private"]


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a private temporary file beside it (mode
    0600, as ``mkstemp`` makes it), renamed over it, so a reader sees the old file or the new
    one and two writers never mix. Creates the folder (0700) if needed.

    Raises:
        OSError: the folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    import tempfile  # (here: only a write needs it)

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
