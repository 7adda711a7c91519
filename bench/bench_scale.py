"""What each command costs as the store grows: 1k, 10k, 100k and 1M nodes, on SQLite and PostgreSQL.

    python bench/bench_scale.py                    # every size, both backends (about an hour)
    python bench/bench_scale.py --sizes 1000,10000 --backends sqlite   # a smoke run
    python bench/bench_scale.py --plot-only        # redraw the plots from the last results

The stores are built here, through the public API (``store.batch()`` around groups of
sessions): 11,376 sessions per million nodes, a quarter of them forks of another session at
some point of its history, traffic of user turns, assistant tool calls, tool results of 200 to
4,000 characters and assistant replies (messages of 200-2,000 bytes, a third over 1 KB), plus
0.5% of nodes that nothing names (an aborted import) for gc to find. Each command runs as a
whole process (``sess --store ... CMD``), as a user runs it: the median of three runs (one
when a run takes over 5 s), and its peak memory (the child's maxrss).

Also measured in the same run: loading a 10,000- and a 100,000-event session against the
same messages read from one JSONL file with msgspec (the floor), the default append against
the seed's JSONL append (both with the floors of their parts, each measured alone, and
without the compression dictionary for comparison), bytes at rest against the number of
forks, and start-up against ``git log -n 20``. Results go to ``bench/scale_results.json``
and the plots to ``docs/img/``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).parent))  # the other benches, beside this one

from sesstree import Store, make_node, open_store

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "scale_results.json"
IMG = HERE.parent / "docs" / "img"
SESSIONS_PER_MILLION = 11_376
WORDS = ("the of and to in is that it for on with as was at by be this from or an are not "
         "file line error test def return import class self value data path read write run "
         "function result output input config store session node commit branch fork").split()


# -- traffic ---------------------------------------------------------------------------------


class Traffic:
    """Realistic agent traffic: a user turn, a tool call, its result, a reply; repeated."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.pool = [" ".join(self.rng.choices(WORDS, k=800)) for _ in range(64)]
        self.i = 0

    def text(self, lo: int, hi: int) -> str:
        self.i += 1
        n = self.rng.randint(lo, hi)
        start = self.rng.randint(0, 1000)
        base = self.pool[self.i % len(self.pool)] * 2
        return f"#{self.i} " + base[start:start + n]

    def turn(self) -> list[dict[str, Any]]:
        """Four messages; about a third of them over 1 KB as JSON."""
        call_id = f"call_{self.i:08x}"
        big = self.rng.random() < 0.62
        return [
            {"role": "user", "content": self.text(180, 900)},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps(
                    {"path": f"src/mod{self.i % 97}.py", "hint": self.text(60, 300)})}}]},
            {"role": "tool", "tool_call_id": call_id,
             "content": self.text(1100, 3900) if big else self.text(200, 900)},
            {"role": "assistant", "content": self.text(200, 1900 if big else 900)},
        ]

    def messages(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            out += self.turn()
        return out[:n]


def build(store: Store, nodes: int, traffic: Traffic) -> list[str]:
    """Fill ``store`` with about ``nodes`` nodes; return the session names."""
    count = max(11, nodes * SESSIONS_PER_MILLION // 1_000_000)
    # (A fork adds a third of a session's length: sessions average 0.83 of ``per``.)
    per = max(4, int(nodes / count / 0.83))
    rng = traffic.rng
    names: list[str] = []
    written = 0
    k = 0
    while written < int(nodes * 0.995):
        with store.batch():
            for _ in range(50):
                name = f"s{k:05d}"
                k += 1
                length = max(2, int(rng.expovariate(1 / per)))
                if names and rng.random() < 0.25:  # a fork of an earlier session
                    base = rng.choice(names)
                    depth = len(store.session(base))
                    back = rng.randint(0, max(0, depth - 1))
                    store.fork(name, f"{base}~{back}")
                    length = max(2, length // 3)
                session = store.session(name)
                for m in traffic.messages(length):
                    session.add_message(m)
                written += length
                names.append(name)
                if written >= int(nodes * 0.995):
                    break
    # What nothing names: an aborted import, for gc to find.
    parent = None
    garbage = []
    for m in traffic.messages(max(1, nodes // 200)):
        node = make_node(parent, _type_of(m), m)
        garbage.append(node)
        parent = node.id
    store.write(garbage)
    return names


def _type_of(m: dict[str, Any]) -> str:
    from sesstree.events import message_type

    return message_type(m)


# -- measuring -------------------------------------------------------------------------------


def run(args: list[str], out: Any = subprocess.DEVNULL) -> tuple[float, int, int]:
    """Run one command as a process: (seconds, peak RSS in bytes, exit code).

    Through ``/usr/bin/time``: a child forked from this (large) process would report this
    process's memory as its own peak."""
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        code = subprocess.call(["/usr/bin/time", "-q", "-f", "%M", "-o", report.name, *args],
                               stdout=out, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        lines = [ln for ln in report.read().splitlines() if ln.strip().isdigit()]
    return elapsed, int(lines[-1]) * 1024 if lines else 0, code


def median_run(args: list[str], repeat: int = 3) -> tuple[float, int]:
    times, peak = [], 0
    for _ in range(repeat):
        t, rss, code = run(args)
        if code not in (0, 1):
            raise RuntimeError(f"{' '.join(args)} exited {code}")
        times.append(t)
        peak = max(peak, rss)
        if t > 5:
            break
    times.sort()
    return times[len(times) // 2], peak


def best(fn: Callable[[], Any], repeat: int = 5) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


SESS = [str(Path(sys.executable).parent / "sess")]


def measure_store(where: str, names: list[str]) -> dict[str, tuple[float, int]]:
    """Every command's (median seconds, peak bytes) on the store at ``where``."""
    s = [*SESS, "--store", where]
    one = names[len(names) // 2]
    with open_store(where, create=False) as store:
        prefix = store.session_head(one)
        assert prefix is not None
        store.checkout(one)
    rows: dict[str, tuple[float, int]] = {}
    # The first stats of a store fills its index of path sizes (SQLite): measured apart.
    first, first_rss, _ = run([*s, "stats"])
    rows["sess stats (first run)"] = (first, first_rss)
    rows["sess log -n 20"] = median_run([*s, "log", "-n", "20"])
    rows["sess show PREFIX"] = median_run([*s, "show", prefix[:10]])
    rows["sess status"] = median_run([*s, "status"])
    rows["sess branch"] = median_run([*s, "branch"])
    rows["sess messages (one session)"] = median_run([*s, "messages", one])
    rows["sess stats"] = median_run([*s, "stats"])
    rows["sess fsck"] = median_run([*s, "fsck"])
    rows["sess log --graph --all -n 20"] = median_run([*s, "log", "--graph", "--all", "-n", "20"])
    rows["sess log --graph --all"] = median_run([*s, "log", "--graph", "--all"])
    rows["sess gc --dry-run"] = median_run([*s, "gc", "--dry-run"])
    rows["sess gc"] = median_run([*s, "gc"], repeat=1)
    with open_store(where, create=False) as store:
        rows["store.session(name) open"] = (best(lambda: len(store.session(one))), 0)
        traffic = Traffic(99)

        def append() -> None:
            store.session(one).add_message(traffic.messages(1)[0])

        rows["one add_message"] = (best(append), 0)
        forks = iter(range(10**6))
        rows["fork"] = (best(lambda: store.fork(f"bench-fork-{next(forks)}", one)), 0)
    return rows


# -- the store sizes -------------------------------------------------------------------------


def schema_url(base: str, name: str) -> str:
    from urllib.parse import quote

    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")  # type: ignore[arg-type]
        conn.execute(f"CREATE SCHEMA {name}")  # type: ignore[arg-type]
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={name}')}"


def sizes_table(backend: str, sizes: list[int], tmp: Path, base_url: str | None,
                results: dict[str, Any]) -> None:
    table: dict[str, dict[str, Any]] = results.setdefault("commands", {}).setdefault(backend, {})
    for n in sizes:
        where = str(tmp / f"{backend}-{n}") if base_url is None else schema_url(base_url, f"s{n}")
        t = time.perf_counter()
        with open_store(where) as store:
            names = build(store, n, Traffic(n))
            built = store.backend.count_nodes()
        print(f"[{backend}] built {built:,} nodes, {len(names):,} sessions in "
              f"{time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        for cmd, (secs, rss) in measure_store(where, names).items():
            table.setdefault(cmd, {})[str(n)] = {"s": secs, "rss": rss}
            print(f"[{backend}] {n:>9,} {cmd:<32} {secs * 1000:10.1f} ms {rss / 2**20:7.0f} MB",
                  file=sys.stderr, flush=True)
        table.setdefault("_nodes", {})[str(n)] = built
        save(results)
        if base_url is None:
            shutil.rmtree(tmp / f"{backend}-{n}", ignore_errors=True)


# -- load, append, bytes, start-up ----------------------------------------------------------


@contextmanager
def no_dictionary() -> Iterator[None]:
    """Stores written meanwhile never train a dictionary: small payloads stay plain msgpack,
    as in format 3 (what compressing them costs, measured against it)."""
    from sesstree.store.sqlite import dicts as backend

    saved = backend.TRAIN_AFTER
    backend.TRAIN_AFTER = 1 << 62
    try:
        yield
    finally:
        backend.TRAIN_AFTER = saved


def fill_long(where: Path, msgs: list[dict[str, Any]], per_batch: int = 1_000) -> None:
    """One long session, written ``per_batch`` events a commit, as a session grows (turns,
    imported files): the store trains its dictionary when a commit takes it past TRAIN_AFTER
    rows, and what is written after is compressed with it (a single batch of everything from
    an empty store would stay plain: no dictionary is trained inside a transaction)."""
    with open_store(where) as store:
        s = store.session("long")
        for k in range(0, len(msgs), per_batch):
            with store.batch():
                for m in msgs[k:k + per_batch]:
                    s.add_message(m)


def bench_load(tmp: Path, n: int, results: dict[str, Any]) -> None:
    """Loading an n-event session against the JSONL + msgspec floor, and the floors of the
    parts a verified load of derived messages cannot skip."""
    from blake3 import blake3

    from sesstree.events import derive_exact

    msgs = Traffic(5).messages(n)
    jsonl = tmp / f"load-{n}.jsonl"
    enc = msgspec.json.Encoder()
    jsonl.write_bytes(b"".join(enc.encode(m) + b"\n" for m in msgs))
    dec = msgspec.json.Decoder()

    def floor() -> list[Any]:
        with open(jsonl, "rb") as f:
            return [dec.decode(line) for line in f]

    def seed() -> list[Any]:
        with open(jsonl, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    where = tmp / f"load-{n}"
    fill_long(where, msgs)
    with no_dictionary():
        fill_long(tmp / f"load-{n}-plain", msgs)
    with open_store(where) as store, open_store(tmp / f"load-{n}-plain") as plain:
        assert store.messages("long") == msgs == plain.messages("long")
        # Alternate the two stores, so that a slow spell hits both.
        ours, ours_plain = [], []
        for _ in range(3):
            ours.append(best(lambda: store.messages("long"), 2))
            ours_plain.append(best(lambda: plain.messages("long"), 2))
        tracemalloc.start()
        kept = store.messages("long")
        ours_mem = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del kept
        # The floors: what any verified load of these messages does, each part alone.
        chain = plain.backend.chain(store.session_head("long"))  # type: ignore[arg-type]
        events = [msgspec.msgpack.encode(d) for d in chain.datas]
        bodies = [msgspec.msgpack.encode(t) + e for t, e in zip(chain.types, events, strict=True)]
        heads = [b"\x94\x01\xc4\x20" + bytes(32)] * len(bodies)
        packed = msgspec.msgpack.encode([x for t, d in zip(chain.types, chain.datas, strict=True)
                                         for x in (t, d)])
        whole = b"".join(bodies)
        from sesstree.store.sqlite.sql import READ_RANGE

        db = store.backend._db  # type: ignore[attr-defined]
        framed = db.execute("SELECT data, codec FROM nodes WHERE codec IS NOT NULL").fetchall()
        framed += db.execute("SELECT data, codec FROM blobs").fetchall()
        codec = store.backend._state.paths.codec  # type: ignore[attr-defined]
        frames, codecs = [f for f, _ in framed], [c for _, c in framed]
        floors = {
            # the store's frames inflated, in one call per dictionary
            "inflate": best(lambda: codec.unpack_all(frames, codecs, 1 << 31)),
            # SQLite reading the path's rows (one range, concatenated): what any load fetches
            "sql_read": best(lambda: db.execute(READ_RANGE, (1, n)).fetchone()),
            # the events decoded from msgpack in one call (as a path is)
            "decode": best(lambda: msgspec.msgpack.decode(packed)),
            # the messages derived from decoded events (events.derive_exact: exact, no sending view)
            "derive": best(lambda: derive_exact(chain.types, chain.datas)),
            # one blake3 per node over its hashed form: what checking each id costs
            "blake3_per_node": best(lambda: [blake3(h + b).digest()
                                             for h, b in zip(heads, bodies, strict=True)]),
            # the same bytes in one blake3 call: what a digest over many rows would cost
            "blake3_one_call": best(lambda: blake3(whole).digest()),
        }
    tracemalloc.start()
    kept = floor()
    floor_mem = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    results.setdefault("load", {})[str(n)] = {
        "ours": min(ours), "ours_plain": min(ours_plain), "floor": best(floor),
        "seed": best(seed), "ours_mem": ours_mem, "decoded_mem": floor_mem,
        "json_bytes": jsonl.stat().st_size, "floors": floors,
    }


def bench_append(tmp: Path, n: int, results: dict[str, Any]) -> None:
    """The default append (one add_message, its own commit) against the seed's open/append/
    close of a JSONL file, on a store past its first TRAIN_AFTER payloads (its dictionary
    trained), and the floors: a bare SQLite insert of a 1 KB row and commit with the store's
    pragmas, with and without a unique index of random 32-byte keys (a node id)."""
    msgs = Traffic(11).messages(n)
    warm = Traffic(12).messages(1_200)
    path = tmp / "append.jsonl"

    def seed_side() -> float:
        path.unlink(missing_ok=True)
        t = time.perf_counter()
        for m in msgs:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(m) + "\n")
        return (time.perf_counter() - t) / n

    def ours_side(k: int, plain: bool) -> float:
        where = tmp / f"append-{k}-{plain}"
        with no_dictionary() if plain else nullcontext():
            fill_long(where, warm)  # (the dictionary is trained here, unless plain)
            with open_store(where) as store:
                s = store.session("a")
                t = time.perf_counter()
                for m in msgs:
                    s.add_message(m)
                return (time.perf_counter() - t) / n

    def bare_side(k: int, keyed: bool) -> float:
        import os
        import sqlite3

        db = sqlite3.connect(tmp / f"bare-{k}-{keyed}.db", isolation_level=None)
        for pragma in ("page_size=2048", "journal_mode=WAL", "synchronous=NORMAL",
                       "wal_autocheckpoint=10000"):
            db.execute(f"PRAGMA {pragma}")
        db.execute("CREATE TABLE t(seq INTEGER PRIMARY KEY, id BLOB UNIQUE, data BLOB)")
        rows = [(os.urandom(32) if keyed else None, os.urandom(1000)) for _ in range(n)]
        t = time.perf_counter()
        for r in rows:
            db.execute("INSERT INTO t(id, data) VALUES (?, ?)", r)
        spent = (time.perf_counter() - t) / n
        db.close()
        return spent

    def train_once() -> float:
        """Training the dictionary on a store of TRAIN_AFTER plain rows, as a writer does at
        its pause, its close or a batch's end (in a transaction of its own)."""
        from sesstree.store.codec import TRAIN_AFTER

        where = tmp / "train"
        with no_dictionary():
            fill_long(where, warm[: TRAIN_AFTER + 10])
        with open_store(where) as store:
            backend: Any = store.backend
            t = time.perf_counter()
            backend._dicts.train()
            spent = time.perf_counter() - t
            assert backend._db.execute("SELECT count(*) FROM dicts").fetchone()[0] == 1
            return spent

    seeds, ours, plain, bare, keyed = [], [], [], [], []
    for k in range(3):  # alternate, so a slow spell hits every side
        seeds.append(seed_side())
        ours.append(ours_side(k, False))
        plain.append(ours_side(k, True))
        bare.append(bare_side(k, False))
        keyed.append(bare_side(k, True))
    results["append"] = {
        "ours": min(ours), "ours_plain": min(plain), "seed": min(seeds),
        "bare_insert": min(bare), "bare_insert_keyed": min(keyed), "training": train_once(),
    }


def bench_fork_bytes(tmp: Path, base_url: str | None, results: dict[str, Any]) -> None:
    """Bytes at rest after F forks x 20 events on a 1,000-event base, F = 0..1,000."""
    traffic = Traffic(3)
    base_msgs = traffic.messages(1000)  # (past TRAIN_AFTER payloads: the dictionary is trained)
    fork_msgs = [traffic.messages(20) for _ in range(1000)]
    enc = msgspec.json.Encoder()
    base_json = sum(len(enc.encode(m)) + 1 for m in base_msgs)
    marks = [0, 10, 100, 300, 1000]
    out: dict[str, dict[str, int]] = {"unique_json": {}, "seed_jsonl": {}, "sqlite": {},
                                      "postgres": {}}
    backends = [("sqlite", str(tmp / "forks"))]
    if base_url is not None:
        backends.append(("postgres", schema_url(base_url, "forks")))
    for backend, where in backends:
        with open_store(where) as store:
            s = store.session("base")
            with store.batch():
                for m in base_msgs:
                    s.add_message(m)
            done = 0
            for f in marks:
                with store.batch():
                    for k in range(done, f):
                        fork = store.fork(f"f{k}", "base")
                        for m in fork_msgs[k]:
                            fork.add_message(m)
                done = f
                out[backend][str(f)] = store.stats().physical_bytes
    for f in marks:
        extra = sum(len(enc.encode(m)) + 1 for k in range(f) for m in fork_msgs[k])
        out["unique_json"][str(f)] = base_json + extra
        out["seed_jsonl"][str(f)] = base_json * (f + 1) + extra
    results["fork_bytes"] = out


def bench_startup(tmp: Path, results: dict[str, Any]) -> None:
    repo = tmp / "git"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], check=True)
    for i in range(30):
        (repo / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], check=True)
        subprocess.run([*git, "commit", "-qm", f"c{i}"], check=True)
    where = str(tmp / "small")
    with open_store(where) as store:
        s = store.session("main")
        for m in Traffic(1).messages(30):
            s.add_message(m)

    # The package's compiled modules, as an installed package has them (where bytecode is
    # not written, PYTHONDONTWRITEBYTECODE, each start would compile every module again).
    import compileall

    import sesstree

    compileall.compile_dir(str(Path(sesstree.__file__).parent), quiet=1)
    py = sys.executable
    cases = {
        "git log -n 20": ["git", "-C", str(repo), "log", "-n", "20"],
        "sess --help": [*SESS, "--help"],
        "sess log -n 20": [*SESS, "--store", where, "log", "-n", "20"],
        # The floors: the interpreter alone, without site-packages, and with the three
        # libraries every store command needs (click alone is what --help needs).
        "python -c pass": [py, "-c", "pass"],
        "python -S -c pass": [py, "-S", "-c", "pass"],
        "python -c 'import click'": [py, "-c", "import click"],
        "python -c 'import msgspec, click, sqlite3'": [py, "-c", "import msgspec, click, sqlite3"],
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(15):  # in rounds: a slow spell of the machine hits every case alike
        for name, args in cases.items():
            times[name].append(run(args)[0])
    results["startup"] = {k: sorted(v)[len(v) // 2] for k, v in times.items()}


_WRITER = """
import pathlib, sys, time
from sesstree import open_store
store = open_store(sys.argv[1])
s = store.session("writer")
stop = pathlib.Path(sys.argv[2])
worst = total = n = 0.0
while not stop.exists():
    t = time.perf_counter()
    s.add_message({"role": "user", "content": f"append {n}"})
    d = time.perf_counter() - t
    worst, total, n = max(worst, d), total + d, n + 1
print(n, worst, total / max(n, 1))
"""


def bench_gc_turns(tmp: Path, base_url: str | None, results: dict[str, Any]) -> None:
    """gc of 50,000 unreachable nodes (on a 100,000-node store) while another process appends
    without pause: the longest gap between two chunks' ends (what a chunk holds the write lock
    for, at most), and the writer's appends meanwhile (count, slowest, mean)."""
    out: dict[str, Any] = {}
    targets = [("sqlite", str(tmp / "gc-turns"))]
    if base_url is not None:
        targets.append(("postgres", schema_url(base_url, "gc_turns")))
    for backend, where in targets:
        traffic = Traffic(21)
        with open_store(where) as store:
            build(store, 50_000, traffic)
            parent = None
            nodes = []
            for m in traffic.messages(50_000):
                node = make_node(parent, _type_of(m), m)
                nodes.append(node)
                parent = node.id if len(nodes) % 1000 else None
            store.write(nodes)
            stop = tmp / f"stop-{backend}"
            writer = subprocess.Popen([sys.executable, "-c", _WRITER, where, str(stop)],
                                      stdout=subprocess.PIPE, text=True)
            time.sleep(1.0)  # the writer is running
            ends: list[float] = []
            start = time.perf_counter()
            result = _gc(store, ends)
            took = time.perf_counter() - start
            stop.touch()
            line, _ = writer.communicate(timeout=60)
        # From one chunk's end to the next: a chunk's transaction and the turn it gives.
        gaps = [b - a for a, b in itertools.pairwise(ends)]
        parts = line.split()
        out[backend] = {"removed": result, "seconds": took, "chunks": len(ends),
                        "walk_and_first_chunk": ends[0] - start if ends else took,
                        "longest_chunk": max(gaps, default=0.0),
                        "writer_appends": float(parts[0]) if parts else 0.0,
                        "writer_slowest": float(parts[1]) if parts else 0.0,
                        "writer_mean": float(parts[2]) if parts else 0.0}
    results["gc_turns"] = out


def _gc(store: Store, ends: list[float]) -> int:
    from sesstree.repo.maintenance import gc

    return gc(store, progress=lambda done, total: ends.append(time.perf_counter())).removed


# -- output ----------------------------------------------------------------------------------


def save(results: dict[str, Any]) -> None:
    RESULTS.write_text(json.dumps(results, indent=1))


def fmt_s(secs: float) -> str:
    if secs < 0.001:
        return f"{secs * 1e6:.0f} µs"
    return f"{secs * 1000:.1f} ms" if secs < 1 else f"{secs:.2f} s"


def print_tables(results: dict[str, Any]) -> None:
    for backend, table in results.get("commands", {}).items():
        sizes = sorted(table.get("_nodes", {}), key=int)
        print(f"\n### {backend}\n")
        print("| command | " + " | ".join(f"{int(n):,} nodes" for n in sizes)
              + " | growth (smallest to largest) | peak memory at the largest |")
        print("|---|" + "---|" * (len(sizes) + 2))
        for cmd, row in table.items():
            if cmd.startswith("_"):
                continue
            cells = [fmt_s(row[n]["s"]) if n in row else "" for n in sizes]
            lo, hi = row.get(sizes[0]), row.get(sizes[-1])
            growth = f"{hi['s'] / lo['s']:.2f}x" if lo and hi and lo["s"] else ""
            mem = f"{hi['rss'] / 2**20:.0f} MB" if hi and hi["rss"] else ""
            print(f"| `{cmd}` | " + " | ".join(cells) + f" | {growth} | {mem} |")
    for n, r in sorted(results.get("load", {}).items(), key=lambda kv: int(kv[0])):
        print(f"\nload of {int(n):,} events: {fmt_s(r['ours'])} vs floor {fmt_s(r['floor'])} "
              f"({r['ours'] / r['floor']:.2f}x), seed json.loads {fmt_s(r['seed'])}; "
              f"peak memory {r['ours_mem'] / 2**20:.1f} MB vs decoded messages "
              f"{r['decoded_mem'] / 2**20:.1f} MB ({r['ours_mem'] / r['decoded_mem']:.2f}x)")
        if "ours_plain" in r:
            print(f"  small payloads plain (no dictionary): {fmt_s(r['ours_plain'])} "
                  f"({r['ours_plain'] / r['floor']:.2f}x)")
        for part, secs in r.get("floors", {}).items():
            print(f"  floor of one part, {part}: {fmt_s(secs)} ({secs / r['floor']:.2f}x)")
    if "append" in results:
        a = results["append"]
        print(f"\ndefault append {a['ours'] * 1e6:.1f} µs vs seed JSONL {a['seed'] * 1e6:.1f} µs "
              f"({a['seed'] / a['ours']:.2f}x as fast)")
        if "bare_insert" in a:
            print(f"  without a dictionary {a['ours_plain'] * 1e6:.1f} µs "
                  f"({a['seed'] / a['ours_plain']:.2f}x); floors: bare SQLite insert + commit of "
                  f"a 1 KB row {a['bare_insert'] * 1e6:.1f} µs ({a['seed'] / a['bare_insert']:.2f}x), "
                  f"with a unique 32-byte random key {a['bare_insert_keyed'] * 1e6:.1f} µs "
                  f"({a['seed'] / a['bare_insert_keyed']:.2f}x); training the dictionary, once: "
                  f"{a['training'] * 1000:.0f} ms")
    if "fork_bytes" in results:
        fb = results["fork_bytes"]
        for f in sorted(fb["unique_json"], key=int):
            parts = [f"{k} {fb[k][f]:,}" for k in ("sqlite", "postgres") if f in fb[k]]
            print(f"forks {int(f):>5}: unique JSON {fb['unique_json'][f]:,}, " + ", ".join(
                f"{p} ({int(p.split()[1].replace(',', '')) / fb['unique_json'][f]:.2f}x)"
                for p in parts))
    for backend, g in results.get("gc_turns", {}).items():
        print(f"\ngc of {g['removed']:,} unreachable nodes ({backend}) while another process "
              f"appends: {g['seconds']:.2f} s ({g['walk_and_first_chunk']:.2f} s to the end of "
              f"the first chunk), {g['chunks']} chunks, at most "
              f"{g['longest_chunk'] * 1000:.0f} ms from one chunk's end to the next; the writer "
              f"made {g['writer_appends']:,.0f} appends, slowest {g['writer_slowest'] * 1000:.0f} ms, mean "
              f"{g['writer_mean'] * 1e6:.0f} µs")
    if "startup" in results:
        st = results["startup"]
        g = st["git log -n 20"]
        print("\nstart-up: " + ", ".join(f"{k} {v * 1000:.0f} ms ({v / g:.1f}x git)"
                                        for k, v in st.items()))


def plot(results: dict[str, Any]) -> None:
    try:
        import matplotlib
    except ImportError:  # the figures are printed and saved already: only the plots wait
        print("\nno plots: matplotlib is not installed (pip install -e '.[bench]'), then "
              "python bench/bench_scale.py --plot-only")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMG.mkdir(parents=True, exist_ok=True)
    backends = list(results.get("commands", {}))
    if backends:
        fig, axes = plt.subplots(1, len(backends), figsize=(7 * len(backends), 5.5),
                                 squeeze=False)
        for ax, backend in zip(axes[0], backends, strict=True):
            table = results["commands"][backend]
            cmds = [c for c in table if c.startswith("sess")]
            colors = plt.get_cmap("tab20").colors
            for k, cmd in enumerate(cmds):
                row = table[cmd]
                xs = sorted(int(n) for n in row)
                ax.plot(xs, [row[str(x)]["s"] for x in xs], marker="os^vD<>"[k % 7],
                        linestyle="-" if k % 2 == 0 else "--", color=colors[k % 20],
                        label=cmd[5:])
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("nodes in the store")
            ax.set_ylabel("seconds (whole process, median)")
            ax.set_title(f"sess commands against store size ({backend})")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(IMG / "scale-commands.png", dpi=110)
        plt.close(fig)
    if "fork_bytes" in results:
        fb = results["fork_bytes"]
        fig, ax = plt.subplots(figsize=(7, 5))
        for key, label in (("seed_jsonl", "one JSONL file per session"),
                           ("unique_json", "unique JSON content"),
                           ("sqlite", "sesstree, SQLite"), ("postgres", "sesstree, PostgreSQL")):
            if fb.get(key):
                xs = sorted(int(f) for f in fb[key])
                ax.plot(xs, [fb[key][str(x)] / 2**20 for x in xs], marker="o", label=label)
        ax.set_xlabel("forks of a 1,000-event session (+20 events each)")
        ax.set_ylabel("MB at rest")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(IMG / "scale-fork-bytes.png", dpi=110)
        plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--skip", default="", help="comma-separated: load,append,bytes,startup,gc")
    opts = ap.parse_args()
    if opts.plot_only:
        results = json.loads(RESULTS.read_text())
        print_tables(results)
        plot(results)
        return 0
    sizes = [int(s) for s in opts.sizes.split(",") if s]
    backends = opts.backends.split(",")
    skip = set(opts.skip.split(","))
    # Earlier results are kept, and what this run measures replaces them.
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if sizes:
        for backend in backends:
            results.get("commands", {}).pop(backend, None)
    tmp = Path(tempfile.mkdtemp(prefix="sesstree-scale-"))
    try:
        if "startup" not in skip:
            bench_startup(tmp, results)
        if "load" not in skip:
            for n in (10_000, 100_000):
                bench_load(tmp, n, results)
        if "append" not in skip:
            bench_append(tmp, 2_000, results)
        save(results)
        if "sqlite" in backends and sizes:
            sizes_table("sqlite", sizes, tmp, None, results)
        if "postgres" in backends:
            from bench_postgres import server  # (psycopg only when PostgreSQL is measured)

            with server(None) as url:
                if sizes:
                    sizes_table("postgres", sizes, tmp, url, results)
                if "bytes" not in skip:
                    bench_fork_bytes(tmp, url, results)
                if "gc" not in skip:
                    bench_gc_turns(tmp, url, results)
        else:
            if "bytes" not in skip:
                bench_fork_bytes(tmp, None, results)
            if "gc" not in skip:
                bench_gc_turns(tmp, None, results)
        save(results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_tables(results)
    plot(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
