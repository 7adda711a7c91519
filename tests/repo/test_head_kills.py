"""Kill ``sess branch -m`` and ``sess branch -d``: HEAD never dangles, on any engine.

A shared store's HEAD is a file of this user on this machine, outside the store's
transaction (see ``sesstree.repo.head``); a local store's moves in it. Each round runs the real
command against the run's real PostgreSQL server (or a SQLite folder) and SIGKILLs it, at a
random moment or at a chosen point (right before the store's transaction commits, right
after it), then checks what the user sees: ``sess status`` names the session as it was
before the command or as it is after, with all its events, and the next ``sess append``
continues that session instead of starting a new one.

Around the kills: a move retried after a kill finishes the first, and one that fails puts
back the note it replaced (another terminal's); a note left by a killed
rename never moves HEAD onto a session made later under the same name; a checkout in another
terminal during a rename is kept; the note and HEAD are synced before what follows them (a
power loss); a damaged note is ignored or named, and a damaged HEAD file is one error naming
it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from core_testkit import HELPERS

from sesstree import open_store
from sesstree.errors import StoreError
from sesstree.repo.head import head_file_for
from sesstree.store.postgres.backend import PostgresBackend
from sesstree.testing import user

SESS = str(Path(sys.executable).with_name("sess"))  # the console script, as a user runs it
KILLED_AT = HELPERS / "sess_killed_at.py"


def sess(url: str, *args: str) -> str:
    done = subprocess.run([SESS, "--store", url, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def status(url: str) -> dict[str, object]:
    found: dict[str, object] = json.loads(sess(url, "status", "--json"))
    return found


def killed(cmd: list[str], delay: float | None) -> None:
    """Run ``cmd``; SIGKILL it after ``delay`` seconds (None: it kills itself)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if delay is not None:
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    # Killed, or done before the kill came: either way a user may find it like this.
    assert proc.returncode in (0, -signal.SIGKILL), err


def prepare(url: str) -> int:
    with open_store(url) as store:
        s = store.session("a")
        for i in range(3):
            s.add_message(user(f"m{i}"))
        store.set_head_session("a")
        store.set_session_meta("a", {"title": "kept"})
    return 3


def check_after_kill(url: str, old: str, new: str, length: int) -> str:
    """HEAD names ``old`` or ``new``, the one that exists, with its ``length`` events; the
    next append continues it. Returns its name."""
    seen = status(url)
    assert seen["session"] in (old, new) and seen["length"] == length, seen
    name = str(seen["session"])
    with open_store(url) as store:
        names = [i.name for i in store.sessions()]
        assert names == [name], (names, seen)  # the one HEAD names, and no other
        assert store.get_session_meta(name) == {"title": "kept"}
    sess(url, "append", "user/message", json.dumps(user(f"m{length}")))
    with open_store(url) as store:
        assert [i.name for i in store.sessions()] == [name]
        assert [m["content"] for m in store.messages(name)] == [
            f"m{i}" for i in range(length + 1)]
        assert store.fsck() == []
    return name


def rename_rounds(url: str, rounds: int, seed: int) -> set[str]:
    """Kill renames at random moments; return which outcomes were seen ("old", "new")."""
    rng = random.Random(seed)
    length = prepare(url)
    # How long an undisturbed rename takes here: kills are spread over that, and the half
    # of them past 70% of it land around the store's transaction, where the danger is.
    began = time.monotonic()
    sess(url, "branch", "-m", "a", "b")
    sess(url, "branch", "-m", "b", "a")
    took = (time.monotonic() - began) / 2
    current, seen = "a", set()
    for _ in range(rounds):
        other = "b" if current == "a" else "a"
        delay = took * (rng.random() if rng.random() < 0.5 else 0.7 + 0.35 * rng.random())
        killed([SESS, "--store", url, "branch", "-m", current, other], delay)
        name = check_after_kill(url, current, other, length)
        seen.add("old" if name == current else "new")
        current, length = name, length + 1
    return seen


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_a_rename_killed_at_either_side_of_its_commit_leaves_head_on_a_session(
        postgres_url: str, point: str) -> None:
    length = prepare(postgres_url)
    killed([sys.executable, str(KILLED_AT), point, "--store", postgres_url,
            "branch", "-m", "a", "b"], None)
    name = check_after_kill(postgres_url, "a", "b", length)
    assert name == ("a" if point == "before-commit" else "b")


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_a_delete_killed_at_either_side_of_its_commit_leaves_head_where_it_was(
        postgres_url: str, point: str) -> None:
    length = prepare(postgres_url)
    with open_store(postgres_url) as store:
        node = store.session_head("a")
    killed([sys.executable, str(KILLED_AT), point, "--store", postgres_url,
            "branch", "-d", "a"], None)
    seen = status(postgres_url)
    if point == "before-commit":  # nothing happened: HEAD on the session, all of it there
        assert seen == {"session": "a", "detached": False, "head": node, "length": length}
    else:  # deleted: HEAD detached where the session was, as an undisturbed delete leaves it
        assert seen == {"session": None, "detached": True, "head": node, "length": length}
        with open_store(postgres_url) as store:
            assert store.sessions() == [] and store.head() == (None, node)
            assert store.fsck() == []


