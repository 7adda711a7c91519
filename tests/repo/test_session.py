"""The Session handle: append, extend, rewind, reset, fork, refresh, subscribe, flush."""

from __future__ import annotations

import pytest
from core_testkit import assistant, user

from sesstree import ConflictError, InvalidEventError, Node, Store, UnknownRevisionError


def test_new_name_starts_empty_known_name_loads(store: Store) -> None:
    q = store.session("quest-1")
    assert len(q) == 0 and q.head is None and q.messages() == [] and q.events() == []
    assert not store.has_session("quest-1")  # no ref until the first event
    q.add_message(user("a"))
    q.add_message(assistant("b"))
    again = store.session("quest-1")
    assert len(again) == 2 and again.head == q.head
    assert again.messages() == [user("a"), assistant("b")]
    assert "quest-1" in repr(again)


def test_events_link_parents(store: Store) -> None:
    q = store.session("q")
    nodes = [q.add_message(user(str(i))) for i in range(4)]
    events = store.session("q").events()
    assert events == nodes
    assert [e.parent for e in events] == [None, *(n.id for n in nodes[:-1])]
    assert all(isinstance(e, Node) for e in events)


def test_same_history_same_ids_across_sessions(store: Store) -> None:
    a, b = store.session("a"), store.session("b")
    ids_a = [a.add_message(user(str(i))).id for i in range(3)]
    ids_b = [b.add_message(user(str(i))).id for i in range(3)]
    assert ids_a == ids_b
    assert store.backend.count_nodes() == 3


def test_rewind_and_undo_through_reflog(store: Store) -> None:
    q = store.session("q")
    ids = [q.add_message(user(str(i))).id for i in range(5)]
    assert q.rewind(0) == ids[-1]
    assert q.rewind(2) == ids[2]
    assert len(q) == 3 and q.messages() == [user("0"), user("1"), user("2")]
    assert store.session_head("q") == ids[2]
    with pytest.raises(UnknownRevisionError):
        q.rewind(4)  # past the first event
    with pytest.raises(ValueError):
        q.rewind(-1)
    undo = store.reflog("q")[-1]
    assert (undo.old, undo.new) == (ids[-1], ids[2])
    assert q.reset(undo.old) == ids[-1]  # type: ignore[arg-type]
    assert len(q) == 5 and q.messages()[-1] == user("4")
    q.add_message(user("5"))
    assert store.depth("q") == 6


def test_rewind_to_empty_and_back(store: Store) -> None:
    """Rewinding by the whole length empties the session; the reflog brings it back."""
    q = store.session("q")
    ids = [q.add_message(user(str(i))).id for i in range(2)]
    assert q.rewind(2) is None
    assert len(q) == 0 and q.messages() == [] and q.head is None
    assert not store.has_session("q") and store.session("q").messages() == []
    assert store.resolve("q@{1}") == ids[-1]
    q.reset("q@{1}")
    assert store.session("q").messages() == [user("0"), user("1")]
    assert store.fsck() == []


def test_rewind_then_append_branches(store: Store) -> None:
    q = store.session("q")
    ids = [q.add_message(user(str(i))).id for i in range(3)]
    q.rewind(1)
    new = q.add_message(user("other"))
    assert new.parent == ids[1]
    assert store.backend.count_nodes() == 4
    assert q.messages() == [user("0"), user("1"), user("other")]


def test_reset_to_other_session(store: Store) -> None:
    a = store.session("a")
    a.add_message(user("a"))
    b = store.session("b")
    b.add_message(user("b"))
    b.add_message(user("b2"))
    assert a.reset("b~1") == store.resolve("b~1")
    assert a.messages() == [user("b")]
    a.add_message(user("c"))
    assert store.messages("b") == [user("b"), user("b2")]


def test_extend_is_one_transaction(store: Store) -> None:
    q = store.session("q")
    nodes = q.extend([("user/message", user("a")), ("assistant/message", assistant("b"))])
    assert [n.data for n in nodes] == [user("a"), assistant("b")]
    assert store.depth("q") == 2
    with pytest.raises(InvalidEventError):
        q.extend([("user/message", user("c")), ("nope/nope", {})])
    q.refresh()
    assert store.depth("q") == 2
    assert store.session("q").messages() == [user("a"), assistant("b")]


def test_fork_handle(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("a"))
    w = q.fork("w")
    assert w.name == "w" and w.head == q.head
    w.add_message(user("w"))
    q.add_message(user("q"))
    assert store.messages("w") == [user("a"), user("w")]
    assert store.messages("q") == [user("a"), user("q")]


def test_stale_handle_conflicts_then_refresh(store: Store) -> None:
    first = store.session("q")
    first.add_message(user("a"))
    second = store.session("q")
    first.add_message(user("b"))
    with pytest.raises(ConflictError):
        second.add_message(user("c"))
    assert second.messages() == [user("a")]  # the handle still shows what it saw
    second.refresh()
    assert second.messages() == [user("a"), user("b")]
    node = second.append("user/message", user("c"))
    assert node.parent == first.head


def test_rebase_once(store: Store) -> None:
    first = store.session("q")
    first.add_message(user("a"))
    second = store.session("q")
    first.add_message(user("b"))
    second.append("user/message", user("c"), rebase=True)
    assert store.messages("q") == [user("a"), user("b"), user("c")]
    assert second.messages() == [user("a"), user("b"), user("c")]


def test_subscribe_sees_each_append(store: Store) -> None:
    q = store.session("q")
    seen: list[Node] = []
    stop = q.subscribe(seen.append)
    a = q.add_message(user("a"))
    b = q.append("usage", {"tokens": 3})
    stop()
    stop()  # idempotent
    q.add_message(user("after"))
    assert seen == [a, b]
    failed: list[Node] = []
    q.subscribe(failed.append)
    with pytest.raises(InvalidEventError):
        q.append("not/registered", {})
    assert failed == []


def test_flush_after_delete(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("a"))
    q.flush()
    store.delete_session("q")
    with pytest.raises(ConflictError):
        q.flush()
    store.session("empty").flush()


def test_a_handle_resets_by_the_same_rules_as_the_store(store: Store) -> None:
    # Guards a past bug: Session.reset wrote a reflog entry for a reset to where the session
    # already was, with another reason than Store.reset; there was one reset, with two rules.
    q = store.session("q")
    ids = [q.add_message(user(str(i))).id for i in range(3)]
    moves = len(store.reflog("q"))
    assert q.reset("q") == ids[-1] and store.reset("q", "q") == ids[-1]
    assert len(store.reflog("q")) == moves  # neither logs a move that moved nothing
    q.reset("q~1")
    store.reset("q", "q@{1}")
    q.refresh()
    reasons = [e.reason for e in store.reflog("q")[-2:]]
    assert reasons == ["reset: moving to q~1", "reset: moving to q@{1}"]
    stale = store.session("q")
    q.reset("q~2")
    with pytest.raises(ConflictError):  # a handle's reset is a compare-and-set on its head
        stale.reset(ids[1])
