"""``Store`` is the one door above the storage seam: the reads sync, the server and the
session handle need, and what each says when the store is damaged.

Damage is made in a real SQLite file (a row deleted through SQLite), so the error is the one
a user would meet; a node a ref reaches is gone only through damage (gc never removes one).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sesstree import StoreCorruptError, open_store
from sesstree.node import NodeId, session_ref, tag_ref
from sesstree.store.base import RawNode


def _session(folder: Path) -> list[NodeId]:
    """Session ``q`` of three messages in the store at ``folder``; its ids, oldest first."""
    with open_store(folder) as store:
        q = store.session("q")
        for text in ("one", "two", "three"):
            q.add_message({"role": "user", "content": text})
        return [n.id for n in reversed(store.log("q"))]


def _remove_node(folder: Path, node: NodeId) -> None:
    db = sqlite3.connect(folder / "store.db")
    with db:
        assert db.execute("DELETE FROM nodes WHERE id = ?", (bytes.fromhex(node),)).rowcount == 1
    db.close()


def test_damage_under_an_open_handle_makes_messages_raise_store_corrupt(tmp_path: Path) -> None:
    ids = _session(tmp_path)
    with open_store(tmp_path) as store:
        q = store.session("q")  # reads where the ref points, not the events yet
        _remove_node(tmp_path, ids[2])  # the node the ref reached, lost under the handle
        with pytest.raises(StoreCorruptError, match=f"node {ids[2][:12]} .*damaged"):
            q.messages()
        with pytest.raises(StoreCorruptError, match=ids[2][:12]):
            store.chain_at(ids[2])


def test_a_lost_ancestor_makes_messages_raise_store_corrupt(tmp_path: Path) -> None:
    ids = _session(tmp_path)
    _remove_node(tmp_path, ids[1])  # the middle one: the ref still names the head
    with open_store(tmp_path) as store:
        with pytest.raises(StoreCorruptError, match="damaged"):
            store.session("q").messages()


def test_a_lost_node_is_store_corrupt_through_node_but_none_through_get_node(
        tmp_path: Path) -> None:
    ids = _session(tmp_path)
    _remove_node(tmp_path, ids[1])
    with open_store(tmp_path) as store:
        assert store.target(session_ref("q")) == ids[2]
        assert store.get_node(ids[1]) is None
        with pytest.raises(StoreCorruptError, match=ids[1][:12]):
            store.node(ids[1])
        # An id a peer asks for and this store never had: an answer, not an error.
        assert store.chain_if_stored(NodeId("f" * 64)) is None


def test_the_door_reads_what_the_backend_holds(tmp_path: Path) -> None:
    ids = _session(tmp_path)
    with open_store(tmp_path) as store:
        store.tag("v1", "q~1")
        assert store.has([ids[0], NodeId("f" * 64)]) == {ids[0]}
        assert store.has([]) == set()
        assert store.node(ids[2]).depth == 3
        assert store.chain_at(ids[2], 2).ids == ids[1:]
        chain = store.chain_if_stored(ids[1])
        assert chain is not None and chain.ids == ids[:2]
        assert store.target(tag_ref("v1")) == ids[1]
        assert store.target(tag_ref("nosuch")) is None
        assert [(r.name, r.target) for r in store.refs("")] == [
            (session_ref("q"), ids[2]), (tag_ref("v1"), ids[1])]
        assert store.location == tmp_path / "store.db"
        with store.snapshot():
            assert store.target(session_ref("q")) == ids[2]
    with open_store(":memory:") as memory:
        assert memory.location is None


def test_put_nodes_stores_raw_nodes_and_moves_no_ref(tmp_path: Path) -> None:
    ids = _session(tmp_path / "a")
    with open_store(tmp_path / "a") as a, open_store(tmp_path / "b") as b:
        raw = [RawNode(n.id, n.parent, n.type, n.encoded) for n in
               (a.node(i) for i in ids)]
        b.put_nodes(raw)
        b.put_nodes(raw)  # idempotent
        assert b.has(ids) == set(ids)
        assert b.refs("") == []
        assert b.chain_at(ids[2]).datas == a.chain_at(ids[2]).datas
