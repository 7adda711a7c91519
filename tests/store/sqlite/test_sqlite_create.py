"""Creating a store: atomic, idempotent under many concurrent creators, private.

Creators are real processes (``tests/helpers/store_child.py create``), started together and
some killed with SIGKILL at random moments; afterwards the store must open, take writes and
pass fsck. No error other than a clean exit or SIGKILL is accepted from any creator.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import open_store

CHILD = HELPERS / "store_child.py"


def spawn(*args: str, gate: Path | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if gate is not None:
        env["STORE_CHILD_GATE"] = str(gate)
    return subprocess.Popen([sys.executable, str(CHILD), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_first_open_killed_after_switching_to_wal_still_opens(tmp_path: Path) -> None:
    """What an older sesstree left when killed between ``journal_mode=WAL`` and the schema:
    an SQLite file with no tables. It is a store not yet created, not a foreign file."""
    folder = tmp_path / "s"
    folder.mkdir()
    db = sqlite3.connect(folder / "store.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    with open_store(folder) as store:
        store.session("q").add_message({"role": "user", "content": "hi"})
        assert store.fsck() == []
    with open_store(folder, create=False) as store:
        assert store.messages("q") == [{"role": "user", "content": "hi"}]


def test_an_empty_file_becomes_a_store_only_when_creating(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "store.db").touch()
    with open_store(folder) as store:
        store.session("q").add_message({"role": "user", "content": "hi"})
    with open_store(folder, create=False) as store:
        assert len(store.messages("q")) == 1


def run_creators(folder: Path, count: int, rng: random.Random, kill: bool) -> tuple[int, int]:
    """Start ``count`` creators at once, kill some at random moments; return (killed, ok)."""
    gate = folder.with_name(folder.name + ".go")
    procs = [spawn("create", str(folder), f"c{i}", gate=gate) for i in range(count)]
    for proc in procs:  # every creator is started and waiting: release them at once
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    gate.touch()
    killed = ok = 0
    if kill:
        time.sleep(rng.random() * 0.01)
        for proc in procs:
            if rng.random() < 0.5:
                proc.send_signal(signal.SIGKILL)
                time.sleep(rng.random() * 0.01)
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        if proc.returncode == -signal.SIGKILL:
            killed += 1
            continue
        assert proc.returncode == 0 and out.strip() == "OK", err[-2000:]
        ok += 1
    return killed, ok


def check_created(folder: Path, survivors: int) -> None:
    with open_store(folder) as store:
        store.session("after").add_message({"role": "user", "content": "after"})
        assert store.fsck() == []
        assert len(store.sessions()) >= survivors + 1
    assert not list(folder.glob("store.db.new-*")), "a creator's temporary file was left"


def campaign(tmp_path: Path, rounds: int, count: int, seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    killed = ok = 0
    for r in range(rounds):
        folder = tmp_path / f"s{r}"
        k, o = run_creators(folder, count, rng, kill=r % 3 != 0)
        check_created(folder, o)
        killed, ok = killed + k, ok + o
    return killed, ok


def test_concurrent_creators_some_killed(tmp_path: Path) -> None:
    campaign(tmp_path, rounds=3, count=8, seed=1)


@pytest.mark.stress
def test_concurrent_creators_some_killed_many_rounds(tmp_path: Path) -> None:
    killed, ok = campaign(tmp_path, rounds=40, count=8, seed=2)
    print(f"creators: {killed} killed, {ok} completed, every store opened")


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_a_new_store_is_private(tmp_path: Path, umask: int) -> None:
    """Folder 0700, every file 0600, whatever the umask: conversations hold secrets."""
    old = os.umask(umask)
    try:
        folder = tmp_path / "s"
        with open_store(folder) as store:
            store.session("q").add_message({"role": "user", "content": "secret"})
            files = ["store.db", "store.db-wal", "store.db-shm", "store.db.lock", "store.db.turn"]
            for name in files:
                assert (folder / name).exists(), name
                assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        os.umask(old)
