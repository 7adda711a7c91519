"""The engine contract, objects: idempotent puts, reads by id, paths, prefixes, damage found.

What :class:`~sesstree.store.base.ObjectStore` promises, checked at the seam
(``store.backend``); sessions are grown through the store only to have nodes to read.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from ...errors import MissingNodeError
from ...node import Node, NodeId, make_node
from ...repo.store import Store, raw_node
from ...store.base import RawNode
from .. import Engine, assistant, colliding_nodes, grow, user

__all__ = [
    "test_chain_full_and_limited",
    "test_fsck_finds_damaged_content",
    "test_interleaved_sessions_chain_correctness",
    "test_missing_parent_refused_nothing_written",
    "test_put_is_idempotent",
    "test_resolve_prefix",
    "test_resolve_prefix_gives_every_id_that_shares_it",
    "test_store_write_idempotent_and_checks_ids",
]


def raw(parent: str | None, type_: str, data: Any) -> RawNode:
    """A node ready for a backend."""
    return raw_node(make_node(NodeId(parent) if parent is not None else None, type_, data))


def walk(store: Store, head: str) -> list[str]:
    """The path to ``head`` by following parents one get() at a time (the slow truth)."""
    out: list[str] = []
    cur: str | None = head
    while cur is not None:
        node = store.backend.get(NodeId(cur))
        assert node is not None, f"missing node {cur}"
        out.append(node.id)
        cur = node.parent
    out.reverse()
    return out


def test_put_is_idempotent(store: Store) -> None:
    a = raw(None, "user/message", user("a"))
    b = raw(a.id, "assistant/message", assistant("b"))
    store.backend.commit([a, b], [])
    store.backend.commit([a, b], [])
    store.backend.commit([b], [])
    assert store.backend.count_nodes() == 2
    assert store.backend.has([a.id, b.id, "0" * 64]) == {a.id, b.id}  # type: ignore[list-item]
    got = store.backend.get(b.id)
    assert got is not None
    assert (got.id, got.parent, got.depth, got.type) == (b.id, a.id, 2, "assistant/message")
    assert msgspec.msgpack.decode(got.encoded) == assistant("b")
    assert store.backend.get("f" * 64) is None  # type: ignore[arg-type]


def test_store_write_idempotent_and_checks_ids(store: Store) -> None:
    a = make_node(None, "user/message", user("a"))
    store.write([a])
    store.write([a])
    assert store.backend.count_nodes() == 1
    forged = Node(a.id, None, "user/message", user("not a"))
    with pytest.raises(Exception, match="does not hash"):
        store.write([forged])
    assert store.show(a.id).data == user("a")


def test_missing_parent_refused_nothing_written(store: Store) -> None:
    a = raw(None, "user/message", user("a"))
    orphan = raw("ab" * 32, "user/message", user("o"))
    # Not a ConflictError: that one tells the caller to retry, which never helps here.
    with pytest.raises(MissingNodeError, match="parent abababababab"):
        store.backend.commit([a, orphan], [])
    assert store.backend.count_nodes() == 0


def test_chain_full_and_limited(store: Store) -> None:
    ids = grow(store, "q", 10)
    full = store.backend.chain(ids[-1])  # type: ignore[arg-type]
    assert full.ids == ids
    assert full.types == ["user/message"] * 10
    assert full.datas == [user(f"q-{i}") for i in range(10)]
    assert full.start_depth == 1
    assert full.base is None
    part = store.backend.chain(ids[-1], limit=3)  # type: ignore[arg-type]
    assert part.ids == ids[-3:]
    assert part.datas == [user(f"q-{i}") for i in range(7, 10)]
    assert part.start_depth == 8
    assert part.base == ids[-4]
    mid = store.backend.chain(ids[4], limit=100)  # type: ignore[arg-type]
    assert mid.ids == ids[:5]
    assert mid.start_depth == 1 and mid.base is None
    one = store.backend.chain(ids[0], limit=1)  # type: ignore[arg-type]
    assert one.ids == ids[:1] and one.base is None and one.start_depth == 1
    assert store.backend.chain(ids[-1], limit=0).ids == []  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        store.backend.chain("ee" * 32)  # type: ignore[arg-type]


def test_interleaved_sessions_chain_correctness(store: Store) -> None:
    """Sessions written alternately, forks from old points and gc'd gaps: chains stay exact.

    On SQLite this walks the range-scan path with other sessions' rows in between.
    """
    rng = random.Random(7)
    a, b = store.session("A"), store.session("B")
    expected: dict[str, list[str]] = {"A": [], "B": []}
    for i in range(60):
        for name, s in (("A", a), ("B", b)):
            expected[name].append(s.add_message(user(f"{name}{i}")).id)
        if i % 7 == 3:
            # Unreachable junk between the sessions' rows; gc removes it, leaving gaps.
            junk = raw(None, "user/message", user(f"junk{i}"))
            store.backend.commit([junk, raw(junk.id, "usage", {"i": i})], [])
    assert store.gc().removed == 2 * len([i for i in range(60) if i % 7 == 3])
    forks = {}
    for k in range(5):
        src = rng.choice(["A", "B"])
        back = rng.randrange(1, 50)
        name = f"F{k}"
        store.fork(name, f"{src}~{back}")
        forks[name] = expected[src][: len(expected[src]) - back]
    for round_ in range(10):
        for name in forks:
            s = store.session(name)
            forks[name].append(s.add_message(user(f"{name}-{round_}")).id)
        expected["A"].append(a.add_message(user(f"A-late{round_}")).id)
    expected.update(forks)
    for name, ids in expected.items():
        head = ids[-1]
        assert store.backend.chain(head).ids == ids, name  # type: ignore[arg-type]
        assert walk(store, head) == ids
        assert store.session(name).events()[-1].id == head
        for limit in (1, 5, 33, len(ids) - 1):
            assert store.backend.chain(head, limit=limit).ids == ids[-limit:]  # type: ignore[arg-type]
    assert store.fsck() == []


def test_resolve_prefix(store: Store) -> None:
    ids = grow(store, "q", 20)
    target = ids[11]
    for n in (4, 5, 9, 64):
        assert target in store.backend.resolve_prefix(target[:n], limit=50)
        assert all(i.startswith(target[:n]) for i in store.backend.resolve_prefix(target[:n]))
    assert store.backend.resolve_prefix(target, limit=5) == [target]
    assert len(store.backend.resolve_prefix("", limit=100)) == 20
    assert len(store.backend.resolve_prefix("", limit=3)) == 3
    absent = next(p for p in (f"{i:04x}" for i in range(65536)) if not any(
        x.startswith(p) for x in ids))
    assert store.backend.resolve_prefix(absent) == []


def test_resolve_prefix_gives_every_id_that_shares_it(store: Store) -> None:
    # What the store's AmbiguousPrefixError rests on (the repo suite's test_ambiguous_prefix).
    a, b = colliding_nodes()
    store.write([a, b])
    assert sorted(store.backend.resolve_prefix(a.id[:4], limit=5)) == sorted([a.id, b.id])


def test_fsck_finds_damaged_content(store: Store, engine: Engine) -> None:
    assert engine.damage_node is not None, "the engine contract needs Engine.damage_node"
    ids = grow(store, "q", 3)
    engine.damage_node(store, NodeId(ids[1]))
    faults = store.fsck()
    assert any(ids[1][:12] in f and "hash" in f for f in faults), faults
