"""Appends per second of several sesstree trees, side by side: each tree in a process of its
own, the trees alternating, so a slow spell of a shared machine hits each alike.

    python bench/bench_append_trees.py /tmp/before /work/wt/append   # two checkouts
    python bench/bench_append_trees.py --alternations 8 --durable A B

A tree is a checkout's root (its ``src`` goes first on ``PYTHONPATH``; make an old one with
``git worktree add --detach /tmp/before COMMIT``). Each run appends the bench traffic
(agent_traffic.py) one message at a time to a new store, ``--rounds`` times, and keeps its
best; it reports the wall clock and the appending thread's CPU time (``time.thread_time``),
which another process's load disturbs much less, and which leaves out what a background
thread does. ``--close`` counts the store's close too (what a writer's close still packs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_run(count: int, rounds: int, durable: bool, close: bool) -> dict[str, float]:
    """In the child: the best appends/s of ``rounds`` fills of ``count`` messages."""
    sys.path.insert(0, str(HERE))
    from agent_traffic import Traffic

    from sesstree import open_store

    stream = Traffic(seed=22).messages(count)
    wall = cpu = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            store = open_store(Path(tmp) / f"s{r}",
                               **({"durability": "durable"} if durable else {}))
            session = store.session("quest")
            t, c = time.perf_counter(), time.thread_time()
            for m in stream:
                session.add_message(m)
            if close:
                store.close()
            elapsed, spent = time.perf_counter() - t, time.thread_time() - c
            if not close:
                store.close()
            wall, cpu = max(wall, count / elapsed), max(cpu, count / spent)
    return {"wall": wall, "cpu": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="*", help="checkout roots to compare")
    parser.add_argument("--count", type=int, default=5_000, help="appends per fill")
    parser.add_argument("--rounds", type=int, default=4, help="fills per run (best kept)")
    parser.add_argument("--alternations", type=int, default=6)
    parser.add_argument("--durable", action="store_true", help="durability='durable'")
    parser.add_argument("--close", action="store_true", help="count the close too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.count, args.rounds, args.durable, args.close)))
        return 0
    if not args.trees:
        parser.error("name at least one tree")
    results: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    flags = [f"--count={args.count}", f"--rounds={args.rounds}"]
    flags += ["--durable"] * args.durable + ["--close"] * args.close
    for a in range(args.alternations):
        order = args.trees[a % len(args.trees):] + args.trees[:a % len(args.trees)]
        for tree in order:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve() / "src")}
            out = subprocess.run([sys.executable, __file__, "--child", *flags], env=env,
                                 check=True, capture_output=True, text=True, cwd=tempfile.gettempdir())
            results[tree].append(json.loads(out.stdout))
        print(f"alternation {a + 1}: load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    for tree, runs in results.items():
        line = [tree]
        for key in ("cpu", "wall"):
            values = [r[key] for r in runs]
            line.append(f"{key} {statistics.median(values):,.0f}/s "
                        f"({min(values):,.0f}-{max(values):,.0f})")
        print("  ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
