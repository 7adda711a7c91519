"""The repo suite, revisions: names, ``~`` and ``^``, id prefixes, HEAD, log, show and diff.

What :mod:`sesstree.repo.revisions` and :mod:`sesstree.repo.head` make of any engine's refs
and nodes, through the :class:`~sesstree.Store` alone.
"""

from __future__ import annotations

import pytest

from ...errors import AmbiguousPrefixError, UnknownRevisionError
from ...node import session_ref
from ...repo.store import Store
from .. import colliding_nodes, grow, user

__all__ = [
    "test_ambiguous_prefix",
    "test_diff_and_merge_base",
    "test_head_checkout_detached",
    "test_revisions",
    "test_show_log_depth",
]


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
    assert store.resolve(session_ref("q")) == ids[5]
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


def test_ambiguous_prefix(store: Store) -> None:
    a, b = colliding_nodes()
    store.write([a, b])
    prefix = a.id[:4]
    assert b.id.startswith(prefix)
    with pytest.raises(AmbiguousPrefixError, match=prefix):
        store.resolve(prefix)
    with pytest.raises(AmbiguousPrefixError):
        store.resolve(prefix + "~0")
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
