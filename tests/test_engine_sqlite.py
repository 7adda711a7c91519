"""The conformance suite on the SQLite engine, and what only that engine has."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import msgspec
import pytest

from sesstree import Store, open_store
from sesstree.node import NodeId
from sesstree.testing import Engine, user
from sesstree.testing.conformance import *  # noqa: F403 - the suite's tests and fixtures
from sesstree.testing.conformance import grow


def damage(store: Store, id: NodeId) -> None:
    with closing(sqlite3.connect(store.backend.path)) as db, db:  # type: ignore[attr-defined]
        db.execute("UPDATE nodes SET data = ? WHERE id = ?",
                   (msgspec.msgpack.encode(user("evil")), bytes.fromhex(id)))


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine("sqlite", open=lambda: open_store(tmp_path / "s"), damage_node=damage)


def test_fsck_finds_wrong_depth_index(store: Store) -> None:
    ids = grow(store, "q", 3)
    with closing(sqlite3.connect(store.backend.path)) as db, db:  # type: ignore[attr-defined]
        db.execute("UPDATE nodes SET depth = 7 WHERE id = ?", (bytes.fromhex(ids[2]),))
    assert any("depth" in f for f in store.fsck())
