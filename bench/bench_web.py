"""Time the web view's first render: the forest of a small and a large store, a long session.

    python bench/bench_web.py            # 1,000 and 1,000,000 nodes (building the large store
                                         # takes a few minutes; it is kept in bench/.web-cache)
    python bench/bench_web.py --quick    # 1,000 and 100,000 nodes, a smoke run

Each figure is the first request of a fresh server (cold caches: the path cache and the
templates are new; the SQLite file is in the page cache, as on a machine that used it), as a
browser makes it: ``GET /`` over HTTP to a real uvicorn on 127.0.0.1. Best of several rounds.
Printed ratios, from the same run:

- the forest of the large store against the forest of the small one (target: within 2x);
- the page of a 10,000-event session (its newest 200 events) and its full JSON (all 10,000)
  against reading the session from the store (``store.chain``), the floor of any view of it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from sesstree import Store, make_node, open_store
from sesstree.store.base import RefUpdate
from sesstree.web import create_web_app
from sesstree.web.catalog import Filter
from sesstree.web.views import Views

sys.path.insert(0, str(Path(__file__).parent))
import loopback

HERE = Path(__file__).resolve().parent


@contextmanager
def serve(store: Store) -> Iterator[str]:
    """A fresh web view of ``store`` on a free port of 127.0.0.1."""
    with loopback.serving(create_web_app(store)) as url:
        yield url


def build(store: Store, trees: int, forks: int, events: int) -> None:
    """``trees`` roots, each a base of ``events`` events and ``forks`` sessions of ``events``
    more events forked from the base's middle: ``trees * (forks + 1) * events`` nodes."""
    for t in range(trees):
        nodes = []
        parent = None
        for i in range(events):
            role = "user" if i % 2 == 0 else "assistant"
            node = make_node(parent, f"{role}/message", {"role": role, "content": f"tree {t} base {i}"})
            nodes.append(node)
            parent = node.id
        updates = [RefUpdate(f"sessions/t{t}-base", None, parent, "bench")]
        fork_at = nodes[events // 2].id
        for f in range(forks):
            parent = fork_at
            for i in range(events):
                role = "user" if i % 2 == 0 else "assistant"
                node = make_node(parent, f"{role}/message",
                                 {"role": role, "content": f"tree {t} fork {f} event {i}"})
                nodes.append(node)
                parent = node.id
            updates.append(RefUpdate(f"sessions/t{t}-f{f}", None, parent, "bench"))
        store.write(nodes, updates)


def cached_store(name: str, trees: int, forks: int, events: int) -> Store:
    """The store of that shape, built once and kept in bench/.web-cache."""
    folder = HERE / ".web-cache" / name
    done = folder / "built"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        with open_store(folder) as store:
            build(store, trees, forks, events)
        done.write_text("ok")
        print(f"  built {name} in {time.perf_counter() - t:.1f} s", flush=True)
    return open_store(folder)


def first_render(store: Store, path: str, rounds: int = 5) -> float:
    """Best time of the first ``GET path`` of a fresh server, in seconds."""
    times = []
    for _ in range(rounds):
        with serve(store) as url, httpx.Client(base_url=url, timeout=600) as client:
            t = time.perf_counter()
            response = client.get(path)
            times.append(time.perf_counter() - t)
            assert response.status_code == 200, response.text[:200]
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 nodes instead of 1,000,000")
    args = parser.parse_args()
    small_shape = (8, 4, 25)  # 1,000 nodes, 40 sessions: a full first page, as on the large store
    large_shape = (200, 4, 100) if args.quick else (2000, 4, 100)  # 100,000 or 1,000,000 nodes
    print("web view: first render, best of 5 rounds")
    with cached_store("small", *small_shape) as small, \
            cached_store("quick" if args.quick else "large", *large_shape) as large:
        n_small, n_large = small.backend.count_nodes(), large.backend.count_nodes()
        s_small = len(small.backend.list_refs("sessions/"))
        s_large = len(large.backend.list_refs("sessions/"))
        a = first_render(small, "/")
        b = first_render(large, "/")
        print(f"  forest page over HTTP, {n_small:>9,} nodes, {s_small:>6,} sessions: {a * 1000:8.1f} ms")
        print(f"  forest page over HTTP, {n_large:>9,} nodes, {s_large:>6,} sessions: {b * 1000:8.1f} ms"
              f"   ({b / a:.2f}x the small store; target within 2x)")
        # The same view in process, fresh caches, and the part of it that lists every ref.
        va = min(_time(lambda: Views(small).forest(Filter(), 0, 40)) for _ in range(7))
        vb = min(_time(lambda: Views(large).forest(Filter(), 0, 40)) for _ in range(7))
        refs = min(_time(lambda: large.backend.list_refs("")) for _ in range(7))
        print(f"  forest view in process, small store: {va * 1000:8.1f} ms; large store: "
              f"{vb * 1000:8.1f} ms ({vb / va:.2f}x), of which listing the "
              f"{s_large:,} refs: {refs * 1000:.1f} ms")
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "s") as store:
        s = store.session("long")
        with store.batch():
            for i in range(10_000):
                role = "user" if i % 2 == 0 else "assistant"
                s.add_message({"role": role, "content": f"event {i}: **some** text with `code`"})
        floor = min(_time(lambda: store.chain("long")) for _ in range(5))
        page = first_render(store, "/session/long")
        full = first_render(store, "/api/v1/web/sessions/long?limit=2000")
        print(f"  read the 10,000-event session from the store: {floor * 1000:8.1f} ms (floor)")
        print(f"  its page (newest 200 events):                 {page * 1000:8.1f} ms"
              f"   ({page / floor:.2f}x the floor)")
        print(f"  its JSON, 2,000 events (the most one call gives): {full * 1000:8.1f} ms"
              f"   ({full / floor:.2f}x the floor)")


def _time(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
