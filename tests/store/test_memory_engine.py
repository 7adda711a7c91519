"""The memory backend's own promises: thread-safe reads and writes, and batches that undo
what they wrote instead of copying the store."""

from __future__ import annotations

import sys
import threading
import tracemalloc
from collections.abc import Iterator

import pytest

from sesstree import open_store


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch very often, so a read that iterates without the lock meets a write."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("busy_switching")
def test_readers_and_writers_on_threads() -> None:
    # Guards a past bug: reads took no lock, so 3 writer and 2 reader threads raised
    # "dictionary changed size during iteration" within seconds.
    store = open_store(":memory:")
    errors: list[BaseException] = []
    done = threading.Event()

    def write(k: int) -> None:
        try:
            s = store.session(f"w{k}")
            for i in range(400):
                s.add_message({"role": "user", "content": f"{k}:{i}"})
                if i % 50 == 0:
                    store.tag(f"t{k}-{i}", s.head or "")
                    store.set_session_meta(f"w{k}", {"i": i})
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            while not done.is_set():
                store.sessions()
                store.tags()
                store.reflog()
                list(store.backend.iter_nodes())
                store.backend.resolve_prefix("ab", limit=50)
                store.backend.list_session_meta()
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert errors == []
    assert [len(store.session(f"w{k}")) for k in range(3)] == [400, 400, 400]
    store.close()


def test_a_failed_batch_undoes_nodes_refs_reflog_and_metadata() -> None:
    store = open_store(":memory:")
    q = store.session("q")
    q.add_message({"role": "user", "content": "kept"})
    store.tag("v1", "q")
    store.set_session_meta("q", {"a": 1})
    before = (list(store.backend.iter_nodes()), store.backend.list_refs(""), store.reflog(),
              store.backend.list_session_meta(), store.backend.get_head())
    with pytest.raises(RuntimeError), store.batch():
        q.add_message({"role": "user", "content": "gone"})
        store.fork("w", "q")
        store.rename_session("q", "renamed")
        store.delete_tag("v1")
        store.set_session_meta("renamed", {"b": 2})
        store.expire_reflog("renamed")
        raise RuntimeError("abort")
    after = (list(store.backend.iter_nodes()), store.backend.list_refs(""), store.reflog(),
             store.backend.list_session_meta(), store.backend.get_head())
    assert after == before
    store.close()


def test_a_batch_does_not_copy_the_store() -> None:
    # Guards a past bug: every batch() copied every node, ref and reflog entry up front.
    store = open_store(":memory:")
    s = store.session("big")
    with store.batch():
        for i in range(5000):
            s.add_message({"role": "user", "content": str(i)})
    tracemalloc.start()
    try:
        with store.batch():
            s.add_message({"role": "user", "content": "one more"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # a copy of 5,000 nodes' dict alone is several times this
    assert len(s) == 5001
    store.close()
