"""A full disk: every read command works, every write says the disk is full (naming the
store's folder), nothing is ever called damaged, and nothing stored is lost.

On a real file system (a small tmpfs mounted for the test, filled by a filler file); the
commands run in-process and as the installed program would, in a subprocess. A WAL store's
readers need room for its ``store.db-shm`` index file (32 KB), which a full disk lacks: these
are the tests of reading without it (docs/storage.md, "On a full disk").
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_kit import Sess, msg, user_error
from small_disk import free_bytes, leave_free, make_room, mounted

import sesstree
from sesstree import StoreFullError, StoreLockedError, open_store
from sesstree.errors import StoreError
from sesstree.store.sqlite.media import translate

# The read commands whose output must be the same on a full disk as with room.
READS = [("messages",), ("log",), ("log", "--all", "--graph"), ("fsck",), ("show",),
         ("show", "b"), ("status",), ("branch", "--json"), ("messages", "--json", "b"),
         ("reflog", "--json"), ("diff", "main", "b"), ("tag", "-l"), ("export", "b", "-o", "-")]
# Writes of every kind: an append, a fork, a tag, a HEAD move, a reset, a rename, a delete,
# an import, a remote (a file of the store folder's own).
WRITES = [("append", "user/message", msg("user", "one more")), ("branch", "c"),
          ("tag", "t2"), ("checkout", "b"), ("reset", "--hard", "main~1"),
          ("branch", "-m", "b", "b2"), ("branch", "-d", "b"),
          ("import", "--as", "imp", "../../seed.jsonl"),  # (written beside the disk)
          ("remote", "add", "up", "../elsewhere")]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "disk") as where:
        yield where


@pytest.fixture
def work(disk: Path, monkeypatch: pytest.MonkeyPatch) -> Sess:
    """A store on the small disk, with a quest on main, a fork b and a tag."""
    folder = disk / "work"
    folder.mkdir()
    (disk.parent / "seed.jsonl").write_text(msg("user", "imported") + "\n")
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(folder)
    s = Sess(folder)
    s.ok("init")
    s.quest()
    s.ok("branch", "b")
    s.ok("append", "assistant/message", msg("assistant", "The mill is closed."))
    s.ok("tag", "t", "main~1")
    return s


def seen(s: Sess) -> dict[tuple[str, ...], str]:
    return {args: s.ok(*args) for args in READS}


def check_full_line(line: str, folder: Path) -> None:
    assert "disk is full" in line and str(folder) in line, line
    assert "damaged" not in line, line


def _program(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``sess ARGS`` as a process of its own (this sesstree, wherever it starts)."""
    env = {**os.environ, "PYTHONPATH": str(Path(sesstree.__file__).parents[1])}
    return subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("left", [0, 8 * 1024, 24 * 1024])
def test_reads_work_on_a_full_disk_and_writes_say_it_is_full(
    disk: Path, work: Sess, left: int
) -> None:
    before = seen(work)
    leave_free(disk, left)
    assert free_bytes(disk) <= left
    for args in READS:  # each one twice: a first failed attempt must not spoil the next
        for _ in range(2):
            assert work.ok(*args) == before[args], args
    # (its byte counts include the -shm file, so only its lines are compared)
    lines = [line.split()[0] for line in work.ok("stats").splitlines()]
    assert lines.count("nodes") == 1 and "packed" in lines and "loose" in lines
    for args in WRITES:
        check_full_line(work.fail(*args), work.root / ".sess")
    assert seen(work) == before  # nothing moved
    make_room(disk)
    assert seen(work) == before
    work.ok("append", "user/message", msg("user", "after"))
    assert "after" in work.ok("messages")
    assert work.ok("fsck").startswith("ok")


