"""The engine contract, runs of plain appends: one handle's appends logged as one entry, and
each node's recorded time kept with the node.

Outside batches and log groups, a session handle's consecutive appends fold into one reflog
entry (:mod:`sesstree.repo.policy`), each still committed on its own. What the engine must
keep: the entry spans the run (its ``old`` is where the run started, its ``new`` the last
append), every append is visible to other handles as soon as it returns, and a fold never
lands on an entry the run did not make (another writer's move, a reset, a fork). As the
reflog no longer dates each event, the engine keeps when it first recorded each node
(:meth:`~sesstree.store.base.ObjectStore.recorded`): a put of a node already stored keeps
the older time, and packing keeps it.
"""

from __future__ import annotations

import time

from ...node import NodeId, session_ref
from ...repo.recorded import stored_dates
from ...repo.store import Store
from .. import Engine, grow, user

__all__ = [
    "test_a_reset_or_a_batch_ends_a_run",
    "test_a_run_of_appends_is_one_entry_and_each_is_committed",
    "test_another_writers_move_starts_a_new_entry",
    "test_each_node_keeps_when_it_was_first_recorded",
]


def test_a_run_of_appends_is_one_entry_and_each_is_committed(
    store: Store, engine: Engine
) -> None:
    before = grow(store, "q", 1)[0]  # one handle's append: an entry of its own
    q = store.session("q")
    other = engine.open()
    try:
        ids = []
        for i in range(4):
            ids.append(q.add_message(user(f"m{i}")).id)
            # Acknowledged on its own: another handle sees it as soon as it returns.
            assert other.session_head("q") == q.head
        log = store.backend.reflog(session_ref("q"))
        assert [e.reason for e in log] == ["append: user/message", "append (4 moves)"]
        assert (log[-1].old, log[-1].new) == (before, ids[-1])
        assert log[-1].started is not None and log[-1].started <= log[-1].time
        # NAME@{1} is the session before the last run.
        assert other.resolve("q@{1}") == before
    finally:
        other.close()


def test_another_writers_move_starts_a_new_entry(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("mine"))
    q.add_message(user("mine too"))
    store.session("q").add_message(user("theirs"))  # another handle, another run
    q.add_message(user("mine again"), rebase=True)
    q.add_message(user("and again"))
    log = store.reflog("q")
    assert [e.reason for e in log] == [
        "append (2 moves)", "append: user/message", "append (2 moves)",
    ]
    assert log[1].old == log[0].new and log[2].old == log[1].new


def test_a_reset_or_a_batch_ends_a_run(store: Store) -> None:
    q = store.session("q")
    ids = [q.add_message(user(f"m{i}")).id for i in range(3)]
    q.reset("q~1")
    q.add_message(user("after the reset"))
    q.add_message(user("and on"))
    store.fork("w", "q")  # a fork moves another ref: q's run goes on
    q.add_message(user("after the fork"))
    with store.batch():
        q.add_message(user("batched"))
    q.add_message(user("after the batch"))
    log = store.reflog("q")
    assert [e.reason for e in log] == [
        "append (3 moves)", "reset: moving to q~1", "append (3 moves)",
        "append: user/message", "append: user/message",
    ]
    assert (log[1].old, log[1].new) == (ids[2], ids[1])


def test_each_node_keeps_when_it_was_first_recorded(store: Store, engine: Engine) -> None:
    before = time.time()
    ids = [NodeId(i) for i in grow(store, "q", 3)]
    after = time.time()
    got = store.backend.recorded(ids)
    assert set(got) == set(ids)
    # (To the millisecond, rounded down.)
    assert all(before - 0.002 <= got[i] <= after for i in ids)
    assert [got[i] for i in ids] == sorted(got[i] for i in ids)
    assert store.backend.recorded([NodeId("0" * 64)]) == {}
    # The same node put again later (another session writing the same event on the same
    # parent) keeps its first time.
    time.sleep(0.01)
    store.fork("w", "q~1")
    again = store.session("w").add_message(user("q-2"))
    assert again.id == ids[2]
    assert store.backend.recorded([ids[2]]) == {ids[2]: got[ids[2]]}
    # Every event of a session is dated by it, with no reflog read.
    nodes = store.session("q").events()
    times: dict[NodeId, float] = {}
    assert stored_dates(store.recorded, nodes, times)
    assert times == got
    # A batch lands at once: its nodes are dated alike.
    with store.batch():
        one = store.session("b").add_message(user("b0")).id
        time.sleep(0.01)
        two = store.session("b").add_message(user("b1")).id
    batched = store.backend.recorded([one, two])
    assert batched[one] == batched[two]
    # ... from a fresh handle too, and after the engine packed what it keeps.
    store.close()
    fresh = engine.open()
    try:
        repack = getattr(fresh.backend, "repack", None)
        if callable(repack):
            repack()
        assert fresh.backend.recorded(ids) == got
    finally:
        fresh.close()
