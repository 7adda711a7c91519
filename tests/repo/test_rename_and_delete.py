"""Renaming and deleting a session move the ref, HEAD and the session's metadata together.

A failure part-way (an error injected after the ref moved) leaves nothing changed, on every
backend (a shared store's HEAD, kept outside the store's transaction, moves only once the
store has committed: if it cannot be written then, the next read of HEAD finishes the move);
a writer killed with SIGKILL at random moments in a loop of renames never leaves HEAD on a
name that no longer exists, nor metadata under the wrong name.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import Store, open_store
from sesstree.errors import StoreError
from sesstree.repo.head import FileHead
from sesstree.store.base import SessionMeta

CHILD = HELPERS / "store_child.py"


class Boom(Exception):
    pass


def prepare(store: Store, name: str = "a") -> None:
    store.session(name).add_message({"role": "user", "content": "hi"})
    store.set_head_session(name)
    store.set_session_meta(name, {"source": "import"})


def fail_on_meta(store: Store, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """Make the write of meta ``key`` fail, as a crash at that point would (HEAD: wherever
    the store keeps it; a shared store keeps it on the user's machine)."""
    if key == "HEAD" and not store._head.in_store:
        def set_head_file(value: str) -> None:
            raise StoreError("cannot write HEAD: injected")  # as an OSError is reported

        monkeypatch.setattr(store._head, "set", set_head_file)
        return
    if key == "HEAD":
        def set_head_in_store(value: str) -> None:
            raise Boom("HEAD")

        monkeypatch.setattr(store.backend, "set_head", set_head_in_store)
        return
    real = store.backend.set_session_meta
    failing = key.removeprefix("session:")

    def set_session_meta(name: str, meta: SessionMeta | None) -> None:
        if name == failing:
            raise Boom(key)
        real(name, meta)

    monkeypatch.setattr(store.backend, "set_session_meta", set_session_meta)


def check_rename_changes_nothing(store: Store, monkeypatch: pytest.MonkeyPatch,
                                 failing: str) -> None:
    prepare(store)
    head_before, log_before = store.head(), store.reflog("a")
    fail_on_meta(store, monkeypatch, failing)
    with pytest.raises(Boom):
        store.rename_session("a", "b")
    assert store.head() == head_before
    assert store.has_session("a") and not store.has_session("b")
    assert store.get_session_meta("a") == {"source": "import"}
    assert store.get_session_meta("b") is None
    assert store.reflog("a") == log_before and store.reflog("b") == []


@pytest.mark.parametrize("failing", ["session:b", "session:a"])
def test_a_rename_that_fails_part_way_changes_nothing(
        store: Store, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    check_rename_changes_nothing(store, monkeypatch, failing)


def in_store_head(kind: str, folder: Path) -> Store:
    """A store whose HEAD is kept in the store, in its transactions (memory and SQLite; a
    shared store's HEAD is written after the commit: the tests below)."""
    store = open_store(":memory:" if kind == "memory" else folder)
    assert store._head.in_store
    return store


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_rename_whose_head_write_fails_changes_nothing(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with in_store_head(kind, tmp_path / "s") as store:
        check_rename_changes_nothing(store, monkeypatch, "HEAD")


@pytest.mark.parametrize("op", ["rename", "delete"])
def test_a_head_outside_the_store_that_cannot_be_written_follows_once_it_can(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    with open_store(postgres_url) as store:
        prepare(store)
        node = store.session_head("a")
        fail_on_meta(store, monkeypatch, "HEAD")
        with pytest.raises(StoreError, match="injected"):
            if op == "rename":
                store.rename_session("a", "b")
            else:
                store.delete_session("a")
        # The store's move stands, and HEAD is read where it went, though not yet written.
        assert not store.has_session("a")
        expected = ("b", node) if op == "rename" else (None, node)
        assert store.head() == expected
        monkeypatch.undo()
        head = store._head
        assert isinstance(head, FileHead) and head.intent() is not None
        assert store.head() == expected  # this read writes it, and forgets the note
        assert head.intent() is None and head.get() == ("ref: sessions/b" if op == "rename"
                                                         else node)
        assert store.get_session_meta("b" if op == "rename" else "a") == (
            {"source": "import"} if op == "rename" else None)


@pytest.mark.parametrize("op", ["rename", "delete"])
def test_a_head_outside_that_cannot_be_written_follows_a_move_batched_with_appends(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    # In one batch the session grows, then moves: the move's reflog entry may be the one
    # its appends started (a deletion folds into it), logged before the note was written.
    with open_store(postgres_url) as store:
        prepare(store)
        fail_on_meta(store, monkeypatch, "HEAD")
        with pytest.raises(StoreError, match="injected"):
            with store.batch():
                node = store.session("a").add_message({"role": "user", "content": "more"}).id
                if op == "rename":
                    store.rename_session("a", "b")
                else:
                    store.delete_session("a")
    with open_store(postgres_url) as store:  # as the next command finds it (HEAD unpatched)
        assert store.head() == (("b", node) if op == "rename" else (None, node))


def check_delete_changes_nothing(store: Store, monkeypatch: pytest.MonkeyPatch,
                                 failing: str) -> None:
    prepare(store)
    fail_on_meta(store, monkeypatch, failing)
    with pytest.raises(Boom):
        store.delete_session("a")
    assert store.head()[0] == "a" and store.has_session("a")
    assert store.get_session_meta("a") == {"source": "import"}
    assert len(store.reflog("a")) == 1


def test_a_delete_that_fails_part_way_changes_nothing(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    check_delete_changes_nothing(store, monkeypatch, "session:a")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_delete_whose_head_write_fails_changes_nothing(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with in_store_head(kind, tmp_path / "s") as store:
        check_delete_changes_nothing(store, monkeypatch, "HEAD")


def check_consistent(folder: Path) -> str:
    with open_store(folder, create=False) as store:
        names = [s.name for s in store.sessions()]
        assert len(names) == 1 and names[0] in ("a", "b"), names
        (name,) = names
        head_name, head_node = store.head()
        assert head_name == name and head_node is not None, (head_name, name)
        assert store.get_session_meta(name) == {"source": "import"}
        other = "b" if name == "a" else "a"
        assert store.get_session_meta(other) is None
        assert store.fsck() == []
        return name


def kill_renames(folder: Path, rounds: int, seed: int) -> int:
    rng = random.Random(seed)
    with open_store(folder) as store:
        prepare(store)
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, str(CHILD), "rename", str(folder)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(rng.randint(1, 20)):
            if not proc.stdout.readline().startswith("ACK"):
                raise AssertionError(proc.communicate(timeout=30)[1])
        time.sleep(rng.random() * 0.005)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, err
        check_consistent(folder)
    return rounds


def test_sigkill_during_renames_never_leaves_head_dangling(tmp_path: Path) -> None:
    kill_renames(tmp_path / "s", rounds=12, seed=1)


@pytest.mark.stress
def test_sigkill_during_renames_many_rounds(tmp_path: Path) -> None:
    kill_renames(tmp_path / "s", rounds=150, seed=2)
