"""The durability settings do what docs/storage.md says.

Power loss cannot be staged here; what can break is the setting itself: a durable store whose
connection does not sync each commit would pass every kill test and still lose data on power
loss. So this checks the synchronisation level SQLite was actually given, on every connection a
store opens, including a reopened one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sesstree import open_store
from sesstree.store.sqlite import SqliteBackend

# SQLite's PRAGMA synchronous values.
NORMAL, FULL = 1, 2


def _sync_level(path: Path, durability: str) -> int:
    with open_store(path, durability=durability) as store:  # type: ignore[arg-type]
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        store.session("a").add_message({"role": "user", "content": "x"})
        level = backend._db.execute("PRAGMA synchronous").fetchone()[0]
        mode = backend._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    return int(level)


@pytest.mark.parametrize(("durability", "level"), [("default", NORMAL), ("durable", FULL)])
def test_each_connection_gets_the_sync_level(tmp_path: Path, durability: str, level: int) -> None:
    assert _sync_level(tmp_path / "s", durability) == level
    # Reopening an existing store applies the setting of the new handle, not the old one.
    other = "durable" if durability == "default" else "default"
    assert _sync_level(tmp_path / "s", other) == (FULL if other == "durable" else NORMAL)
