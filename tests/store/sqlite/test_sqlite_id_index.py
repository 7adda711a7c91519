"""Format 6's id index (``nodes_key``, on the ids' first 6 bytes): lookups confirm the whole
id, so ids that share their first bytes are told apart; a node put twice is stored once; a
node stored twice (damage: no unique index refuses it) is reported by fsck; a store upgraded
from format 5 keeps its unique index and reads the same."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from sesstree import open_store
from sesstree.node import NodeId
from sesstree.testing import grow, user


def indexes(folder: Path) -> set[str]:
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def test_ids_that_share_their_first_bytes_are_told_apart(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        ids = grow(store, "q", 300)  # packed, and a loose tail
    assert "nodes_key" in indexes(folder) and "sqlite_autoindex_nodes_1" not in indexes(folder)
    near = [bytes.fromhex(i)[:6] + bytes(26) for i in (ids[0], ids[-1])]
    with closing(sqlite3.connect(folder / "store.db")) as db:  # rows whose ids share a prefix
        for key in near:
            db.execute("INSERT INTO nodes(id, parent, depth, data) VALUES (?, NULL, 1, x'')",
                       (key,))
        db.commit()
    with open_store(folder, create=False) as store:
        for i in (ids[0], ids[150], ids[-1]):
            node = store.backend.get(NodeId(i))
            assert node is not None and node.id == i
        assert store.backend.has([NodeId(i) for i in ids]) == set(ids)
        other = NodeId((bytes.fromhex(ids[0])[:6] + b"\x01" * 26).hex())
        assert store.backend.has([other]) == set() and store.backend.get(other) is None
        assert sorted(store.backend.resolve_prefix(ids[0][:12], 5)) == sorted(
            [ids[0], near[0].hex()])
        assert store.messages("q") == [user(f"q-{i}") for i in range(300)]
        store.session("q").add_message(user("more"))


def test_a_node_put_twice_is_stored_once_and_a_double_is_found(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        ids = grow(store, "q", 3)
        store.fork("w", "q~1")
        again = store.session("w").add_message(user("q-2"))  # the same node again
        assert again.id == ids[2] and store.backend.count_nodes() == 3
        assert store.fsck() == []
    with closing(sqlite3.connect(folder / "store.db")) as db:
        db.execute("INSERT INTO nodes(id, parent, depth, data) SELECT id, parent, depth, data "
                   "FROM nodes WHERE seq = 2")
        db.commit()
    with open_store(folder, create=False) as store:
        assert any("node stored twice" in f and ids[1][:12] in f for f in store.fsck())
