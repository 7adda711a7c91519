"""Sync and the server use a store only through :class:`~sesstree.Store`'s methods, and the
repository layer never calls up into sync: the structure that keeps the layers apart."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import httpx
import msgspec
import pytest
from sync_kit import grow, served

import sesstree
from sesstree import RemoteError, Store, open_store, sync
from sesstree.node import NodeId
from sesstree.sync.http import MSGPACK, HttpPeer
from sesstree.sync.peer import LocalPeer

SRC = Path(sesstree.__file__).parent


def _modules(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


def test_sync_and_server_read_no_backend_of_a_store() -> None:
    reads = [f"{path.relative_to(SRC)}:{node.lineno}"
             for package in ("sync", "server") for path in _modules(package)
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "backend"]
    assert reads == []


def test_the_repository_layer_imports_nothing_of_sync() -> None:
    """Not even lazily, inside a function: that too is an import edge up the layers."""
    found = []
    for path in _modules("repo"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [f"{'.' * node.level}{node.module or ''}"]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names
                      if n.startswith(("..sync", "sesstree.sync"))]
    assert found == []


def test_sync_is_functions_that_take_a_store() -> None:
    for verb in ("push", "fetch", "pull"):
        assert not hasattr(Store, verb)
        assert callable(getattr(sync, verb))


# -- what a peer is told of ids this store lacks -------------------------------------------------

LACKED = NodeId("cd" * 32)


def _served_store(tmp_path: Path) -> tuple[Store, NodeId]:
    store = open_store(tmp_path / "served")
    return store, grow(store, "main", 3)


def test_a_peer_asking_for_ids_this_store_lacks_over_http_is_told_not_here(
        tmp_path: Path) -> None:
    """The door's ``get_node``/``chain_if_stored`` answer None for an id from outside: over
    HTTP that is an empty /has, a walk of depth 0 and a 400 naming the id, never a 500."""
    store, head = _served_store(tmp_path)
    with store, served(store) as url:
        peer = HttpPeer(url)
        try:
            assert peer.has([LACKED, head]) == {head}
            walk = peer.walk([(LACKED, 10), (head, 10)])
            assert (walk[0].depth, walk[0].ids, walk[0].base) == (0, [], None)
            assert walk[1].depth == 3 and walk[1].ids[0] == head
            with pytest.raises(RemoteError, match=f"node {LACKED[:12]} is not stored"):
                peer.nodes([(LACKED, 1)])
        finally:
            peer.close()
        reply = httpx.post(url + "/api/v1/nodes", headers={"Content-Type": MSGPACK},
                           content=msgspec.msgpack.encode({"chains": [[bytes.fromhex(LACKED),
                                                                       1]]}))
        assert reply.status_code == 400
        assert reply.json()["error"] == f"node {LACKED[:12]} is not stored"


def test_a_local_peer_asking_for_ids_this_store_lacks_is_told_not_here(tmp_path: Path) -> None:
    store, head = _served_store(tmp_path)
    peer = LocalPeer(store, "served")
    try:
        assert peer.has([LACKED, head]) == {head}
        assert [w.depth for w in peer.walk([(LACKED, 5), (head, 5)])] == [0, 3]
        with pytest.raises(RemoteError, match=f"node {LACKED[:12]} is not stored"):
            peer.nodes([(LACKED, 1)])
    finally:
        peer.close()


def test_a_damaged_served_store_says_so_in_one_line(tmp_path: Path) -> None:
    """A node the store holds whose ancestor is lost (damage, not an id it lacks): /walk and
    /nodes from it are a 500 whose one line says the store cannot be used, not a crash."""
    store, head = _served_store(tmp_path)
    middle = store.chain("main").ids[1]
    with sqlite3.connect(tmp_path / "served" / "store.db") as db:
        db.execute("DELETE FROM nodes WHERE id = ?", (bytes.fromhex(middle),))
    db.close()
    with store, served(store) as url:
        asked = {"chains": [[bytes.fromhex(head), 3]], "starts": [[bytes.fromhex(head), 3]]}
        for route in ("walk", "nodes"):
            reply = httpx.post(f"{url}/api/v1/{route}", content=msgspec.msgpack.encode(asked),
                               headers={"Content-Type": MSGPACK})
            error = reply.json()["error"]
            assert reply.status_code == 500, (route, error)
            assert error.startswith("the store cannot be used: ") and "\n" not in error, error