@pytest.fixture(params=["postgres", "sqlite"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store is: a PostgreSQL URL (HEAD in a file here), or a SQLite folder."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "s")


def test_renames_killed_at_random_moments_leave_head_on_a_session(store_at: str) -> None:
    rename_rounds(store_at, rounds=3, seed=1)


@pytest.mark.stress
def test_renames_killed_at_random_moments_many_rounds(store_at: str) -> None:
    seen = rename_rounds(store_at, rounds=60, seed=2)
    assert seen == {"old", "new"}  # the kills landed on both sides of the commit


@pytest.mark.parametrize("retry", [["branch", "-m", "a", "b"], ["branch", "-m", "a", "c"],
                                   ["branch", "-d", "a"]],
                         ids=["the same rename", "another rename", "a delete"])
def test_a_move_retried_after_a_kill_past_its_commit_still_finishes_the_first(
        postgres_url: str, retry: list[str]) -> None:
    # Killed after its commit, the rename left HEAD on a (gone) and its note. The user runs
    # the command again (or another move of a): that fails, as a is gone, and must not
    # replace the note that finishes the first rename.
    length = prepare(postgres_url)
    killed([sys.executable, str(KILLED_AT), "after-commit", "--store", postgres_url,
            "branch", "-m", "a", "b"], None)
    assert "no session named 'a'" in sess_fails(postgres_url, *retry)
    assert check_after_kill(postgres_url, "a", "b", length) == "b"


def test_a_note_of_a_killed_rename_never_moves_head_onto_an_unrelated_session(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Session b's reflog already logs "renamed a to b", from a rename long done (b was
    # deleted since); the user is on a fresh session a.
    prepare(postgres_url)
    sess(postgres_url, "branch", "-m", "a", "b")
    sess(postgres_url, "branch", "-d", "b")
    sess(postgres_url, "append", "a", "user/message", json.dumps(user("mine")))
    sess(postgres_url, "checkout", "a")
    # This rename is killed before its commit: the note of the move stays beside HEAD.
    killed([sys.executable, str(KILLED_AT), "before-commit", "--store", postgres_url,
            "branch", "-m", "a", "b"], None)
    assert status(postgres_url)["session"] == "a"
    # Another user of the store deletes a, and starts a b of their own.
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "other-user"))
    sess(postgres_url, "branch", "-d", "a")
    sess(postgres_url, "append", "b", "user/message", json.dumps(user("theirs")))
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "sess-home"))
    # The old entry is not the noted move, which never committed: HEAD stays on a (gone,
    # as that user left it), never on their b.
    assert status(postgres_url) == {"session": "a", "detached": False, "head": None,
                                    "length": 0}


def test_a_checkout_made_in_another_terminal_during_a_rename_is_kept(postgres_url: str) -> None:
    # Two terminals of one user share the HEAD file. While the rename's transaction is open
    # in one, the other checks out c: that newer checkout must survive the rename's commit.
    prepare(postgres_url)
    with open_store(postgres_url) as setup:
        setup.session("c").add_message(user("c"))
    with open_store(postgres_url) as renaming, open_store(postgres_url) as other:
        with renaming.batch():
            renaming.rename_session("a", "b")
            assert other.checkout("c")[0] == "c"
        assert renaming.head()[0] == other.head()[0] == "c"
    assert status(postgres_url)["session"] == "c"