def test_the_program_on_a_full_disk(disk: Path, work: Sess) -> None:
    """The same, as a user runs it: a process of its own, exit codes, no traceback."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _program(*args, cwd=work.root)

    before = {args: run(*args).stdout for args in READS}
    leave_free(disk, 8 * 1024)
    for args in READS:
        done = run(*args)
        assert (done.returncode, done.stderr) == (0, ""), (args, done.stderr)
        assert done.stdout == before[args], args
    for args in WRITES:
        done = run(*args)
        assert done.returncode == 1 and done.stdout == "", (args, done.stdout)
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
        check_full_line(done.stderr, work.root / ".sess")
    make_room(disk)
    assert {args: run(*args).stdout for args in READS} == before


def test_appends_until_the_disk_is_full_then_reads(disk: Path, work: Sess) -> None:
    """Room for the index but not for long: appends are acknowledged until one says the
    disk is full; then every read shows exactly the acknowledged ones."""
    leave_free(disk, 48 * 1024)
    acked: list[str] = []
    for i in range(200):
        result = work("append", "user/message", msg("user", f"{i} " + "z" * 700))
        if result.exit_code != 0:
            check_full_line(user_error(result), work.root / ".sess")
            break
        acked.append(f"{i} " + "z" * 700)
    else:
        pytest.fail("200 appends fitted in 48 KB")
    assert acked  # (some did fit)
    for _ in range(2):
        texts = [m["content"] for m in work.json("messages")]
        assert texts[-len(acked):] == acked
        assert work.ok("fsck").startswith("ok")
    make_room(disk)
    assert [m["content"] for m in work.json("messages")][-len(acked):] == acked


def test_a_disk_io_error_on_a_full_disk_is_the_full_disk(disk: Path, tmp_path: Path) -> None:
    """SQLite reports some writes that found no room as a disk I/O error (its WAL index, a
    file grown ahead): on a full disk that is StoreFullError; with room it is not."""
    ioerr = sqlite3.OperationalError("disk I/O error")
    ioerr.sqlite_errorcode = 10 | (3 << 8)  # type: ignore[attr-defined]  # IOERR_WRITE
    store_file = disk / "s" / "store.db"
    store_file.parent.mkdir()
    leave_free(disk, 0)
    with pytest.raises(StoreFullError, match="disk is full") as full:
        translate(store_file, ioerr)
    assert str(disk / "s") in str(full.value)
    make_room(disk)
    with pytest.raises(StoreError) as other:
        translate(store_file, ioerr)
    assert type(other.value) is StoreError and "disk I/O error" in str(other.value)


def test_a_store_held_open_on_a_full_disk_lets_others_in(disk: Path) -> None:
    """Read without its index, the store is one connection's alone, but only while it is in
    use: a process that keeps it open (``sess serve``, a program) lets go of it when idle, so
    other processes read it meanwhile, and once there is room again it writes, shared as
    usual. While a transaction keeps it, another waits its timeout and says locked."""
    folder = disk / "s"
    with open_store(folder) as store:
        store.session("q").add_message({"role": "user", "content": "kept"})
    leave_free(disk, 8 * 1024)
    with open_store(folder) as held:
        assert [m["content"] for m in held.messages("q")] == ["kept"]
        with held.backend.snapshot():  # a read in progress: the store is its alone
            with pytest.raises(StoreLockedError, match="locked"):
                open_store(folder, timeout=0.2)
        for _ in range(2):  # idle now: another process reads, and is refused a write
            done = _program("--store", str(folder), "messages", "q")
            assert (done.returncode, done.stderr) == (0, ""), done.stderr
            assert "kept" in done.stdout
            assert [m["content"] for m in held.messages("q")] == ["kept"]
        done = _program("--store", str(folder), "append", "q", "user/message",
                        msg("user", "lost?"))
        check_full_line(done.stderr, folder)
        with pytest.raises(StoreFullError):
            held.session("q").add_message({"role": "user", "content": "lost?"})
        make_room(disk)
        held.session("q").add_message({"role": "user", "content": "mine"})
        done = _program("--store", str(folder), "append", "q", "user/message",
                        msg("user", "theirs"))
        assert done.returncode == 0, done.stderr
        assert [m["content"] for m in held.messages("q")] == ["kept", "mine", "theirs"]
    with open_store(folder) as store:
        assert [m["content"] for m in store.messages("q")] == ["kept", "mine", "theirs"]
        assert store.fsck() == []


@pytest.mark.stress
def test_full_disk_campaign(disk: Path, work: Sess) -> None:
    """Reads and writes at many levels of free space, each several times over: every
    acknowledged append is kept, every read shows exactly them, and nothing says damaged."""
    acked = [m["content"] for m in work.json("messages")]
    levels = [0, 2, 4, 8, 12, 16, 24, 32, 36, 40, 48, 64, 96, 128, 256]
    n = refused = 0
    for rounds in range(5):
        for kb in levels:
            make_room(disk)
            leave_free(disk, kb * 1024)
            for _ in range(4):
                text = f"{n} " + "y" * (n % 5 * 400)
                n += 1
                result = work("append", "user/message", msg("user", text))
                if result.exit_code == 0:
                    acked.append(text)
                else:
                    check_full_line(user_error(result), work.root / ".sess")
                    refused += 1
                assert [m["content"] for m in work.json("messages")] == acked, (rounds, kb)
                for args in (("log", "-n2"), ("fsck",), ("status",), ("branch",)):
                    result = work(*args)
                    assert result.exit_code == 0, (args, kb, result.output)
    assert refused and len(acked) > 5  # both kinds happened
    make_room(disk)
    assert [m["content"] for m in work.json("messages")] == acked
    assert work.ok("fsck").startswith("ok")
    with open_store(work.root / ".sess") as store:
        assert store.fsck() == []


def test_a_shared_stores_head_on_a_full_disk(
    disk: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL store keeps this user's HEAD in a file on this machine: with no room for
    it, a checkout says the disk is full (naming the folder), HEAD stays, and no debris."""
    monkeypatch.setenv("SESS_HOME", str(disk / "home"))
    monkeypatch.chdir(disk)
    with open_store(postgres_url) as store:
        for name in ("one", "two"):
            store.session(name).add_message({"role": "user", "content": name})
    s = Sess(disk)
    s.ok("--store", postgres_url, "checkout", "one")
    heads = disk / "home" / "heads"
    before = {p.name: p.read_bytes() for p in heads.iterdir()}
    leave_free(disk, 0)
    line = s.fail("--store", postgres_url, "checkout", "two")
    check_full_line(line, heads)
    assert {p.name: p.read_bytes() for p in heads.iterdir()} == before  # no temporary file
    assert "one" in s.ok("--store", postgres_url, "status")
    make_room(disk)
    s.ok("--store", postgres_url, "checkout", "two")
    assert "two" in s.ok("--store", postgres_url, "status")


