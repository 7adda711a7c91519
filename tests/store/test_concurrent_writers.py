"""Several processes writing one store at once: nothing lost, nothing dangling.

Writers on their own sessions and on one shared session run as real processes
(``tests/helpers/append_loop.py``). Shared writers lose compare-and-sets and retry, either
after ``Session.refresh()`` or with ``append(..., rebase=True)``.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import ConflictError, Store, open_store

SCRIPT = HELPERS / "append_loop.py"


def spawn(store: Path, session: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(store), session, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen[str]) -> list[int]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("ACK")]


def check_no_dangling(store: Store) -> None:
    for ref in store.backend.list_refs(""):
        assert store.backend.get(ref.target) is not None, ref
    assert store.fsck() == []


def run_writers(folder: Path, workers: int, count: int) -> None:
    open_store(folder).close()  # create it first, so no writer races the schema
    procs: dict[str, subprocess.Popen[str]] = {}
    for w in range(workers):
        procs[f"own-{w}"] = spawn(folder, f"own-{w}", "--count", str(count), "--tag", f"p{w}")
        retry = "refresh" if w % 2 == 0 else "rebase"
        procs[f"shared-{w}"] = spawn(folder, "shared", "--count", str(count), "--tag", f"p{w}",
                                     "--retry", retry)
    acked = {key: finish(proc) for key, proc in procs.items()}
    with open_store(folder, create=False) as store:
        shared = [m["content"] for m in store.messages("shared")]
        assert len(shared) == workers * count
        assert len(set(shared)) == len(shared), "an event was written twice"
        for w in range(workers):
            expected = [f"p{w}:{i}" for i in range(count)]
            assert acked[f"shared-{w}"] == list(range(count))
            # each writer's events all present exactly once, in its own order
            assert [c for c in shared if c.startswith(f"p{w}:")] == expected
            assert [m["content"] for m in store.messages(f"own-{w}")] == expected
        assert len(store.log("shared")) == workers * count
        # every move of the shared ref is logged and chains: old of each is new of the last
        # (a writer's run of appends is one entry, "append (N moves)", until another
        # writer's move comes between: the moves add up to every append)
        log = store.reflog("shared")
        assert all(a.new == b.old for a, b in itertools.pairwise(log))
        assert sum(int(found.group(1)) if (found := re.fullmatch(r"append \((\d+) moves\)",
                                                                 e.reason)) else 1
                   for e in log) == workers * count
        check_no_dangling(store)


def test_many_writers_own_and_shared_sessions(tmp_path: Path) -> None:
    run_writers(tmp_path / "s", workers=3, count=40)


@pytest.mark.stress
def test_many_writers_stress(tmp_path: Path) -> None:
    run_writers(tmp_path / "s", workers=6, count=400)


def test_writer_waits_out_a_long_batch(tmp_path: Path) -> None:
    """SQLite has one writer at a time: a writer on another session waits for a long batch
    (up to the store's timeout) and then completes. Only completion is checked, not timing."""
    folder = tmp_path / "s"
    open_store(folder).close()
    holder = spawn(folder, "long", "--hold", "1.0")
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "HOLDING"
    other = spawn(folder, "other", "--count", "5")
    assert finish(other) == list(range(5))
    rest = holder.stdout.read()
    err = holder.stderr.read() if holder.stderr else ""
    holder.stdout.close()
    if holder.stderr:
        holder.stderr.close()
    assert holder.wait(timeout=30) == 0, err
    assert rest.split() == ["ACK", "0"]
    with open_store(folder, create=False) as store:
        assert [m["content"] for m in store.messages("long")] == ["m:0"]
        assert len(store.session("other")) == 5
        check_no_dangling(store)


def test_two_handles_one_wins(tmp_path: Path) -> None:
    """Two connections race on one session: exactly one append lands, the other conflicts."""
    folder = tmp_path / "s"
    with open_store(folder) as a, open_store(folder) as b:
        a.session("q").add_message({"role": "user", "content": "base"})
        ha, hb = a.session("q"), b.session("q")
        ha.add_message({"role": "user", "content": "a"})
        with pytest.raises(ConflictError):
            hb.add_message({"role": "user", "content": "b"})
        assert [m["content"] for m in b.messages("q")] == ["base", "a"]
        hb.append("user/message", {"role": "user", "content": "b"}, rebase=True)
        assert [m["content"] for m in a.messages("q")] == ["base", "a", "b"]
        check_no_dangling(a)


def test_threads_share_one_store(store: Store) -> None:
    """Handles in several threads on one Store object (both backends are thread-safe)."""
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            own = store.session(f"t{k}")
            shared = store.session("shared")
            for i in range(30):
                own.add_message({"role": "user", "content": f"{k}:{i}"})
                while True:
                    try:
                        shared.append("user/message", {"role": "user", "content": f"{k}:{i}"},
                                      rebase=True)
                        break
                    except ConflictError:
                        pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    shared = [m["content"] for m in store.messages("shared")]
    assert sorted(shared) == sorted(f"{k}:{i}" for k in range(4) for i in range(30))
    for k in range(4):
        assert [c for c in shared if c.startswith(f"{k}:")] == [f"{k}:{i}" for i in range(30)]
        assert len(store.session(f"t{k}")) == 30
    check_no_dangling(store)


# Guards a past bug: the id->row cache outlived another connection's gc.
def test_gc_by_another_connection_does_not_leave_a_dangling_ref(tmp_path: Path) -> None:
    """A writer that cached a node's row must not point a ref at it after another
    connection's gc removed it (written, never named, then written again and named)."""
    from sesstree import make_node
    from sesstree.node import session_ref
    from sesstree.store.base import RefUpdate

    folder = tmp_path / "s"
    with open_store(folder) as a, open_store(folder) as b:
        root = make_node(None, "user/message", {"role": "user", "content": "x"})
        child = make_node(root.id, "user/message", {"role": "user", "content": "y"})
        a.write([root, child])  # an aborted import: nothing names these nodes
        assert b.gc().removed == 2
        a.write([root, child], [RefUpdate(session_ref("q"), None, child.id, "import")])
        assert [m["content"] for m in b.messages("q")] == ["x", "y"]
        check_no_dangling(b)
        check_no_dangling(a)
