"""The repo suite, sessions and tags: fork, rename, delete and restore, tags, batch entries.

What the :class:`~sesstree.Store` does with refs on any engine that passes the contract: a
fork is one ref, a rename carries metadata and HEAD, a delete detaches HEAD and keeps the
reflog to restore from, a batch's entry says how many moves it holds, and fsck stays clean
after all of it.
"""

from __future__ import annotations

import pytest

from ...errors import RefExistsError, UnknownRevisionError
from ...node import tag_ref
from ...repo.store import Store
from .. import grow, user

__all__ = [
    "test_batch_reflog_entry_names_its_moves_and_undoes_at_once",
    "test_delete_keeps_reflog_so_restore_works",
    "test_delete_tag",
    "test_fork_is_o1_and_independent",
    "test_fsck_clean_after_everything",
    "test_rename_carries_reflog_meta_and_head",
    "test_tags",
]


def test_fork_is_o1_and_independent(store: Store) -> None:
    ids = grow(store, "q", 5)
    nodes = store.stats().nodes
    west = store.session("q").fork("west")
    assert store.stats().nodes == nodes  # one ref, no copy
    assert west.head == ids[-1] and len(west) == 5
    west.add_message(user("w"))
    assert len(store.session("q")) == 5
    with pytest.raises(RefExistsError):
        store.fork("west", "q")
    with pytest.raises(UnknownRevisionError):
        store.session("empty").fork("x")


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
    # the two appends (one run) came along, then the rename (one entry, or a delete and a
    # create)
    assert log[0].reason == "append (2 moves)"
    assert all("renamed" in e.reason for e in log[1:]) and len(log) in (2, 3)
    assert log[0].new == log[-1].new == head
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


def test_tags(store: Store) -> None:
    ids = grow(store, "q", 3)
    assert store.tag("v1", "q~1") == ids[1]
    assert store.resolve("v1") == ids[1]
    assert store.resolve("v1~1") == ids[0]
    assert store.resolve(tag_ref("v1")) == ids[1]
    with pytest.raises(RefExistsError):
        store.tag("v1", "q")
    store.tag("v2", ids[2][:8])
    assert [(t.name, t.target) for t in store.tags()] == [("v1", ids[1]), ("v2", ids[2])]
    assert store.sessions()[0].name == "q" and len(store.sessions()) == 1
    assert [e.new for e in store.reflog(tag_ref("v1"))] == [ids[1]]


def test_delete_tag(store: Store) -> None:
    grow(store, "q", 2)
    target = store.tag("v1", "q~1")
    assert store.delete_tag("v1") == target
    assert store.tags() == []
    assert store.reflog(tag_ref("v1"))[-1].new is None
    with pytest.raises(UnknownRevisionError):
        store.delete_tag("v1")


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
