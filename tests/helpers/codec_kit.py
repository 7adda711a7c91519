"""Agent-like traffic and a look inside a store's payload codecs, for the codec tests of both engines."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path
from typing import Any

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
