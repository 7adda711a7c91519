"""Resume: load a session from a fresh handle, beside the JSONL file it replaces, in one run.

    python bench/bench_resume.py             # up to 100,000 messages (5-8 minutes, most of it
                                             # the 100,000 appends to PostgreSQL, one at a time)
    python bench/bench_resume.py --quick     # up to 10,000 messages, a smoke run (< 1 minute)
    python bench/bench_resume.py --plots     # also draw docs/img/load-vs-length.png, bytes-vs-length.png
    python bench/bench_resume.py --json      # also print every figure as JSON

The traffic (``agent_traffic.py``, seeded) is a coding agent's: user turns, assistant messages
with tool calls, tool results of 200-4,000 characters skewed short, answers. Every message is
appended one at a time with ``Session.add_message``, as an agent writes, and the same messages
are written to a JSONL file, one ``json.dumps`` per line (the seed's format). Measured:

- load of 100 to 100,000 messages from a fresh handle (``open_store``, ``messages()``,
  ``close()``), beside the JSONL file read with msgspec per line (the floor), with ``json.loads``
  per line (the seed's loader), and the OpenAI Agents SDK's ``SQLiteSession`` (a fresh one,
  ``get_items()``; filled with ``add_items`` one message at a time); the same load on a
  PostgreSQL store; the warm load (the same open store) for reference;
- bytes at rest: the forest (a 1,000-message base, 200 forks of it each appending 20) and one
  session of each length, against the unique compact JSON and the JSONL file;
- appends per second (SQLite default and durable, PostgreSQL) beside the seed's JSONL append,
  unsynced and with fsync; fork of a 10,000-message session against a 100-message one, also at
  a point inside its history; peak memory of the largest load against the decoded messages.

Every figure is the best of several repeats, the sides alternating round by round (the machine
may be shared and noisy), and every ratio compares figures taken in this same run. PostgreSQL is
an embedded server started for the run (``--url`` or ``SESSTREE_BENCH_POSTGRES``: an existing
one; ``--no-postgres``: skip it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the other benches, beside this one
from agent_traffic import Traffic
from bench_store import msgspec_load, seed_append, seed_append_fsync, seed_load
from resume_report import report, table

from sesstree import open_store

IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
NAME = "quest"
Msg = dict[str, Any]


# -- timing ----------------------------------------------------------------------------------


_T0 = time.perf_counter()


def progress(what: str) -> None:
    print(f"... {time.perf_counter() - _T0:6.1f} s  {what}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> float:
    """Wall time of one call, in seconds (what it returns is freed after the clock stops)."""
    gc.collect()
    t = time.perf_counter()
    kept = fn()
    elapsed = time.perf_counter() - t
    del kept
    return elapsed


def alternate(sides: dict[str, Callable[[], Any]], rounds: int,
              clock: Callable[[Callable[[], Any]], float] = timed) -> dict[str, float]:
    """The best time of each side over ``rounds`` rounds; each round runs every side once, in
    an order that rotates, so that a slow spell of the machine hits every side alike.
    ``clock`` times one run (by default its wall time; a side can also time itself)."""
    names = list(sides)
    best = dict.fromkeys(names, math.inf)
    # What is alive now (the traffic, the modules, open stores) is left out of the collector's
    # passes, as a resuming process holds little else: a full collection would walk it all
    # within a side's time (about 0.1 s with the Agents SDK imported).
    gc.collect()
    gc.freeze()
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            best[name] = min(best[name], clock(sides[name]))
    return best


# -- the sides -------------------------------------------------------------------------------


def compact(m: Msg) -> int:
    return len(json.dumps(m, separators=(",", ":")).encode())


def jsonl_line(m: Msg) -> bytes:
    return (json.dumps(m) + "\n").encode()


def fill_store(target: str | Path, msgs: list[Msg], **kw: Any) -> float:
    """Append ``msgs`` one at a time to session NAME of a new store; the seconds it took."""
    store = open_store(target, **kw)
    s = store.session(NAME)
    t = time.perf_counter()
    for m in msgs:
        s.add_message(m)
    elapsed = time.perf_counter() - t
    store.close()
    return elapsed


def load_store(target: str | Path) -> list[Msg]:
    """What a resume costs: open the store, read the session's messages, close."""
    store = open_store(target)
    try:
        return store.session(NAME).messages()
    finally:
        store.close()


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class AgentsSide:
    """The OpenAI Agents SDK's ``SQLiteSession`` on a file, driven from one event loop."""

    def __init__(self) -> None:
        from agents import SQLiteSession

        self.cls = SQLiteSession
        self.loop = asyncio.new_event_loop()

    def fill(self, db: Path, msgs: list[Msg]) -> float:
        async def run() -> float:
            s = self.cls(NAME, db)
            t = time.perf_counter()
            for m in msgs:
                await s.add_items([m])  # type: ignore[list-item]
            elapsed = time.perf_counter() - t
            s.close()
            return elapsed

        return self.loop.run_until_complete(run())

    def load(self, db: Path) -> list[Any]:
        async def run() -> list[Any]:
            s = self.cls(NAME, db)
            items = await s.get_items()
            s.close()
            return items

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.close()


