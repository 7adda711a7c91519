"""How ``format4_blocks.db`` was made: a store of format 4 with its block digests (``sums``),
written by the sesstree of that format (835aec1) first on the path:

    PYTHONPATH=<checkout of 835aec1>/src python make_format4_blocks.py FOLDER
    cp FOLDER/store.db format4_blocks.db

One session ``q`` of ``MESSAGES``, in one batch: rows 1..552 of one path, so two whole
blocks of 256 rows (the writer gave them their digests when it closed) and 40 rows after them.
A few payloads are over 1 KB (stored apart, in blobs); there is no dictionary (fewer rows than
TRAIN_AFTER), so the rows are plain. Format 5 keeps no digests: only this store, opened
read-only, still has them read (tests/store/sqlite/test_sqlite_sums.py).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

from sesstree import open_store

BLOCK = 256
WORDS = "read the file and run the tests then fix the error in the store session node "


def message(i: int) -> dict[str, Any]:
    """The ``i``-th message of the session."""
    if i % 200 == 7:  # over 1 KB: a payload stored apart
        return {"role": "user", "content": f"line {i} of a file\n" * 80}
    return {"role": ("user", "assistant")[i % 2], "content": f"#{i} " + WORDS[: i % 40]}


MESSAGES = [message(i) for i in range(2 * BLOCK + 40)]


def main() -> None:
    folder = Path(sys.argv[1])
    with open_store(folder) as store:
        s = store.session("q")
        with store.batch():
            for m in MESSAGES:
                s.add_message(m)
    db = sqlite3.connect(folder / "store.db")
    try:
        assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == ("4",)
        his = [r[0] for r in db.execute("SELECT hi FROM sums ORDER BY hi")]
        assert his == [BLOCK, 2 * BLOCK], his
    finally:
        db.close()
    assert not (folder / "store.db-wal").exists()  # all of it in the one file


if __name__ == "__main__":
    main()
