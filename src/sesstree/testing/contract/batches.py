"""The engine contract, batches: all-or-nothing, one reflog entry per ref, folds as a CAS.

``Backend.batch()`` is one transaction and nothing more; ``RefUpdate(fold=True)`` rewrites a
ref's newest reflog entry only if the ref is still where that entry left it. The store's
policy decides when to fold (:mod:`sesstree.repo.policy`); these tests drive it through the
store and check what the engine kept: nothing of a failed batch (settings included), the
rest of a batch whose one append conflicted, a fold that never lands on another writer's
entry, and a batch that belongs to its thread.
"""

from __future__ import annotations

import threading

import pytest

from ...errors import ConflictError
from ...node import session_ref, tag_ref
from ...repo.store import Store
from ...store.base import RefUpdate
from .. import Engine, assistant, grow, user
from .objects import raw

__all__ = [
    "test_a_batch_rolled_back_inside_a_group_does_not_fold_into_older_entries",
    "test_a_group_does_not_fold_over_another_writers_move",
    "test_another_threads_moves_are_not_folded_into_a_batch",
    "test_batch_all_or_nothing_on_exception",
    "test_batch_commits_on_exit",
    "test_batch_one_reflog_entry_per_ref",
    "test_batch_rolls_back_settings_too",
    "test_batch_with_conflict_inside_keeps_the_rest",
    "test_fold_rewrites_the_newest_entry_and_is_a_compare_and_set",
    "test_log_group_logs_a_turn_once_and_commits_each_move",
]


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
    store.backend.commit([a], [RefUpdate(session_ref("x"), None, a.id, "first")])
    store.backend.commit([b], [RefUpdate(session_ref("x"), a.id, b.id, "second", fold=True)])
    [entry] = store.backend.reflog(session_ref("x"))
    assert (entry.old, entry.new, entry.reason) == (None, b.id, "second")
    # A stale fold is a lost compare-and-set: nothing written, the entry as it was.
    with pytest.raises(ConflictError):
        store.backend.commit([c], [RefUpdate(session_ref("x"), a.id, c.id, "stale", fold=True)])
    assert store.backend.reflog(session_ref("x")) == [entry]
    assert store.backend.has([c.id]) == set()
    # A ref with no entry to fold into gets one.
    store.backend.commit([], [RefUpdate(tag_ref("t"), None, a.id, "tagged", fold=True)])
    assert [(e.old, e.new) for e in store.backend.reflog(tag_ref("t"))] == [(None, a.id)]


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


def test_batch_rolls_back_settings_too(store: Store) -> None:
    """Metadata and HEAD written inside a failed batch go with it (an import is all-or-nothing)."""
    grow(store, "q", 1)
    with pytest.raises(RuntimeError), store.batch():
        store.set_session_meta("q", {"title": "half-done"})
        store.checkout("q")
        raise RuntimeError("boom")
    assert store.get_session_meta("q") is None
    assert store.head() == ("main", None)