class Postgres:
    """A PostgreSQL server for the run and a new schema of it per store."""

    def __init__(self, base: str) -> None:
        import psycopg

        self.base = base
        self.conn = psycopg.connect(base, autocommit=True)
        self.count = 0
        self.schemas: list[str] = []

    def new_store_url(self) -> tuple[str, str]:
        from urllib.parse import quote

        self.count += 1
        schema = f"resume_{os.getpid()}_{self.count}"
        self.conn.execute(f"CREATE SCHEMA {schema}")
        self.schemas.append(schema)
        sep = "&" if "?" in self.base else "?"
        return f"{self.base}{sep}options={quote(f'-csearch_path={schema}')}", schema

    def bytes_at_rest(self, schema: str, full: bool = False) -> int:
        """The schema's tables with their indexes and TOAST, after a VACUUM (FULL)."""
        tables = [r[0] for r in self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))]
        names = ", ".join(f"{schema}.{t}" for t in tables)
        self.conn.execute(f"VACUUM {'FULL ' if full else ''}{names}")
        row = self.conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'", (schema,)).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Drop the run's schemas (a server given with ``--url`` is left as it was)."""
        for schema in self.schemas:
            self.conn.execute(f"DROP SCHEMA {schema} CASCADE")
        self.conn.close()


@contextmanager
def postgres(url: str | None, enabled: bool) -> Iterator[Postgres | None]:
    if not enabled:
        yield None
        return
    from bench_postgres import server

    with server(url) as base:
        pg = Postgres(base)
        try:
            yield pg
        finally:
            pg.close()


# -- measurements ----------------------------------------------------------------------------


def bench_lengths(tmp: Path, stream: list[Msg], sizes: list[int], rounds: dict[int, int],
                  pg: Postgres | None, agents: AgentsSide | None, results: dict[str, Any]) -> None:
    """Load and bytes at rest for each session length (the first ``n`` of the stream)."""
    results["lengths"] = [bench_length(tmp, stream[:n], rounds[n], pg, agents) for n in sizes]


def bench_length(tmp: Path, msgs: list[Msg], rounds: int, pg: Postgres | None,
                 agents: AgentsSide | None) -> dict[str, Any]:
    """Every side filled once with ``msgs``, then loaded, alternating, ``rounds`` times."""
    n = len(msgs)
    progress(f"{n:,} messages: fill")
    row: dict[str, Any] = {"n": n}
    folder = tmp / f"lite-{n}"
    row["sqlite_fill_per_s"] = n / fill_store(folder, msgs)
    row["sqlite_bytes"] = dir_bytes(folder)
    jsonl = tmp / f"seed-{n}.jsonl"
    jsonl.write_bytes(b"".join(jsonl_line(m) for m in msgs))
    row["jsonl_bytes"] = jsonl.stat().st_size
    row["compact_bytes"] = sum(compact(m) for m in msgs)
    # What each side gives back is what was appended: checked once, outside the clock.
    assert load_store(folder) == msgs
    assert msgspec_load(jsonl) == msgs and seed_load(jsonl) == msgs
    with ExitStack() as opened:
        warm = opened.enter_context(open_store(folder))
        sides: dict[str, Callable[[], object]] = {
            "sqlite": lambda: load_store(folder),
            "sqlite_warm": lambda: warm.session(NAME).messages(),
            "sqlite_open": lambda: open_store(folder).close(),  # what a fresh handle adds
            "msgspec": lambda: msgspec_load(jsonl),
            "json": lambda: seed_load(jsonl),
        }
        if agents is not None:
            progress(f"{n:,} messages: fill the Agents SDK's")
            db = tmp / f"agents-{n}.db"
            row["agents_fill_per_s"] = n / agents.fill(db, msgs)
            row["agents_bytes"] = db.stat().st_size
            assert agents.load(db) == msgs
            sides["agents"] = lambda: agents.load(db)
        if pg is not None:
            progress(f"{n:,} messages: fill PostgreSQL")
            url, schema = pg.new_store_url()
            row["pg_fill_per_s"] = n / fill_store(url, msgs)
            row["pg_bytes"] = pg.bytes_at_rest(schema)
            assert load_store(url) == msgs
            pg_warm = opened.enter_context(open_store(url))
            sides["pg"] = lambda: load_store(url)
            sides["pg_warm"] = lambda: pg_warm.session(NAME).messages()
        progress(f"{n:,} messages: load")
        best = alternate(sides, rounds)
    row.update({f"{k}_ms": v * 1e3 for k, v in best.items()})
    return row


def bench_memory(tmp: Path, n: int, results: dict[str, Any]) -> None:
    """Peak traced memory of a load of ``n`` messages against what the decoded list holds."""

    def traced(fn: Callable[[], object]) -> tuple[int, int]:
        gc.collect()
        tracemalloc.start()
        kept = fn()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del kept
        return peak, held

    progress("memory")
    jsonl = tmp / f"seed-{n}.jsonl"
    peak, held = traced(lambda: load_store(tmp / f"lite-{n}"))
    floor_peak, decoded = traced(lambda: msgspec_load(jsonl))
    results["memory"] = {"n": n, "sqlite_peak": peak, "sqlite_held": held,
                         "msgspec_peak": floor_peak, "decoded": decoded}


def bench_forest(tmp: Path, base: list[Msg], forks: list[list[Msg]], pg: Postgres | None,
                 results: dict[str, Any]) -> None:
    """A base session appended one message at a time, then forks of it, each appending its own."""

    def build(target: str | Path) -> None:
        store = open_store(target)
        root = store.session("base")
        for m in base:
            root.add_message(m)
        for f, msgs in enumerate(forks):
            s = root.fork(f"fork-{f:03d}")
            for m in msgs:
                s.add_message(m)
        store.close()
        check = open_store(target)
        assert check.session(f"fork-{len(forks) - 1:03d}").messages() == base + forks[-1]
        check.close()

    progress("forest")
    folder = tmp / "forest"
    build(folder)
    base_jsonl = sum(len(jsonl_line(m)) for m in base)
    out: dict[str, Any] = {
        "base": len(base), "forks": len(forks), "extra": len(forks[0]),
        "unique_compact": sum(compact(m) for m in base) + sum(compact(m) for f in forks for m in f),
        # The seed: the base's file, and each fork a full copy of it plus its own lines.
        "seed_copies": base_jsonl + sum(base_jsonl + sum(len(jsonl_line(m)) for m in f)
                                        for f in forks),
        "sqlite": dir_bytes(folder),
    }
    if pg is not None:
        url, schema = pg.new_store_url()
        build(url)
        out["pg"] = pg.bytes_at_rest(schema)
        out["pg_full"] = pg.bytes_at_rest(schema, full=True)
    results["forest"] = out


def bench_fork(tmp: Path, n: int, small: list[Msg], rounds: int, results: dict[str, Any]) -> None:
    """Fork of the ``n``-message session (the load's store, reopened) against a small one."""
    progress("fork")
    store = open_store(tmp / f"lite-{n}")
    short = store.session("short")
    for m in small:
        short.add_message(m)
    big = store.session(NAME)
    inside = store.resolve(f"{NAME}~300")  # a point inside the history, not its head
    short_head = store.resolve("short")
    names = (f"f{i}" for i in range(10**9))
    best = alternate({
        "small": lambda: short.fork(next(names)),
        "big": lambda: big.fork(next(names)),
        "small_at": lambda: store.fork(next(names), short_head),
        "inside_at": lambda: store.fork(next(names), inside),
        "inside_rev": lambda: store.fork(next(names), f"{NAME}~300"),
    }, rounds)
    store.close()
    results["fork"] = {"n": n, "small_n": len(small), **{f"{k}_us": v * 1e6 for k, v in best.items()}}


def bench_append(tmp: Path, stream: list[Msg], counts: dict[str, int], rounds: int,
                 pg: Postgres | None, results: dict[str, Any]) -> None:
    """Appends per second, each side on a new file or store per round."""
    progress("append")
    k = iter(range(10**9))

    def jsonl(fn: Callable[[Path, Msg], None], count: int) -> Callable[[], float]:
        def run() -> float:
            path = tmp / f"append-{next(k)}.jsonl"
            t = time.perf_counter()
            for m in stream[:count]:
                fn(path, m)
            return time.perf_counter() - t
        return run

    def ours(count: int, url: Callable[[], str | Path], **kw: Any) -> Callable[[], float]:
        # The appends only: a new store's creation is not an append.
        return lambda: fill_store(url(), stream[:count], **kw)

    sides: dict[str, Callable[[], float]] = {
        "jsonl": jsonl(seed_append, counts["plain"]),
        "sqlite": ours(counts["plain"], lambda: tmp / f"append-{next(k)}"),
        "jsonl_fsync": jsonl(seed_append_fsync, counts["durable"]),
        "sqlite_durable": ours(counts["durable"], lambda: tmp / f"append-{next(k)}",
                               durability="durable"),
    }
    if pg is not None:
        sides["pg"] = ours(counts["pg"], lambda: pg.new_store_url()[0])
    best = alternate(sides, rounds, clock=lambda run: run())
    count = {"jsonl": "plain", "sqlite": "plain", "jsonl_fsync": "durable",
             "sqlite_durable": "durable", "pg": "pg"}
    results["append"] = {f"{s}_per_s": counts[count[s]] / t for s, t in best.items()}
    results["append"]["counts"] = counts


def traffic_figures(stream: list[Msg], n: int) -> dict[str, Any]:
    """How compressible the traffic is: zstd -3 of a whole JSONL file of ``n`` messages (what a
    compressor given the file at once finds; a store compressing runs of it finds less)."""
    import zstandard

    data = b"".join(jsonl_line(m) for m in stream[:n])
    roles = [m["role"] for m in stream[:n]]
    return {"n": n, "jsonl_bytes": len(data), "mean_bytes": len(data) / n,
            "zstd3_ratio": len(zstandard.ZstdCompressor(level=3).compress(data)) / len(data),
            **{f"{r}_share": roles.count(r) / n for r in ("user", "assistant", "tool")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 10,000 messages (< 1 minute)")
    parser.add_argument("--json", action="store_true", help="also print every figure as JSON")
    parser.add_argument("--plots", action="store_true", help=f"draw the plots into {IMG}")
    parser.add_argument("--url", help="an existing PostgreSQL server (default: embedded)")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    args = parser.parse_args()
    q = args.quick
    sizes = [100, 1_000, 10_000] if q else [100, 1_000, 10_000, 100_000]
    # Short loads get many rounds: on a shared machine their best needs many tries.
    rounds = ({100: 40, 1_000: 30, 10_000: 6} if q else
              {100: 100, 1_000: 80, 10_000: 20, 100_000: 5})
    started = time.perf_counter()
    progress("traffic")
    traffic = Traffic(seed=22)
    stream = traffic.messages(max(sizes))
    fork_msgs = [traffic.messages(20) for _ in range(200)]  # each fork goes its own way
    results: dict[str, Any] = {"quick": q, "python": sys.version.split()[0],
                               "traffic": traffic_figures(stream, 10_000)}
    try:
        agents: AgentsSide | None = AgentsSide()
    except ImportError as exc:
        print(f"(the Agents SDK is not installed: {exc.name}; pip install -e '.[bench]')",
              file=sys.stderr)
        agents = None
    with tempfile.TemporaryDirectory() as tmp_name, \
            postgres(args.url, not args.no_postgres) as pg:
        tmp = Path(tmp_name)
        progress("started" + (" PostgreSQL" if pg is not None else ""))
        os.environ["SESS_HOME"] = str(tmp / "sess-home")  # a shared store's HEAD: not the user's
        bench_lengths(tmp, stream, sizes, rounds, pg, agents, results)
        bench_memory(tmp, max(sizes), results)
        bench_forest(tmp, stream[:1_000], fork_msgs, pg, results)
        bench_fork(tmp, 10_000, stream[:100], 60 if q else 200, results)
        bench_append(tmp, stream, {"plain": 1_000 if q else 5_000, "durable": 100 if q else 300,
                                   "pg": 300 if q else 2_000}, 3 if q else 5, pg, results)
    if agents is not None:
        agents.close()
    results["seconds"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(results, indent=2))
    print(f"sesstree resume benchmark (Python {results['python']}{', quick sizes' if q else ''}; "
          f"{results['seconds']:.0f} s)")
    for line in table(results["lengths"]):
        print(line)
    print()
    rows = report(results)
    width = max(len(row[0]) for row in rows)
    for label, value, met in rows:
        mark = "" if met is None else ("  ok" if met else "  MISSED")
        print(f"{label:<{width}}  {value}{mark}")
    if args.plots:
        from resume_plots import plot

        for path in plot(results, IMG):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
