"""What the compression dictionary costs an append (SQLite, default durability).

Two stores are made alike: 1,100 messages written in one batch, then the writer closes (and
trains the dictionary, see sesstree.store.sqlite.dicts); from one of them the dictionary is
then removed again (its rows were all written before it, plain, so the store stays whole).
Then ``n`` appends of bench_store's messages go to a new session of each, one by one, timed,
in alternating rounds, with the seed's JSONL open/append/close in the same rounds; each
figure is the best round. Prints JSON.

    python bench/bench_dict_append.py [n] [rounds]
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_store import message, seed_append

from sesstree import open_store
from sesstree.store.codec import TRAIN_AFTER

__all__ = ["main"]


def _prepared(tmp: Path, with_dict: bool) -> Path:
    folder = Path(tempfile.mkdtemp(dir=tmp)) / "s"
    with open_store(folder) as store:
        s = store.session("base")
        with store.batch():
            for i in range(TRAIN_AFTER + 100):
                s.add_message(message(i))
    db = sqlite3.connect(folder / "store.db")
    try:
        assert db.execute("SELECT count(*) FROM dicts").fetchone()[0] == 1
        if not with_dict:
            with db:
                db.execute("DELETE FROM dicts")
    finally:
        db.close()
    return folder


def _ours(tmp: Path, with_dict: bool, msgs: list[dict[str, Any]]) -> tuple[float, dict[Any, int]]:
    folder = _prepared(tmp, with_dict)
    store = open_store(folder)
    s = store.session("a")
    t = time.perf_counter()
    for m in msgs:
        s.add_message(m)
    elapsed = time.perf_counter() - t
    store.close()
    db = sqlite3.connect(folder / "store.db")
    try:
        rows = db.execute(
            "SELECT codec, count(*) FROM nodes WHERE seq > ? GROUP BY codec", (TRAIN_AFTER + 100,)
        ).fetchall()
    finally:
        db.close()
    return elapsed / len(msgs), dict(rows)


def _seed(tmp: Path, msgs: list[dict[str, Any]]) -> float:
    path = Path(tempfile.mkdtemp(dir=tmp)) / "a.jsonl"
    t = time.perf_counter()
    for m in msgs:
        seed_append(path, m)
    return (time.perf_counter() - t) / len(msgs)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    msgs = [message(TRAIN_AFTER + 100 + i) for i in range(n)]
    runs: dict[str, list[float]] = {"dict": [], "plain": [], "seed": []}
    codecs: dict[str, dict[Any, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            runs["seed"].append(_seed(Path(tmp), msgs))
            t, codecs["dict"] = _ours(Path(tmp), True, msgs)
            runs["dict"].append(t)
            t, codecs["plain"] = _ours(Path(tmp), False, msgs)
            runs["plain"].append(t)
    best = {k: min(v) * 1e6 for k, v in runs.items()}
    print(json.dumps({
        "n": n, "rounds": rounds,
        "with_dictionary_us": round(best["dict"], 2),
        "without_dictionary_us": round(best["plain"], 2),
        "seed_us": round(best["seed"], 2),
        "dictionary_costs_us": round(best["dict"] - best["plain"], 2),
        "with_dictionary_speed_vs_seed": round(best["seed"] / best["dict"], 3),
        "rows_by_codec": {k: {str(c): m for c, m in v.items()} for k, v in codecs.items()},
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
