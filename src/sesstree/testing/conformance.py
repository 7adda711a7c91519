"""The conformance suite: what every storage engine must do, as pytest tests it imports.

A new engine proves itself with one test module that imports the suite and gives it an
:class:`~sesstree.testing.Engine`::

    import pytest
    from sesstree.testing import Engine
    from sesstree.testing.conformance import *  # noqa: F403 - the suite's tests and fixtures

    @pytest.fixture
    def engine(tmp_path) -> Engine:
        return Engine("mine", open=lambda: open_store(f"mine://{tmp_path}"),
                      damage_node=my_damage_function)

Everything the seam in :mod:`sesstree.store.base` promises, and everything the store builds
on it (revisions, reflog, HEAD, diff, gc, fsck, stats), must then behave the same. Test ids
name the engine by the module that imports the suite (``tests/store/sqlite/test_sqlite_contract.py``). The
tests of what text every engine holds are in :mod:`sesstree.testing.conformance_text`, and
come with this module's.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from .. import (
    AmbiguousPrefixError,
    ConflictError,
    MissingNodeError,
    Node,
    RefExistsError,
    Store,
    UnknownRevisionError,
    make_node,
)
from ..node import NodeId
from ..repo.store import raw_node
from ..store.base import RawNode, RefUpdate
from . import Engine, assistant, user
from . import grow as grow  # (re-exported: engines' tests import it from here, as before)
from .conformance_text import *  # noqa: F403 - the text tests are part of the suite


@pytest.fixture
def store(engine: Engine) -> Iterator[Store]:
    """A fresh store on the engine under test, closed after the test."""
    s = engine.open()
    try:
        yield s
    finally:
        s.close()


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


# -- object store ------------------------------------------------------------------------


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


def test_ref_to_missing_node_refused(store: Store) -> None:
    with pytest.raises(MissingNodeError, match="not stored"):
        store.backend.commit([], [RefUpdate("sessions/x", None, "cd" * 32, "t")])  # type: ignore[arg-type]
    assert store.backend.list_refs("") == []
    assert store.backend.reflog() == []


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


# -- refs: compare-and-set, batches ------------------------------------------------------


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
    store.backend.commit([a], [RefUpdate("sessions/x", None, a.id, "create")])
    with pytest.raises(ConflictError):
        store.backend.commit([], [RefUpdate("sessions/x", None, a.id, "create again")])
    with pytest.raises(ConflictError):
        store.backend.commit([], [RefUpdate("sessions/y", a.id, None, "delete absent")])
    assert len(store.reflog()) == 1


def test_multi_update_commit_is_atomic(store: Store) -> None:
    a = raw(None, "user/message", user("a"))
    b = raw(a.id, "user/message", user("b"))
    store.backend.commit([a], [RefUpdate("sessions/x", None, a.id, "c")])
    with pytest.raises(ConflictError):
        store.backend.commit(
            [b],
            [RefUpdate("sessions/y", None, b.id, "ok"),
             RefUpdate("sessions/x", b.id, a.id, "stale")],
        )
    assert store.backend.get_ref("sessions/y") is None
    assert store.backend.has([b.id]) == set()
    assert len(store.reflog()) == 1


def test_batch_all_or_nothing_on_exception(store: Store) -> None:
    grow(store, "q", 3)
    before = (store.backend.count_nodes(), store.reflog(), store.session_head("q"))
    q = store.session("q")
    q.messages()  # a handle that has read its events must forget the rolled-back one too
    with pytest.raises(RuntimeError), store.batch():
        q.add_message(user("x"))
        store.session("other").add_message(user("y"))
        store.tag("t", "q")
        raise RuntimeError("boom")
    assert (store.backend.count_nodes(), store.reflog(), store.session_head("q")) == before
    assert not store.has_session("other")
    assert store.tags() == []
    # The handle that appended in the batch is back where it was before the block.
    assert len(q) == 3
    assert q.head == before[2]
    assert user("x") not in q.messages()
    q.add_message(user("z"))
    assert [m["content"] for m in store.messages("q")][-1] == "z"
    assert store.fsck() == []


def test_batch_commits_on_exit(store: Store) -> None:
    q = store.session("q")
    with store.batch():
        for i in range(50):
            q.add_message(user(str(i)))
        # reads inside the batch see the batch's writes
        assert store.session_head("q") == q.head
        assert len(store.session("q")) == 50
    assert len(store.session("q")) == 50
    assert store.depth("q") == 50
    assert store.fsck() == []


def test_batch_with_conflict_inside_keeps_the_rest(store: Store) -> None:
    grow(store, "a", 1)
    stale = store.session("a")
    store.session("a").add_message(user("moved"))
    b = store.session("b")
    with store.batch():
        b.add_message(user("b1"))
        with pytest.raises(ConflictError):
            stale.add_message(user("lost"))
        b.add_message(user("b2"))
    assert [m["content"] for m in store.messages("b")] == ["b1", "b2"]
    assert [m["content"] for m in store.messages("a")] == ["a-0", "moved"]
    assert store.fsck() == []


def test_batch_one_reflog_entry_per_ref(store: Store) -> None:
    q = store.session("q")
    first = q.add_message(user("0")).id
    with store.batch():
        for i in range(3):
            q.add_message(user(str(i + 1)))
    log = store.reflog("q")
    assert len(log) == 2
    assert (log[1].old, log[1].new) == (first, q.head)


def test_fold_rewrites_the_newest_entry_and_is_a_compare_and_set(store: Store) -> None:
    a = raw(None, "user/message", user("a"))
    b = raw(a.id, "user/message", user("b"))
    c = raw(b.id, "user/message", user("c"))
    store.backend.commit([a], [RefUpdate("sessions/x", None, a.id, "first")])
    store.backend.commit([b], [RefUpdate("sessions/x", a.id, b.id, "second", fold=True)])
    [entry] = store.backend.reflog("sessions/x")
    assert (entry.old, entry.new, entry.reason) == (None, b.id, "second")
    # A stale fold is a lost compare-and-set: nothing written, the entry as it was.
    with pytest.raises(ConflictError):
        store.backend.commit([c], [RefUpdate("sessions/x", a.id, c.id, "stale", fold=True)])
    assert store.backend.reflog("sessions/x") == [entry]
    assert store.backend.has([c.id]) == set()
    # A ref with no entry to fold into gets one.
    store.backend.commit([], [RefUpdate("tags/t", None, a.id, "tagged", fold=True)])
    assert [(e.old, e.new) for e in store.backend.reflog("tags/t")] == [(None, a.id)]


def test_batch_reflog_entry_names_its_moves_and_undoes_at_once(store: Store) -> None:
    q = store.session("q")
    first = q.add_message(user("0")).id
    with store.batch():
        for i in range(3):
            q.add_message(user(str(i + 1)))
        store.fork("w", "q")  # another ref in the same batch: its own entry
    log = store.reflog("q")
    assert log[-1].reason == "append: user/message (batch of 3 moves)"
    assert store.resolve("q@{1}") == first
    assert len(store.reflog("w")) == 1


def test_log_group_logs_a_turn_once_and_commits_each_move(
    store: Store, engine: Engine
) -> None:
    q = store.session("q")
    before = q.add_message(user("hello")).id
    other = engine.open()
    try:
        with q.log_group("run: turn"):
            q.add_message(user("question"))
            q.append("step/start", {"step": 1})
            # Each move is committed as it happens: another handle sees it inside the group.
            assert other.session_head("q") == q.head
            q.add_message(assistant("answer"))
        log = store.reflog("q")
        assert [e.reason for e in log] == ["append: user/message", "run: turn (3 moves)"]
        assert (log[-1].old, log[-1].new) == (before, q.head)
        # The entry spans the turn: from its first move to its last.
        assert log[0].started is None
        assert log[-1].started is not None and log[0].time <= log[-1].started <= log[-1].time
        assert other.resolve("q@{1}") == before
        # Outside the group, every move has its own entry again.
        q.add_message(user("after"))
        assert len(store.reflog("q")) == 3
    finally:
        other.close()


def test_a_batch_rolled_back_inside_a_group_does_not_fold_into_older_entries(
    store: Store,
) -> None:
    q = store.session("q")
    q.add_message(user("0"))
    with q.log_group("run: turn"):
        with pytest.raises(RuntimeError), store.batch():
            q.add_message(user("lost"))
            raise RuntimeError("rolled back")
        q.add_message(user("kept"))
    log = store.reflog("q")
    assert [e.reason for e in log] == ["append: user/message", "run: turn"]
    assert [m["content"] for m in q.messages()] == ["0", "kept"]


def test_a_group_does_not_fold_over_another_writers_move(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("0"))
    with q.log_group("run: turn"):
        q.add_message(user("mine"))
        other = store.session("q")
        other.add_message(user("theirs"))
        q.add_message(user("mine again"), rebase=True)
    reasons = [e.reason for e in store.reflog("q")]
    assert reasons == ["append: user/message", "run: turn", "append: user/message", "run: turn"]


def test_another_threads_moves_are_not_folded_into_a_batch(store: Store) -> None:
    a, b = store.session("a"), store.session("b")
    a.add_message(user("a0"))
    b.add_message(user("b0"))
    done = threading.Event()

    def other() -> None:
        store.session("b").add_message(user("b1"))
        done.set()

    with store.batch():
        a.add_message(user("a1"))
        worker = threading.Thread(target=other)
        worker.start()
        a.add_message(user("a2"))
    worker.join(10)
    assert done.is_set()
    assert [e.reason for e in store.reflog("b")] == ["append: user/message"] * 2
    assert store.reflog("a")[-1].reason == "append: user/message (batch of 2 moves)"


# -- reflog, rename, delete ---------------------------------------------------------------


def test_reflog_records_every_move(store: Store) -> None:
    ids = grow(store, "q", 3)
    store.fork("w", "q~1")
    q = store.session("q")
    q.rewind(2)
    store.reset("q", ids[-1])
    store.rename_session("w", "west")
    store.delete_session("west")
    log = store.reflog("q")
    assert [(e.old, e.new) for e in log] == [
        (None, ids[0]), (ids[0], ids[1]), (ids[1], ids[2]),
        (ids[2], ids[0]), (ids[0], ids[2]),
    ]
    assert all(e.reason for e in log)
    assert "append" in log[0].reason and "rewind" in log[3].reason and "reset" in log[4].reason
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
    assert {e.ref for e in whole} == {"sessions/q", "sessions/west"}


def test_rename_carries_reflog_meta_and_head(store: Store) -> None:
    grow(store, "old", 2)
    store.set_session_meta("old", {"title": "quest"})
    store.checkout("old")
    store.rename_session("old", "new")
    assert not store.has_session("old")
    assert store.head() == ("new", store.session_head("new"))
    assert store.get_session_meta("new") == {"title": "quest"}
    assert store.get_session_meta("old") is None
    log = store.reflog("new")
    head = store.session_head("new")
    # the two appends came along, then the rename (one entry, or a delete and a create)
    assert [e.reason.startswith("append") for e in log[:2]] == [True, True]
    assert all("renamed" in e.reason for e in log[2:]) and len(log) in (3, 4)
    assert log[1].new == log[-1].new == head
    assert store.messages("new") == [user("old-0"), user("old-1")]
    grow(store, "other", 1)
    with pytest.raises(RefExistsError):
        store.rename_session("new", "other")
    with pytest.raises(UnknownRevisionError):
        store.rename_session("missing", "x")


def test_delete_keeps_reflog_so_restore_works(store: Store) -> None:
    ids = grow(store, "q", 4)
    store.set_session_meta("q", {"k": 1})
    store.checkout("q")
    assert store.delete_session("q") == ids[-1]
    assert not store.has_session("q")
    assert store.get_session_meta("q") is None
    assert store.head() == (None, ids[-1])  # HEAD detached at the old head, not dangling
    with pytest.raises(UnknownRevisionError):
        store.resolve("q")
    store.gc()
    last = store.reflog("q")[-1]
    assert last.new is None and last.old == ids[-1]
    restored = store.fork("q", last.old)
    assert [e.id for e in restored.events()] == ids
    with pytest.raises(UnknownRevisionError):
        store.delete_session("never")


def test_fork_is_o1_and_independent(store: Store) -> None:
    ids = grow(store, "q", 5)
    nodes = store.backend.count_nodes()
    west = store.session("q").fork("west")
    assert store.backend.count_nodes() == nodes
    assert west.head == ids[-1] and len(west) == 5
    west.add_message(user("w"))
    assert len(store.session("q")) == 5
    with pytest.raises(RefExistsError):
        store.fork("west", "q")
    with pytest.raises(UnknownRevisionError):
        store.session("empty").fork("x")


# -- tags, HEAD, revisions ----------------------------------------------------------------


def test_tags(store: Store) -> None:
    ids = grow(store, "q", 3)
    assert store.tag("v1", "q~1") == ids[1]
    assert store.resolve("v1") == ids[1]
    assert store.resolve("v1~1") == ids[0]
    assert store.resolve("tags/v1") == ids[1]
    with pytest.raises(RefExistsError):
        store.tag("v1", "q")
    store.tag("v2", ids[2][:8])
    assert [(t.name, t.target) for t in store.tags()] == [("v1", ids[1]), ("v2", ids[2])]
    assert store.sessions()[0].name == "q" and len(store.sessions()) == 1
    assert [e.new for e in store.reflog("tags/v1")] == [ids[1]]


def test_head_checkout_detached(store: Store) -> None:
    assert store.head() == ("main", None)
    with pytest.raises(UnknownRevisionError):
        store.resolve("HEAD")
    ids = grow(store, "main", 3)
    assert store.resolve("HEAD") == ids[-1]
    assert store.resolve("@") == ids[-1]
    grow(store, "q", 2)
    assert store.checkout("q") == ("q", store.session_head("q"))
    assert store.head()[0] == "q"
    store.session("q").add_message(user("more"))
    assert store.resolve("HEAD") == store.session_head("q")  # HEAD follows the session
    name, node = store.checkout("main~1")
    assert (name, node) == (None, ids[1])
    assert store.head() == (None, ids[1])
    assert store.resolve("HEAD~1") == ids[0]
    store.checkout(ids[2][:6])
    assert store.head() == (None, ids[2])
    store.set_head_session("fresh")
    assert store.head() == ("fresh", None)
    store.fork("fresh", "main")
    assert store.head() == ("fresh", ids[-1])
    assert store.fsck() == []


def test_revisions(store: Store) -> None:
    ids = grow(store, "q", 6)
    store.checkout("q")
    assert store.resolve("q") == ids[5]
    assert store.resolve("sessions/q") == ids[5]
    assert store.resolve("q~0") == ids[5]
    assert store.resolve("q~1") == ids[4]
    assert store.resolve("q~") == ids[4]
    assert store.resolve("q~5") == ids[0]
    assert store.resolve("q^") == ids[4]
    assert store.resolve("q^^") == ids[3]
    assert store.resolve("q~2^") == ids[2]
    assert store.resolve("q~1~1") == ids[3]
    assert store.resolve("HEAD~2") == ids[3]
    assert store.resolve(" q~1 ") == ids[4]
    assert store.resolve(ids[2]) == ids[2]
    assert store.resolve(ids[2][:4]) == ids[2]  # ids are pinned, so no collision here
    assert store.resolve(ids[2][:12]) == ids[2]
    assert store.resolve(ids[2][:12].upper()) == ids[2]
    assert store.resolve(ids[3][:10] + "~2") == ids[1]
    for bad in ("q~6", "q~100", "q^^^^^^", "HEAD~9"):
        with pytest.raises(UnknownRevisionError):
            store.resolve(bad)
    for unknown in ("nope", "nope~1", ids[0][:3], "0000000000", "g" * 8, "", "~1"):
        with pytest.raises(UnknownRevisionError):
            store.resolve(unknown)


def colliding_nodes() -> tuple[Node, Node]:
    """Two nodes whose ids share their first 4 hex characters (found by brute force)."""
    seen: dict[str, Node] = {}
    i = 0
    while True:
        node = make_node(None, "usage", {"collide": i})
        other = seen.setdefault(node.id[:4], node)
        if other is not node:
            return other, node
        i += 1


def test_ambiguous_prefix(store: Store) -> None:
    a, b = colliding_nodes()
    store.write([a, b])
    prefix = a.id[:4]
    assert b.id.startswith(prefix)
    with pytest.raises(AmbiguousPrefixError, match=prefix):
        store.resolve(prefix)
    with pytest.raises(AmbiguousPrefixError):
        store.resolve(prefix + "~0")
    assert sorted(store.backend.resolve_prefix(prefix, limit=5)) == sorted([a.id, b.id])
    # a longer prefix that tells them apart resolves
    k = next(n for n in range(5, 65) if a.id[:n] != b.id[:n])
    assert store.resolve(a.id[:k]) == a.id
    assert store.resolve(b.id[:k]) == b.id
    assert store.show(a.id[:k]).data == {"collide": a.data["collide"]}


def test_show_log_depth(store: Store) -> None:
    ids = grow(store, "q", 4)
    node = store.show("q~1")
    assert (node.id, node.parent, node.type, node.data) == (
        ids[2], ids[1], "user/message", user("q-2"))
    log = store.log("q")
    assert [n.id for n in log] == list(reversed(ids))
    assert [n.parent for n in log] == [ids[2], ids[1], ids[0], None]
    assert [n.id for n in store.log("q", limit=2)] == [ids[3], ids[2]]
    assert store.log("q", limit=2)[-1].parent == ids[1]
    assert store.depth("q") == 4 and store.depth("q~3") == 1
    assert [(s.name, s.length) for s in store.sessions()] == [("q", 4)]


def test_diff_and_merge_base(store: Store) -> None:
    ids = grow(store, "q", 4)
    store.fork("w", "q~1")
    w_ids = grow(store, "w", 2, tag="w")
    q_new = grow(store, "q", 1, tag="q")
    d = store.diff("q", "w")
    assert d.base == ids[2]
    assert [n.id for n in d.only_a] == [ids[3], *q_new]
    assert [n.id for n in d.only_b] == w_ids
    assert d.only_b[0].parent == ids[2]
    same = store.diff("q", "q")
    assert same.base == store.session_head("q") and same.only_a == same.only_b == []
    ancestor = store.diff("q~4", "q")
    assert ancestor.base == ids[0] and ancestor.only_a == []
    assert len(ancestor.only_b) == 4
    grow(store, "unrelated", 2)
    apart = store.diff("q", "unrelated")
    assert apart.base is None
    assert len(apart.only_a) == 5 and len(apart.only_b) == 2


# -- maintenance --------------------------------------------------------------------------


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


def test_fsck_clean_after_everything(store: Store) -> None:
    grow(store, "q", 3)
    store.fork("w", "q~1")
    grow(store, "w", 2)
    store.tag("v", "w")
    store.session("q").rewind(1)
    store.rename_session("w", "w2")
    store.delete_session("w2")
    store.checkout("q~1")
    store.gc()
    assert store.fsck() == []


def test_fsck_finds_damaged_content(store: Store, engine: Engine) -> None:
    ids = grow(store, "q", 3)
    engine.damage_node(store, NodeId(ids[1]))
    faults = store.fsck()
    assert any(ids[1][:12] in f and "hash" in f for f in faults), faults


def test_stats_logical_vs_physical(store: Store, engine: Engine) -> None:
    messages = [user(f"message number {i} " + "x" * 50) for i in range(20)]
    q = store.session("q")
    for m in messages:
        q.add_message(m)
    line_bytes = sum(len(msgspec.json.encode(m)) + 1 for m in messages)
    one = store.stats()
    assert (one.nodes, one.sessions, one.tags, one.reflog_entries) == (20, 1, 0, 20)
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
    store.backend.commit([], [RefUpdate("sessions/a", a_head, None, "t")])
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
        assert len(t.reflog()) == 7
        assert t.fsck() == []
    finally:
        t.close()


def test_batch_rolls_back_settings_too(store: Store) -> None:
    """Metadata and HEAD written inside a failed batch go with it (an import is all-or-nothing)."""
    grow(store, "q", 1)
    with pytest.raises(RuntimeError), store.batch():
        store.set_session_meta("q", {"title": "half-done"})
        store.checkout("q")
        raise RuntimeError("boom")
    assert store.get_session_meta("q") is None
    assert store.head() == ("main", None)


def test_expiring_a_deleted_sessions_reflog_lets_gc_reclaim_it(store: Store) -> None:
    grow(store, "keep", 2)
    gone = store.session("gone")
    gone.add_message(user("only here"))
    gone.add_message(user("and here"))
    store.delete_session("gone")
    assert store.gc().removed == 0  # the reflog still reaches its nodes: undo stays possible
    assert store.expire_reflog("gone") == 3
    assert store.reflog("gone") == []
    assert store.gc().removed == 2
    assert len(store.session("keep").messages()) == 2
    assert store.fsck() == []


def test_expiring_a_live_sessions_reflog_keeps_it(store: Store) -> None:
    q = store.session("q")
    for i in range(3):
        q.add_message(user(str(i)))
    q.rewind(2)  # the two rewound events are reachable only through the reflog now
    assert store.expire_reflog("q") == 3
    assert len(store.reflog("q")) == 1
    assert store.session("q").messages() == [user("0")]
    assert store.gc().removed == 2
    with pytest.raises(UnknownRevisionError):
        store.expire_reflog("never")
    assert store.fsck() == []


def test_delete_tag(store: Store) -> None:
    grow(store, "q", 2)
    target = store.tag("v1", "q~1")
    assert store.delete_tag("v1") == target
    assert store.tags() == []
    assert store.reflog("tags/v1")[-1].new is None
    with pytest.raises(UnknownRevisionError):
        store.delete_tag("v1")
