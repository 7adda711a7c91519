"""The engine contract, space: gc removes what nothing reaches, sizes, payloads stored once.

``collect_garbage`` (or a scale engine's ``sweep``) keeps every node a ref, a reflog entry or
this checkout's detached HEAD reaches, and nothing else; ``expire_reflog`` lets a session's
old moves go. An engine that measures its size (``Engine.measures_size``) stores a large
payload once however many sessions hold it, and compressed.
"""

from __future__ import annotations

import os

import msgspec
import pytest

from ...errors import UnknownRevisionError
from ...node import session_ref
from ...repo.store import Store
from ...store.base import RefUpdate
from .. import Engine, grow, user
from .objects import raw

__all__ = [
    "test_expiring_a_deleted_sessions_reflog_lets_gc_reclaim_it",
    "test_expiring_a_live_sessions_reflog_keeps_it",
    "test_gc_removes_only_unreachable",
    "test_large_payload_stored_once",
    "test_large_payloads_are_compressed",
    "test_stats_logical_vs_physical",
]


def test_gc_removes_only_unreachable(store: Store) -> None:
    ids = grow(store, "q", 5)
    q = store.session("q")
    q.rewind(2)  # the two rewound nodes stay alive through the reflog
    store.tag("t", ids[1])
    store.fork("gone", "q")
    grow(store, "gone", 2, tag="g")
    store.delete_session("gone")  # its nodes stay alive through the reflog
    junk_root = raw(None, "user/message", user("junk"))
    junk = [junk_root, raw(junk_root.id, "user/message", user("junk2"))]
    store.backend.commit(junk, [])
    detached = raw(ids[0], "usage", {"detached": True})
    store.backend.commit([detached], [])
    store.checkout(detached.id)  # a detached HEAD keeps its node alive
    total = store.backend.count_nodes()
    dry = store.gc(dry_run=True)
    assert sorted(dry.unreachable) == sorted(n.id for n in junk)
    assert dry.removed == 0 and store.backend.count_nodes() == total
    result = store.gc()
    assert result.removed == 2 and result.kept == total - 2
    assert store.backend.has([n.id for n in junk]) == set()
    assert store.backend.count_nodes() == total - 2
    assert store.gc().removed == 0
    assert store.fsck() == []
    assert store.reset("q", ids[-1]) == ids[-1]
    assert [e.id for e in store.session("q").events()] == ids


def test_expiring_a_deleted_sessions_reflog_lets_gc_reclaim_it(store: Store) -> None:
    grow(store, "keep", 2)
    gone = store.session("gone")
    gone.add_message(user("only here"))
    gone.add_message(user("and here"))
    store.delete_session("gone")
    assert store.gc().removed == 0  # the reflog still reaches its nodes: undo stays possible
    assert store.expire_reflog("gone") == 2  # the run of appends, the delete
    assert store.reflog("gone") == []
    assert store.gc().removed == 2
    assert len(store.session("keep").messages()) == 2
    assert store.fsck() == []


def test_expiring_a_live_sessions_reflog_keeps_it(store: Store) -> None:
    q = store.session("q")
    for i in range(3):
        q.add_message(user(str(i)))
    q.rewind(2)  # the two rewound events are reachable only through the reflog now
    assert store.expire_reflog("q") == 1  # the run of appends (the rewind is its value)
    assert len(store.reflog("q")) == 1
    assert store.session("q").messages() == [user("0")]
    assert store.gc().removed == 2
    with pytest.raises(UnknownRevisionError):
        store.expire_reflog("never")
    assert store.fsck() == []


def test_stats_logical_vs_physical(store: Store, engine: Engine) -> None:
    messages = [user(f"message number {i} " + "x" * 50) for i in range(20)]
    q = store.session("q")
    for m in messages:
        q.add_message(m)
    line_bytes = sum(len(msgspec.json.encode(m)) + 1 for m in messages)
    one = store.stats()
    # (One handle's appends are one run, one reflog entry.)
    assert (one.nodes, one.sessions, one.tags, one.reflog_entries) == (20, 1, 0, 1)
    assert one.logical_bytes == line_bytes
    for k in range(3):
        store.fork(f"f{k}", "q")
    store.tag("t", "q~3")
    four = store.stats()
    assert four.nodes == 20 and four.sessions == 4 and four.tags == 1
    assert four.logical_bytes == 4 * line_bytes
    if not engine.measures_size:
        assert four.physical_bytes == 0 and four.ratio == 0
    else:
        assert four.physical_bytes > 0
        assert four.ratio == four.logical_bytes / four.physical_bytes


def test_large_payload_stored_once(store: Store, engine: Engine) -> None:
    if not engine.measures_size:
        pytest.skip(f"the {engine.name} engine has no physical size to measure")
    # 200 KB of hex text: it compresses only to about half, so what it takes on disk shows.
    payload = os.urandom(100 * 1024).hex()
    result = {"role": "tool", "tool_call_id": "c1", "content": payload}
    grow(store, "a", 1)
    grow(store, "b", 1)
    base = store.stats().physical_bytes
    store.session("a").add_message(result)
    one = store.stats().physical_bytes
    store.session("b").add_message(result)
    two = store.stats().physical_bytes
    first, second = one - base, two - one
    assert first >= 100 * 1024
    assert second < first / 10, (first, second)
    assert store.messages("a")[-1] == result == store.messages("b")[-1]
    # the shared payload survives the removal of one of its nodes
    a_head = store.session_head("a")
    store.backend.commit([], [RefUpdate(session_ref("a"), a_head, None, "t")])
    store.expire_reflog("a")
    assert store.gc().removed == 2
    assert store.messages("b")[-1] == result
    assert store.fsck() == []


def test_large_payloads_are_compressed(store: Store, engine: Engine) -> None:
    """A large, repetitive tool result (a file read, a log) takes a fraction of its size."""
    if not engine.measures_size:
        pytest.skip(f"the {engine.name} engine has no physical size to measure")
    text = "".join(f"line {i}: the cave opens at dusk; bring the key\n" for i in range(5000))
    result = {"role": "tool", "tool_call_id": "c1", "content": text}
    grow(store, "a", 1)
    # The first large payload of a store may also create pages once (a PostgreSQL TOAST
    # table, its index and free-space map, about 60 KB): measure a later one.
    store.session("a").add_message({"role": "tool", "tool_call_id": "c0", "content": text[1:]})
    base = store.stats().physical_bytes
    store.session("a").add_message(result)
    grown = store.stats().physical_bytes - base
    assert len(text) > 200_000
    assert grown < len(text) / 4, grown
    assert store.messages("a")[-1] == result
    assert store.show("a").data == result
    assert store.fsck() == []
