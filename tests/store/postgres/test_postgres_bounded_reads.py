"""On PostgreSQL too, gc, fsck and the ref labels read what they need and no more: the SQL
each one sends is recorded (a wrapper around the connection's ``execute``) and checked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from core_testkit import user

from sesstree import Store, make_node, open_store
from sesstree.repo.maintenance import fsck, gc
from sesstree.store.postgres.schema import FORMAT_VERSION


@contextmanager
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    seen: list[str] = []
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        seen.append(str(query))
        return original(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    try:
        yield seen
    finally:
        monkeypatch.setattr(psycopg.Connection, "execute", original)


def junk(store: Store, n: int) -> list[str]:
    nodes, parent = [], None
    for i in range(n):
        node = make_node(parent, "user/message", user(f"junk {i} " + "y" * (1500 if i % 3 else 1)))
        nodes.append(node)
        parent = node.id
    store.write(nodes)
    return [x.id for x in nodes]


def test_gc_reads_no_payload_and_removes_in_slices(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(postgres_url) as store:
        s = store.session("main")
        for i in range(5):
            s.add_message(user(f"kept {i} " + "z" * 1500))
        dead = junk(store, 1200)
        with recorded(monkeypatch) as sql:
            result = gc(store, progress=lambda d, t: None)
        assert sorted(result.unreachable) == sorted(dead) and result.removed == 1200
        assert not [q for q in sql if ".data" in q or "data," in q]
        assert sum("DELETE FROM nodes" in q for q in sql) == 3  # chunks of 500
        assert store.backend.has(dead) == set()
        assert [m["content"][:6] for m in store.messages("main")] == ["kept 0", "kept 1", "kept 2",
                                                                      "kept 3", "kept 4"]
        assert store.fsck() == []


def test_fsck_streams_in_slices_and_finds_damage(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sesstree.store.postgres import scans as postgres_scan

    monkeypatch.setattr(postgres_scan, "SLICE", 7)
    with open_store(postgres_url) as store:
        s = store.session("main")
        ids = [s.add_message(user(f"m{i}")).id for i in range(30)]
        seen: list[tuple[int, int]] = []
        with recorded(monkeypatch) as sql:
            assert fsck(store, progress=lambda d, t: seen.append((d, t))) == []
        reads = [q for q in sql if "n.pack IS NULL ORDER BY n.seq LIMIT" in q]
        assert len(reads) == 6  # 30 rows, 7 a slice (5 reads), and the empty read that ends it
        # (Then the text index's check: its slices are its own, one here.)
        assert len(seen) == 5 + 1 and seen[4][0] == seen[4][1] == 30
        db = store.backend._db  # type: ignore[attr-defined]
        db.execute("UPDATE nodes SET data = data || '\\x00'::bytea WHERE id = %s",
                   (bytes.fromhex(ids[20]),))
        assert f"node {ids[20][:12]} does not hash to its id (content damaged)" in fsck(store)


def test_labels_look_up_the_refs_at_the_nodes_only(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sesstree.cli.reading import _ref_labels

    with open_store(postgres_url) as store:
        for k in range(30):
            store.session(f"s{k}").add_message(user(f"m{k}"))
        head = store.session_head("s7")
        assert head is not None
        with recorded(monkeypatch) as sql:
            assert _ref_labels(store, [head]) == {head: ["s7"]}
        assert not [q for q in sql if "FROM refs r JOIN nodes n ON n.seq = r.target WHERE left" in q]


def test_an_older_store_gets_the_new_index_on_open(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        store.session("a").add_message(user("x"))
        db = store.backend._db  # type: ignore[attr-defined]
        db.execute("DROP INDEX reflog_new")
        # Format 2: the step to format 3 adds the index.
        db.execute("UPDATE meta SET value = %s WHERE key = 'format'", ("2",))
    with open_store(postgres_url) as store:
        db = store.backend._db  # type: ignore[attr-defined]
        assert db.execute("SELECT to_regclass('reflog_new') IS NOT NULL").fetchone() == (True,)
        assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == (
            str(FORMAT_VERSION),)
        assert [m["content"] for m in store.messages("a")] == ["x"]
