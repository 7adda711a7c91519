"""When the store recorded each event: the time kept with each node (format 6), and the reflog
for the nodes written before the store kept one (sesstree.repo.recorded)."""

from __future__ import annotations

import pytest

from sesstree import Store
from sesstree.cli.select import node_times
from sesstree.store.memory import MemoryBackend
from sesstree.testing import grow


def test_events_are_dated_by_their_nodes_without_the_reflog(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(MemoryBackend())
    grow(store, "q", 4)
    chain = store.session("q").events()[::-1]
    kept = store.backend.recorded([n.id for n in chain])

    def no_reflog(*args: object) -> None:
        raise AssertionError("the reflog was read")

    monkeypatch.setattr(store, "reflog", no_reflog)
    assert node_times(store, "q", chain) == kept
    assert len(set(kept.values())) >= 1 and len(kept) == 4


def test_nodes_without_a_time_are_dated_by_the_reflog() -> None:
    backend = MemoryBackend()
    store = Store(backend)
    ids = grow(store, "q", 3)
    s = store.session("q")
    ids.append(s.add_message({"role": "user", "content": "later"}).id)
    old = ids[:3]
    for i in old:  # as a store written before it kept times
        del backend._times[i]
    chain = store.session("q").events()[::-1]
    times = node_times(store, "q", chain)
    [run, single] = store.reflog("q")
    # The run's first node when the run started, the others when its entry was last written.
    assert run.started is not None
    assert times[old[0]] == run.started
    assert times[old[1]] == times[old[2]] == run.time
    # The node that keeps its time is dated by it.
    assert times[ids[3]] == backend._times[ids[3]] <= single.time
