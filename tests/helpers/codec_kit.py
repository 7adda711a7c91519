"""Agent-like traffic and a look inside a store's payload codecs, for the codec tests of both engines."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sesstree import open_store
from sesstree.store.codec import TRAIN_AFTER

WORDS = ("read the file and run the tests then fix the error in the store session node "
         "commit branch fork value data path write output input config").split()


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def traffic(n: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        role = ("user", "assistant")[i % 2]
        out.append({"role": role, "content": f"#{i} " + text(rng, rng.randint(20, 120))})
    return out


def db_at(folder: Path) -> sqlite3.Connection:
    return sqlite3.connect(folder / "store.db")


def codecs(folder: Path) -> dict[object, int]:
    db = db_at(folder)
    try:
        return dict(db.execute("SELECT codec, count(*) FROM nodes GROUP BY codec").fetchall())
    finally:
        db.close()


def packs(folder: Path) -> list[tuple[int, int, int, int]]:
    """The store's packs as (pid, first depth, count, codec), oldest first."""
    db = db_at(folder)
    try:
        return [tuple(r) for r in db.execute("SELECT pid, depth, count, codec FROM packs ORDER BY pid")]
    finally:
        db.close()


def repacked(folder: Path) -> list[tuple[int, int, int, int]]:
    """Pack every loose tail of the store (``sess repack``); returns its packs (see packs)."""
    with open_store(folder) as store:
        counts = store.repack()
        assert counts is not None and counts.loose_nodes == 0
    return packs(folder)


def read_only_run(folder: Path, code: str) -> str:
    """Run the Python ``code`` (``sys.argv[1]``: the store's folder) in a process that truly
    cannot write the store, and return what it printed. As root, file modes alone do not stop
    a write: the process drops the capability that overrides them."""
    cmd = [sys.executable, "-c", code, str(folder)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot make the store read-only")
        cmd = ["setpriv", "--bounding-set=-dac_override", "--inh-caps=-dac_override", *cmd]
    path = folder / "store.db"
    path.chmod(0o400)
    folder.chmod(0o500)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        folder.chmod(0o700)
        path.chmod(0o600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def trained(folder: Path, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A store whose dictionary is trained (one batch past TRAIN_AFTER, then the writer
    closes: it trains then), then 200 more messages and ``extra`` appended one by one;
    returns every message, in order."""
    msgs = traffic(TRAIN_AFTER + 200)
    with open_store(folder) as store:
        s = store.session("q")
        with store.batch():
            for m in msgs[:TRAIN_AFTER]:
                s.add_message(m)
    with open_store(folder) as store:
        s = store.session("q")
        for m in msgs[TRAIN_AFTER:] + (extra or []):
            s.add_message(m)
    return msgs + (extra or [])


ODD = [
    {"role": "user", "content": ""},                                  # empty
    {"role": "user", "content": "x"},                                 # tiny
    {"role": "user", "content": "é漢字🙂 " * 60},                       # unicode, frame in row
    {"role": "tool", "tool_call_id": "c", "content": "ü∑" * 200_000},  # huge, stored apart
    # Incompressible, small and large: a frame would be no smaller, or barely.
    {"role": "user", "content": os.urandom(300).hex()},
    {"role": "tool", "tool_call_id": "d", "content": os.urandom(6000).hex()},
]
