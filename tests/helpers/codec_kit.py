"""Agent-like traffic and a look inside a store's payload codecs, for the codec tests of both engines."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

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
    """How the store's loose rows keep their type and payload: codec -> rows (None: plain).
    Format 5 keeps them in ``loose``; a row an upgraded format-4 store wrote keeps them in its
    own ``nodes`` row until it is packed. Packed rows are not counted."""
    db = db_at(folder)
    try:
        return dict(db.execute(
            "SELECT coalesce(l.codec, n.codec), count(*) FROM nodes n "
            "LEFT JOIN loose l ON l.seq = n.seq WHERE n.pack IS NULL GROUP BY 1").fetchall())
    finally:
        db.close()


def blob_codecs(folder: Path) -> dict[object, int]:
    """The codecs of the store's blobs (payloads stored apart): codec -> blobs."""
    db = db_at(folder)
    try:
        return dict(db.execute("SELECT codec, count(*) FROM blobs GROUP BY codec").fetchall())
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


#: A format-4 store written by the sesstree of format 4, its file compressed (see
#: ``tests/store/sqlite/data/make_format4_long.py``), and what that sesstree read back from it.
FORMAT4_LONG = Path(__file__).resolve().parents[1] / "store" / "sqlite" / "data" / "format4_long"
FORMAT4_READ: dict[str, Any] = json.loads(FORMAT4_LONG.with_suffix(".json").read_text())


def format4_long(folder: Path) -> Path:
    """A copy of the long format-4 store in ``folder`` (made). Its later rows (1003 to 1150)
    include 81 zstd frames made with its dictionary 1, one per row, which format 5 never
    writes: the tests of per-row frames damage those (see ``frames_on``)."""
    folder.mkdir(parents=True)
    packed = FORMAT4_LONG.with_suffix(".db.zst").read_bytes()
    (folder / "store.db").write_bytes(zstandard.ZstdDecompressor().decompress(packed))
    return folder


def path_rows(folder: Path, session: str) -> list[tuple[int, bytes, bytes, int | None, int | None]]:
    """The rows on ``session``'s path, newest first: (row, node id, ``nodes.data``,
    ``nodes.codec``, ``nodes.pack``)."""
    db = db_at(folder)
    try:
        return [tuple(r) for r in db.execute("""
            WITH RECURSIVE up(seq) AS (
                SELECT (SELECT new FROM reflog WHERE ref = ? ORDER BY n DESC LIMIT 1)
                UNION ALL SELECT n.parent FROM nodes n JOIN up ON n.seq = up.seq
                WHERE n.parent IS NOT NULL)
            SELECT n.seq, n.id, n.data, n.codec, """
            + ("n.pack" if "pack" in {c[1] for c in db.execute("PRAGMA table_info(nodes)")}
               else "NULL")
            + " FROM up JOIN nodes n ON n.seq = up.seq ORDER BY n.seq DESC",
            (f"sessions/{session}",))]
    finally:
        db.close()


def frames_on(folder: Path, session: str) -> list[tuple[int, bytes, bytes]]:
    """The loose rows on ``session``'s path that are zstd frames made with dictionary 1 in
    their own ``nodes`` row (as format 4 wrote them), newest first: (row, node id, frame)."""
    return [(r[0], r[1], r[2]) for r in path_rows(folder, session) if r[3] == 1 and r[4] is None]


def digest(value: Any) -> str:
    """What ``FORMAT4_READ`` holds of a session's messages (see make_format4_long.summary)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


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
