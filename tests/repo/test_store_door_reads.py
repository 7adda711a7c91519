"""The reads Store gives the layers above it (web, CLI, importers, proxy, agent), on every
backend: each answers what the engine holds, and a missing node is the store's damage
(StoreCorruptError), never an engine's KeyError."""

from __future__ import annotations

import pytest

from sesstree import Store, StoreCorruptError
from sesstree.node import SESSIONS, TAGS, NodeId, session_ref, tag_ref
from sesstree.web.paths import PathCache

MISSING = NodeId("ab" * 32)


def _two_sessions(store: Store) -> tuple[NodeId, NodeId]:
    a = store.session("a")
    for i in range(5):
        a.add_message({"role": "user", "content": f"a{i}"})
    store.fork("b", "a~2")
    store.session("b").add_message({"role": "user", "content": "b"})
    store.tag("v1", "a~1")
    head_a, head_b = store.session_head("a"), store.session_head("b")
    assert head_a is not None and head_b is not None
    return head_a, head_b


def test_the_reads_answer_what_the_store_holds(store: Store) -> None:
    head_a, head_b = _two_sessions(store)
    v1 = store.resolve("v1")
    assert [r.name for r in store.refs()] == ["sessions/a", "sessions/b", "tags/v1"]
    assert [r.name for r in store.refs(SESSIONS)] == ["sessions/a", "sessions/b"]
    assert [r.target for r in store.refs(TAGS)] == [v1]
    ref = store.ref(session_ref("a"))
    assert ref is not None and ref.target == head_a
    assert store.ref(tag_ref("nope")) is None
    assert store.has([head_a, MISSING]) == {head_a}
    stored = store.get_node(head_b)
    assert stored is not None and stored.depth == 4 and stored.type == "user/message"
    assert store.get_node(MISSING) is None
    assert store.chain_at(head_a).ids == store.chain("a").ids
    assert store.chain_at(head_a, 2).ids == store.chain("a").ids[-2:]
    assert [r.name for r in store.refs_at([v1, head_b])] == ["sessions/b", "tags/v1"]
    assert [r.name for r in store.newest_refs(SESSIONS, 1)] == ["sessions/b"]
    assert store.count_nodes() == 6
    store.set_session_meta("b", {"k": 1})
    assert {n: m.fields for n, m in store.session_metas().items()} == {"b": {"k": 1}}
    times = store.reflog_times(session_ref("a"), [head_a, head_b])
    assert list(times) == [head_a]
    before = store.reflog_stamp()
    with store.snapshot():
        assert store.session_head("a") == head_a
    store.session("a").add_message({"role": "user", "content": "later"})
    assert store.reflog_stamp() != before
    links = store.links()
    keys = links.keys([head_a, head_b])
    assert set(links.ids(list(keys.values())).values()) == {head_a, head_b}


def test_a_missing_node_is_damage_not_a_key_error(store: Store) -> None:
    with pytest.raises(StoreCorruptError, match="damaged"):
        store.chain_at(MISSING)
    # What the web view's path cache reads goes through the same door.
    with pytest.raises(StoreCorruptError, match="damaged"):
        PathCache(store).path(MISSING)
