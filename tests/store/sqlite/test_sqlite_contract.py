"""The engine contract on the SQLite engine, and what only that engine has."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import msgspec
import pytest

from sesstree import Store, StoreError, make_node, open_store
from sesstree.node import NodeId
from sesstree.store.base import SearchQuery
from sesstree.store.textmatch import node_text, tokens
from sesstree.testing import Engine, grow, user
from sesstree.testing.contract import *  # noqa: F403 - the contract's tests and fixtures


def damage(store: Store, id: NodeId) -> None:
    """Another payload for loose node ``id``: format 5 keeps it in ``loose`` (its ``nodes`` row
    is only the index)."""
    with closing(sqlite3.connect(store.backend.path)) as db, db:  # type: ignore[attr-defined]
        done = db.execute(
            "UPDATE loose SET data = ? WHERE seq = (SELECT seq FROM nodes WHERE id = ?)",
            (msgspec.msgpack.encode(user("evil")), bytes.fromhex(id)))
        assert done.rowcount == 1, f"node {id[:12]} is not loose"


def damage_index(store: Store, id: NodeId, missing: bool) -> None:
    """The text index entry of ``id`` removed, or given one token more than its text has."""
    store.backend.search_nodes(SearchQuery("x"), 1)  # type: ignore[attr-defined] - caught up
    node = store.backend.get(id)
    assert node is not None
    words = " ".join(tokens(node_text(node.type, msgspec.msgpack.decode(node.encoded))))
    with closing(sqlite3.connect(store.backend.path)) as db, db:  # type: ignore[attr-defined]
        seq = db.execute("SELECT seq FROM nodes WHERE id = ?", (bytes.fromhex(id),)).fetchone()[0]
        db.execute("INSERT INTO search_words(search_words, rowid, t) VALUES ('delete', ?, ?)",
                   (seq, words))
        if not missing:
            db.execute("INSERT INTO search_words(rowid, t) VALUES (?, ?)", (seq, words + " damage"))


def damage_pack(store: Store) -> None:
    """One byte of the oldest pack's stored bytes flipped (its checksum left as it was)."""
    with closing(sqlite3.connect(store.backend.path)) as db, db:  # type: ignore[attr-defined]
        pid, data = db.execute("SELECT pid, data FROM packs ORDER BY pid LIMIT 1").fetchone()
        changed = bytearray(data)
        changed[len(changed) // 2] ^= 0x10
        db.execute("UPDATE packs SET data = ? WHERE pid = ?", (bytes(changed), pid))


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine("sqlite", open=lambda: open_store(tmp_path / "s"), damage_node=damage,
                  damage_pack=damage_pack, damage_index=damage_index)


def test_fsck_finds_wrong_depth_index(store: Store) -> None:
    ids = grow(store, "q", 3)
    with closing(sqlite3.connect(store.backend.path)) as db, db:  # type: ignore[attr-defined]
        db.execute("UPDATE nodes SET depth = 7 WHERE id = ?", (bytes.fromhex(ids[2]),))
    assert any("depth" in f for f in store.fsck())


def test_a_store_whose_reflog_predates_started_folds_without_it(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        grow(store, "q", 1)
    with closing(sqlite3.connect(tmp_path / "s" / "store.db")) as db, db:
        db.execute("ALTER TABLE reflog DROP COLUMN started")  # as stores made before it
    with open_store(tmp_path / "s") as store:
        q = store.session("q")
        with q.log_group("run: turn"):
            q.add_message(user("a"))
            q.add_message(user("b"))  # the one-statement fold
        with store.batch():
            q.add_message(user("c"))
            q.add_message(user("d"))  # the fold kept back until the batch commits
        log = store.reflog("q")
        assert [(e.reason, e.started) for e in log] == [
            ("append: user/message", None), ("run: turn (2 moves)", None),
            ("append: user/message (batch of 2 moves)", None)]
        assert [m["content"] for m in q.messages()][-4:] == ["a", "b", "c", "d"]
        assert store.fsck() == []


def test_a_connection_that_only_reads_prepares_no_writes(tmp_path: Path) -> None:
    """Loading, listing and the log compile none of the statements appends run and make no
    lock files: those are the first write's to make (then a write works as ever)."""
    with open_store(tmp_path / "s") as store:
        grow(store, "q", 3)
    for name in ("store.db.lock", "store.db.turn"):
        (tmp_path / "s" / name).unlink()
    with open_store(tmp_path / "s") as store:
        assert len(store.messages("q")) == 3 and store.sessions() and store.log("q")
        db = store.backend._db  # type: ignore[attr-defined]
        assert db.execute("SELECT count(*) FROM sqlite_temp_master").fetchone()[0] == 0
        assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
            "store.db", "store.db-shm", "store.db-wal"]
        store.session("q").add_message(user("written"))
        assert db.execute("SELECT count(*) FROM sqlite_temp_master").fetchone()[0] > 0
        assert (tmp_path / "s" / "store.db.lock").exists()
    with open_store(tmp_path / "s") as store:
        assert store.messages("q")[-1] == user("written")


def test_appends_work_after_a_rollback_took_their_statements(tmp_path: Path) -> None:
    """A first write inside a snapshot makes the append statements in its transaction; a
    failed write there rolls that transaction back, and the statements with it: the next
    append makes them again instead of failing on a missing view. (The backend's snapshot:
    the store's own refuses writes before they reach the engine.)"""
    with open_store(tmp_path / "s") as store:
        q = store.session("q")
        with store.backend.snapshot():
            q.add_message(user("in a snapshot"))
            a = make_node(None, "user/message", user("a"))
            with pytest.raises(StoreError):  # (no transaction can start inside one)
                store.write([a, make_node(a.id, "user/message", user("b"))])
        q.refresh()
        q.add_message(user("after"))
        assert store.messages("q")[-1] == user("after")
