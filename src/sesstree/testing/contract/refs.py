"""The engine contract, refs: compare-and-set on create, move and delete, the reflog, settings.

What :class:`~sesstree.store.base.RefStore` and ``Backend.commit`` promise: a ref moves only
from where the caller saw it, a lost compare-and-set writes nothing, every move is logged,
and what is kept beside the refs (session metadata, HEAD) survives reopening. Where a test
moves refs through a session handle, it is to check what the engine did underneath.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ...errors import ConflictError, MissingNodeError, ReadViewWriteError
from ...node import make_node, session_ref
from ...repo.store import Store
from ...store.base import RefUpdate, WatchMark
from .. import Engine, grow, user
from .objects import raw

__all__ = [
    "test_a_read_view_refuses_every_write",
    "test_a_stale_handle_on_a_removed_head_conflicts_then_rebases",
    "test_cas_conflict_leaves_nothing_written",
    "test_cas_on_creation",
    "test_multi_update_commit_is_atomic",
    "test_ref_to_missing_node_refused",
    "test_reflog_records_every_move",
    "test_reopen_sees_everything",
    "test_session_metadata",
    "test_the_whole_reflog_is_in_time_order",
    "test_watch_marks_compare_and_set",
]


def test_ref_to_missing_node_refused(store: Store) -> None:
    with pytest.raises(MissingNodeError, match="not stored"):
        store.backend.commit([], [RefUpdate(session_ref("x"), None, "cd" * 32, "t")])  # type: ignore[arg-type]
    assert store.backend.list_refs("") == []
    assert store.backend.reflog() == []


def test_a_stale_handle_on_a_removed_head_conflicts_then_rebases(store: Store) -> None:
    # The head a handle remembers was rewound away and collected: that is a lost
    # compare-and-set (retrying on the new head works), not a missing node.
    q = store.session("q")
    for text in ("a", "b", "c"):
        q.add_message(user(text))
    stale = store.session("q")
    q.rewind(1)
    store.expire_reflog("q")
    assert store.gc().unreachable
    with pytest.raises(ConflictError):
        stale.add_message(user("d"))
    stale.add_message(user("d"), rebase=True)
    assert [m["content"] for m in store.messages("q")] == ["a", "b", "d"]


def test_cas_conflict_leaves_nothing_written(store: Store) -> None:
    grow(store, "q", 2)
    h1, h2 = store.session("q"), store.session("q")
    h1.add_message(user("winner"))
    nodes, log = store.backend.count_nodes(), len(store.reflog())
    loser = make_node(h2.head, "user/message", user("loser"))
    with pytest.raises(ConflictError):
        h2.add_message(user("loser"))
    assert store.backend.count_nodes() == nodes
    assert store.backend.has([loser.id]) == set()
    assert len(store.reflog()) == log
    assert store.session("q").messages()[-1] == user("winner")
    # the documented retries
    h2.refresh()
    h2.add_message(user("after refresh"))
    h1.append("user/message", user("rebased"), rebase=True)
    assert [m["content"] for m in store.messages("q")][-3:] == [
        "winner", "after refresh", "rebased"]
    assert store.fsck() == []


def test_cas_on_creation(store: Store) -> None:
    a = raw(None, "user/message", user("a"))
    store.backend.commit([a], [RefUpdate(session_ref("x"), None, a.id, "create")])
    with pytest.raises(ConflictError):
        store.backend.commit([], [RefUpdate(session_ref("x"), None, a.id, "create again")])
    with pytest.raises(ConflictError):
        store.backend.commit([], [RefUpdate(session_ref("y"), a.id, None, "delete absent")])
    assert len(store.reflog()) == 1


def test_multi_update_commit_is_atomic(store: Store) -> None:
    a = raw(None, "user/message", user("a"))
    b = raw(a.id, "user/message", user("b"))
    store.backend.commit([a], [RefUpdate(session_ref("x"), None, a.id, "c")])
    with pytest.raises(ConflictError):
        store.backend.commit(
            [b],
            [RefUpdate(session_ref("y"), None, b.id, "ok"),
             RefUpdate(session_ref("x"), b.id, a.id, "stale")],
        )
    assert store.backend.get_ref(session_ref("y")) is None
    assert store.backend.has([b.id]) == set()
    assert len(store.reflog()) == 1


def test_reflog_records_every_move(store: Store) -> None:
    ids = grow(store, "q", 3)
    store.fork("w", "q~1")
    q = store.session("q")
    q.rewind(2)
    store.reset("q", ids[-1])
    store.rename_session("w", "west")
    store.delete_session("west")
    log = store.reflog("q")
    # The handle's three appends are one run, logged as one entry (see repo/policy.py).
    assert [(e.old, e.new) for e in log] == [
        (None, ids[2]), (ids[2], ids[0]), (ids[0], ids[2]),
    ]
    assert all(e.reason for e in log)
    assert log[0].reason == "append (3 moves)"
    assert "rewind" in log[1].reason and "reset" in log[2].reason
    times = [e.time for e in store.reflog()]
    assert times == sorted(times)
    west = store.reflog("west")
    # created, then renamed (backends log the rename as one or two entries), then deleted
    assert (west[0].old, west[0].new) == (None, ids[1])
    assert all("renamed" in e.reason for e in west[1:-1]) and len(west) in (3, 4)
    assert (west[-1].old, west[-1].new) == (ids[1], None)
    assert "deleted" in west[-1].reason
    assert store.reflog("w") == []
    whole = store.reflog()
    assert {e.ref for e in whole} == {session_ref("q"), session_ref("west")}


def test_session_metadata(store: Store) -> None:
    assert store.get_session_meta("q") is None
    meta = {"id": "quest-1", "createdAt": "2024-01-01", "nested": {"a": [1, 2.5, None]}}
    store.set_session_meta("q", meta)
    assert store.get_session_meta("q") == meta
    store.set_session_meta("q", {"v": 2})
    assert store.get_session_meta("q") == {"v": 2}
    store.set_session_meta("q", None)
    assert store.get_session_meta("q") is None
    # metadata is not hashed: nodes do not change
    ids = grow(store, "q", 2)
    store.set_session_meta("q", meta)
    assert [e.id for e in store.session("q").events()] == ids


def test_reopen_sees_everything(engine: Engine) -> None:
    s = engine.open()
    ids = grow(s, "q", 5)
    s.fork("w", "q~2")
    s.tag("t", "q~1")
    s.checkout("w")
    s.set_session_meta("q", {"a": 1})
    s.close()
    t = engine.open()
    try:
        assert [e.id for e in t.session("q").events()] == ids
        assert t.head() == ("w", ids[2])
        assert t.resolve("t") == ids[3]
        assert t.get_session_meta("q") == {"a": 1}
        assert len(t.reflog()) == 3  # the appends (one run), the fork, the tag
        assert t.fsck() == []
    finally:
        t.close()


def test_watch_marks_compare_and_set(engine: Engine) -> None:
    store = engine.open()
    path = "/home/u/.claude/projects/-p/0a1b2c3d.jsonl"
    first = WatchMark("claude", 120, 2, 130, 17, 5, "ab" * 32)
    later = WatchMark("claude", 300, 5, 300, 18, 5, "cd" * 32)
    assert store.watch_marks() == {}
    store.set_watch_mark(path, None, first)
    assert store.watch_marks() == {path: first}
    with pytest.raises(ConflictError):
        store.set_watch_mark(path, None, later)  # a second watcher that saw no mark
    with pytest.raises(ConflictError):
        store.set_watch_mark(path, later, first)
    # A lost compare-and-set in a batch undoes the batch's other writes too.
    with pytest.raises(ConflictError), store.batch():
        store.set_session_meta("q", {"v": 1})
        store.set_watch_mark(path, None, later)
    assert store.get_session_meta("q") is None
    store.set_watch_mark(path, first, later)
    store.set_watch_mark("/odd path/ünï.json", None, first)
    store.close()
    store = engine.open()  # kept by the store, not the process
    assert store.watch_marks() == {path: later, "/odd path/ünï.json": first}
    store.set_watch_mark(path, later, None)
    assert list(store.watch_marks()) == ["/odd path/ünï.json"]
    store.close()


def test_the_whole_reflog_is_in_time_order(store: Store) -> None:
    """Every ref's moves together come back by time, oldest first (ties in the order they were
    made), as ``sess reflog`` and the web view show them: an entry a later append folded into
    carries that later time, so it comes after the moves other refs made in between."""
    a, b = store.session("a"), store.session("b")
    a.add_message(user("1"))
    time.sleep(0.01)
    b.add_message(user("2"))
    time.sleep(0.01)
    a.add_message(user("3"))  # folded into a's first entry (the handle's run of appends)
    log = store.reflog()
    assert [e.ref for e in log] == [session_ref("b"), session_ref("a")]
    assert [e.time for e in log] == sorted(e.time for e in log)


def test_a_read_view_refuses_every_write(store: Store) -> None:
    """Inside ``store.snapshot()`` every write is refused with ReadViewWriteError, on every
    engine, and nothing changes: appends, ref moves, tags, HEAD, metadata, gc."""
    q = store.session("q")
    q.add_message(user("a"))
    store.tag("t", "q")
    store.set_session_meta("q", {"title": "before"})
    before = (store.backend.list_refs(""), store.reflog(), store.head(),
              store.get_session_meta("q"), store.backend.count_nodes())
    writes: dict[str, Callable[[], object]] = {
        "append": lambda: store.session("q").add_message(user("b")),
        "new session": lambda: store.session("n").add_message(user("c")),
        "fork": lambda: store.fork("f", "q"),
        "reset": lambda: store.reset("q", "t"),
        "tag": lambda: store.tag("u", "q"),
        "delete tag": lambda: store.delete_tag("t"),
        "rename": lambda: store.rename_session("q", "r"),
        "delete": lambda: store.delete_session("q"),
        "metadata": lambda: store.set_session_meta("q", {"title": "after"}),
        "HEAD": lambda: store.set_head_session("other"),
        "checkout": lambda: store.checkout("t"),
        "expire": lambda: store.expire_reflog("q"),
        "gc": lambda: store.gc(),
        "batch": lambda: store.batch().__enter__(),
    }
    with store.snapshot():
        for what, write in writes.items():
            with pytest.raises(ReadViewWriteError, match="read view"):
                write()
            assert store.session_head("q") is not None, what
    after = (store.backend.list_refs(""), store.reflog(), store.head(),
             store.get_session_meta("q"), store.backend.count_nodes())
    assert after == before
    store.session("q").add_message(user("b"))  # after the block, writes work again
    assert [m["content"] for m in store.messages("q")] == ["a", "b"]