def test_the_note_is_on_disk_before_the_transaction_and_head_before_the_note_goes(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A power loss is a kill that also loses what was not synced: the note must be synced
    # (the file, then its folder's entry for it) before the store's transaction can commit,
    # and the new HEAD synced before the note is removed, or a reboot finds HEAD on a session
    # that is gone with no note to finish the move.
    prepare(postgres_url)
    done: list[str] = []
    real_fsync, real_rename, real_unlink = os.fsync, PostgresBackend.rename_ref, Path.unlink

    def fsync(fd: int) -> None:
        real_fsync(fd)
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        # (a file's data is synced under its temporary name, .NAME.RANDOM, before the rename)
        done.append("sync " + (name[1:].rsplit(".", 1)[0] if name.startswith(".") else name))

    def rename_ref(self: PostgresBackend, *args: Any) -> None:
        done.append("rename")
        real_rename(self, *args)

    def unlink(self: Path, missing_ok: bool = False) -> None:
        done.append("unlink " + self.name)
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(PostgresBackend, "rename_ref", rename_ref)
    monkeypatch.setattr(Path, "unlink", unlink)
    with open_store(postgres_url) as store:
        head = head_file_for(postgres_url)
        store.rename_session("a", "b")
    note, folder = head.name + ".moving", head.parent.name
    assert done == [f"sync {note}", f"sync {folder}", "rename",
                    f"sync {head.name}", f"sync {folder}", f"unlink {note}"], done
    assert head.read_text() == "ref: sessions/b\n" and not head.with_name(note).exists()


def sess_fails(url: str, *args: str) -> str:
    """Run a command that must fail with one clear line (exit 1, no internal error)."""
    done = subprocess.run([SESS, "--store", url, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done.stderr)
    return done.stderr


@pytest.mark.parametrize("damage", ["truncated", "not UTF-8", "wrong fields", "a folder"])
def test_a_damaged_note_beside_head_is_ignored_or_named(postgres_url: str, damage: str) -> None:
    prepare(postgres_url)
    head = head_file_for(postgres_url)
    note = head.with_name(head.name + ".moving")
    if damage == "a folder":
        note.mkdir()
    else:
        note.write_bytes({"truncated": b'{"before": "ref: sessions/a", "ref', "not UTF-8":
                          b"\xff\xfe\x00", "wrong fields": b'{"before": 1, "ref": []}'}[damage])
    sess(postgres_url, "checkout", "-b", "c")  # HEAD moves; what is beside it does not matter
    assert status(postgres_url)["session"] == "c"
    sess(postgres_url, "checkout", "a")
    if damage == "a folder":  # no note can be written: the rename is refused, naming it
        assert str(note) in sess_fails(postgres_url, "branch", "-m", "a", "b")
        assert status(postgres_url) == {"session": "a", "detached": False,
                                        "head": status(postgres_url)["head"], "length": 3}
    else:
        sess(postgres_url, "branch", "-m", "a", "b")
        assert status(postgres_url)["session"] == "b" and not note.exists()


def test_a_head_file_that_is_not_text_is_one_error_naming_it(postgres_url: str) -> None:
    prepare(postgres_url)
    head = head_file_for(postgres_url)
    head.write_bytes(b"\xff\xfe ref: sessions/a\n")
    for args in (["status"], ["append", "user/message", json.dumps(user("m3"))],
                 ["checkout", "a"]):
        said = sess_fails(postgres_url, *args)
        assert str(head) in said and "remove it" in said, said
    head.unlink()  # as the error says: HEAD is then the default, and nothing else changed
    assert status(postgres_url)["session"] == "main"
    sess(postgres_url, "checkout", "a")
    assert status(postgres_url)["length"] == 3


def test_a_move_that_fails_puts_back_the_note_it_replaced(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two terminals: one renames a to b, the other (a still there) starts renaming a to c,
    # replacing the note beside HEAD, and waits on the first's transaction. The first commits
    # and dies before writing HEAD; the second then fails (a is gone). The first's note must
    # be back for the next read to finish its rename.
    length = prepare(postgres_url)
    head = head_file_for(postgres_url)
    note = head.with_name(head.name + ".moving")
    with open_store(postgres_url) as first, open_store(postgres_url) as second:
        def killed_before_head(value: str) -> None:
            raise StoreError("killed: HEAD not written")

        monkeypatch.setattr(first._head, "set", killed_before_head)
        failed: list[BaseException] = []

        def rename_to_c() -> None:
            try:
                second.rename_session("a", "c")
            except BaseException as exc:  # (reported below)
                failed.append(exc)

        with pytest.raises(StoreError, match="killed"):
            with first.batch():
                first.rename_session("a", "b")
                mine = note.read_bytes()
                racing = threading.Thread(target=rename_to_c)
                racing.start()
                while racing.is_alive() and note.read_bytes() == mine:
                    racing.join(0.01)  # until the second's note replaces the first's
                assert note.read_bytes() != mine and racing.is_alive()  # waiting on our lock
        racing.join()
        assert failed and "a" in str(failed[0]), failed
    assert check_after_kill(postgres_url, "a", "b", length) == "b"
