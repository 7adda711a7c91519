"""Kill a process with SIGKILL while it packs: a writer whose appends pack inline every 256, a
repack of a store written loose, and gc rebuilding the packs that lost rows after rewinds.

The child is ``tests/helpers/pack_crash_child.py``. It is killed either at a random moment or
just after it says it committed a pack (or started rebuilding them), so that the kill lands
inside the next pack's transaction. After every kill the store must open, read back exactly
what it held (every acknowledged append, in order), pass ``fsck``, and let the interrupted
job finish: a later repack leaves no loose node, a later gc leaves no pack holding a removed
node.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from core_testkit import HELPERS
from pack_crash_child import message

import sesstree
from sesstree import open_store
from sesstree.store.sqlite import packing

CHILD = HELPERS / "pack_crash_child.py"


def spawn(job: str, folder: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(sesstree.__file__).resolve().parents[1])}
    return subprocess.Popen([sys.executable, str(CHILD), job, str(folder), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_when(proc: subprocess.Popen[str], word: str, times: int, delay: float) -> list[str]:
    """SIGKILL the child ``delay`` seconds after its ``times``-th line starting with ``word``
    (or when it ends). Returns every line it printed, those still in the pipe too."""
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    seen = 0
    for line in proc.stdout:
        lines.append(line.strip())
        seen += line.startswith(word)
        if seen >= times:
            break
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with proc.stdout, proc.stderr:
        rest, err = proc.stdout.read(), proc.stderr.read()
    lines += [x.strip() for x in rest.splitlines()]
    assert proc.returncode in (-signal.SIGKILL, 0), err
    assert "START" in lines, err
    return lines


def contents(store: Any, name: str) -> list[Any]:
    return store.messages(name)


def loose_rows(folder: Path) -> tuple[int, int, int, int, int]:
    """Node rows, packs, loose node rows, packs no node row names, and nodes packs hold that
    no row names any more (the last two: what a gc that stopped may leave for the next)."""
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        rows, packs = db.execute("SELECT (SELECT count(*) FROM nodes), "
                                 "(SELECT count(*) FROM packs)").fetchone()
        loose = db.execute("SELECT count(*) FROM nodes WHERE pack IS NULL").fetchone()[0]
        orphans = db.execute("SELECT count(*) FROM packs WHERE pid NOT IN "
                             "(SELECT pack FROM nodes WHERE pack IS NOT NULL)").fetchone()[0]
        extra = db.execute("SELECT (SELECT coalesce(sum(count), 0) FROM packs) - "
                           "(SELECT count(*) FROM nodes WHERE pack IS NOT NULL)").fetchone()[0]
    return int(rows), int(packs), int(loose), int(orphans), int(extra)


# -- (a) a writer packing inline -------------------------------------------------------------


def test_a_writer_killed_while_it_packs_loses_no_acknowledged_append(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    rng = random.Random(221)
    acked: list[int] = []
    outcomes: dict[str, int] = {}
    for round in range(8):
        proc = spawn("write", folder, "quest")
        if round % 2:  # as it packs: inside the pack's transaction, or just after it
            lines = kill_when(proc, "PACKING", 1, rng.random() * 0.004)
        else:  # at a random moment, a few hundred appends in
            lines = kill_when(proc, "ACK", rng.randint(50, 700), rng.random() * 0.01)
        acked += [int(x.split()[1]) for x in lines if x.startswith("ACK ")]
        packs = sum(x == "PACKED" for x in lines)
        mid = lines.count("PACKING") - packs  # killed inside a pack's transaction
        with open_store(folder, create=False) as store:
            got = contents(store, "quest")
            assert got == [message(i) for i in range(len(got))], "a gap, a reorder or a change"
            assert len(got) > max(acked), (len(got), max(acked))
            assert store.fsck() == []
            counts = store.backend.pack_counts()
            # Each child's appends are one run: one reflog entry per child, each fold
            # committed (the entry ends at the last append that was, acknowledged or not).
            log = store.reflog("quest")
            assert len(log) <= round + 1 and log[-1].reason.startswith("append")
            assert log[-1].new == store.session_head("quest")
        key = "killed as it packed" if round % 2 else "killed at random"
        outcomes[key] = outcomes.get(key, 0) + 1
        print(f"round {round}: {key}; {len(got)} messages ({max(acked) + 1} acknowledged), "
              f"{packs} packs committed by the child, {mid} cut short; store: {counts}")
    with open_store(folder, create=False) as store:
        assert store.backend.pack_counts().packs >= 4  # packing did run in the children


# -- (b) a repack -----------------------------------------------------------------------------


def write_loose(folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """A store whose history is all loose (packing held off), with forks; what it reads."""
    monkeypatch.setattr(packing, "PACK_AT", 10**9)
    monkeypatch.setattr(packing, "PACK_MIN", 10**9)
    with open_store(folder) as store:
        main = store.session("main")
        for i in range(2500):
            main.add_message(message(i))
        store.fork("early", "main~2200")
        store.fork("late", "main~300")
        for i in range(400):
            store.session("early").add_message(message(10_000 + i))
        for i in range(40):
            store.session("late").add_message(message(20_000 + i))
        store.fork("bare", "main~1000")  # a fork that adds nothing
        expected = {n: store.messages(n) for n in ("main", "early", "late", "bare")}
        assert store.backend.pack_counts().packs == 0
    monkeypatch.undo()
    return expected


def check_reads(folder: Path, expected: dict[str, list[Any]]) -> None:
    with open_store(folder, create=False) as store:
        for name, want in expected.items():
            assert store.messages(name) == want, name
        assert store.fsck() == []


def test_a_repack_killed_midway_leaves_a_sound_store_and_a_later_one_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = tmp_path / "loose"
    expected = write_loose(original, monkeypatch)
    rng = random.Random(222)
    for round in range(6):
        folder = tmp_path / f"r{round}"
        shutil.copytree(original, folder)
        proc = spawn("repack", folder)
        if round < 4:
            lines = kill_when(proc, "PACKING", rng.randint(1, 4), rng.random() * 0.004)
        else:
            lines = kill_when(proc, "START", 1, rng.random() * 0.05)
        made = sum(x == "PACKED" for x in lines)
        loose_before = loose_rows(folder)[2]
        check_reads(folder, expected)
        with open_store(folder, create=False) as store:
            counts = store.backend.repack()
            assert counts.loose_nodes == 0, counts
        check_reads(folder, expected)
        assert loose_rows(folder)[2:] == (0, 0, 0)
        print(f"round {round}: killed after {made} packs had committed ({loose_before} rows "
              f"left loose); "
              f"a second repack: {counts}")


# -- (c) gc rebuilding packs ------------------------------------------------------------------


def write_rewound(folder: Path) -> dict[str, list[Any]]:
    """A packed store, then rewound: sessions reset back into their packs and forks deleted,
    their reflogs expired, so that gc drops whole packs and rebuilds the ones cut in two."""
    with open_store(folder) as store:
        main = store.session("main")
        for i in range(1800):
            main.add_message(message(i))
        for k in range(6):
            name = f"fork{k}"
            store.fork(name, f"main~{300 * k + 50}")
            for i in range(250):
                store.session(name).add_message(message(30_000 + 1000 * k + i))
    with open_store(folder) as store:
        store.reset("main", "main~700")  # inside a pack
        for k in range(0, 6, 2):
            store.delete_session(f"fork{k}")
        store.reset("fork1", "fork1~125")
        for name in ["main", *(f"fork{k}" for k in range(6))]:
            store.expire_reflog(name)
        expected = {n: store.messages(n) for n in ("main", "fork1", "fork3", "fork5")}
        gone = len(store.gc(dry_run=True).unreachable)
    assert gone > 1000, gone  # gc deletes them in several transactions (gc.CHUNK)
    return expected


def test_gc_killed_while_it_rebuilds_packs_leaves_a_sound_store(tmp_path: Path) -> None:
    original = tmp_path / "rewound"
    expected = write_rewound(original)
    before = loose_rows(original)
    rng = random.Random(223)
    for round in range(8):
        folder = tmp_path / f"g{round}"
        shutil.copytree(original, folder)
        proc = spawn("gc", folder)
        if round < 3:  # while it deletes rows (a chunk drops the packs it empties)
            lines = kill_when(proc, "CHUNK", round + 1, rng.random() * 0.003)
        else:  # while it rebuilds the packs cut in two
            lines = kill_when(proc, "TRIM", 1, rng.random() * 0.006)
        left = loose_rows(folder)
        check_reads(folder, expected)
        with open_store(folder, create=False) as store:
            store.gc()
        check_reads(folder, expected)
        after = loose_rows(folder)
        assert after[3:] == (0, 0), after
        print(f"round {round}: killed {'after' if 'DONE' in lines else 'in'} gc "
              f"({'rebuilding packs' if 'TRIM' in lines else 'deleting rows'}, after "
              f"{lines.count('CHUNK')} deletes): left {left}, after a second gc: {after} "
              f"(before: {before}; node rows, packs, loose rows, packs no row names, removed "
              "nodes still in packs)")