def test_init_on_a_full_disk_makes_a_whole_store_or_none(
    disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With too little room for a new store, ``sess init`` says the disk is full and leaves
    nothing behind; never a store file that every later command would call damaged. (Room
    for the schema's log but not for folding it into the file once failed that way.)"""
    monkeypatch.delenv("SESS_STORE", raising=False)
    outcomes = set()
    for kb in range(0, 392, 16):
        make_room(disk)
        folder = disk / f"init-{kb}"
        folder.mkdir()
        monkeypatch.chdir(folder)
        s = Sess(folder)
        leave_free(disk, kb * 1024)
        result = s("init")
        if result.exit_code == 0:
            outcomes.add("made")
            make_room(disk)
            s.ok("append", "user/message", msg("user", "first"))
            assert s.ok("fsck").startswith("ok")
            continue
        outcomes.add("refused")
        check_full_line(user_error(result), folder / ".sess")
        assert not (folder / ".sess").exists(), sorted((folder / ".sess").iterdir())
        make_room(disk)
        assert "no store found" in s.fail("log")
        s.ok("init")
        s.ok("append", "user/message", msg("user", "first"))
        assert s.ok("fsck").startswith("ok")
    assert outcomes == {"made", "refused"}


@pytest.mark.parametrize("index", ["kept", "gone"])
def test_a_crash_left_log_is_read_on_a_full_disk(disk: Path, index: str) -> None:
    """A writer killed before its commits were folded into the store file leaves them in
    store.db-wal (and its index, store.db-shm, which may be gone too, as after a reboot that
    cleared it): on a full disk every read shows them all the same, and loses none."""
    folder = disk / "s"
    with open_store(folder) as store:
        store.session("q").add_message({"role": "user", "content": "folded"})
    writer = ("import os, signal, sys\nfrom sesstree import open_store\n"
              "store = open_store(sys.argv[1])\n"
              "for i in range(40):\n"
              "    store.session('q').add_message({'role': 'user', 'content': f'logged {i}'})\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(sesstree.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", writer, str(folder)], env=env, timeout=60)
    assert done.returncode == -9
    wal = folder / "store.db-wal"
    assert wal.stat().st_size > 0
    if index == "gone":
        (folder / "store.db-shm").unlink()
    expected = ["folded"] + [f"logged {i}" for i in range(40)]
    leave_free(disk, 8 * 1024)
    for _ in range(2):
        done = _program("--store", str(folder), "messages", "q", "--json")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert [m["content"] for m in json.loads(done.stdout)] == expected
        assert _program("--store", str(folder), "fsck").stdout.startswith("ok")
    make_room(disk)
    with open_store(folder) as store:
        assert [m["content"] for m in store.messages("q")] == expected
        assert store.fsck() == []
