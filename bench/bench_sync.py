"""Measure sync: what a push sends whatever the remote's size, clone over HTTP beside a local
clone and ``git clone``, and a no-op fetch of many sessions. Prints ratios of figures taken in
this same run.

    python bench/bench_sync.py            # full sizes (a few minutes)
    python bench/bench_sync.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sesstree import Store, open_store, sync
from sesstree.server import create_app
from sesstree.sync import clone

sys.path.insert(0, str(Path(__file__).parent))
import loopback
from bench_store import message  # the same realistic messages as the store bench

TOKEN = "bench-token"
ROLE_TYPE = {"user": "user/message", "assistant": "assistant/message", "tool": "tool/result"}


def events(n: int, offset: int = 0) -> list[tuple[str, Any]]:
    out = []
    for i in range(offset, offset + n):
        m = message(i)
        out.append((ROLE_TYPE[m["role"]], m))
    return out


def fill(store: Store, name: str, n: int, start: str | None = None, offset: int = 0) -> None:
    """Session ``name`` with ``n`` more events, in batches of 10,000."""
    if start is not None:
        store.fork(name, start)
    session = store.session(name)
    for at in range(0, n, 10_000):
        with store.batch():
            session.extend(events(min(10_000, n - at), offset + at))


@contextmanager
def serving(store: Store) -> Iterator[str]:
    """``store`` served as ``sess serve`` serves it, with writes open to TOKEN."""
    with loopback.serving(create_app(store, token=TOKEN)) as url:
        yield url


def best(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_push(root: Path, big: int) -> None:
    """One new event onto a 10,000-event session: remote of 10,000 nodes against ``big``."""
    print(f"\n== push 1 event onto a 10,000-event session (remote: 10,000 vs {big:,} nodes)")
    figures = {}
    for size in (10_000, big):
        remote = open_store(root / f"remote-{size}")
        fill(remote, "long", 10_000)
        if size > 10_000:
            fill(remote, "other", size - 10_000, offset=10_000)
        local = open_store(root / f"local-{size}")
        sync.pull(local, remote, ["long"])
        with serving(remote) as url:
            sent, seconds = _time_pushes(local, url)
        figures[size] = seconds
        print(f"remote {remote.backend.count_nodes():>9,} nodes: sent {sent[-1][0]} node in "
              f"{sent[-1][1]} round trips, {seconds * 1000:.1f} ms (HTTP, best of 7)")
        local.close()
        remote.close()
    print(f"time ratio big/small: {figures[big] / figures[10_000]:.2f}x (target <= 1.5x)")


def _time_pushes(local: Store, url: str) -> tuple[list[tuple[int, int]], float]:
    """Best time of a push of one new event; (nodes, round trips) of each push."""
    sent: list[tuple[int, int]] = []

    def one() -> None:
        local.session("long").append("user/message",
                                     {"role": "user", "content": f"more {len(sent)}"})
        r = sync.push(local, url, ["long"], token=TOKEN)
        sent.append((r.nodes, r.round_trips))
    return sent, best(one, 7)


def git_repo(store: Store, path: Path) -> None:
    """The same conversations as a git repository: a file per message, a commit per event."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=path, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    mark = 0
    import json

    for info in store.sessions():
        parent = None
        for depth, node in enumerate(reversed(store.log(info.name)), 1):
            mark += 1
            data = json.dumps(node.data).encode()
            msg = node.type.encode()
            proc.stdin.write(b"commit refs/heads/" + info.name.encode() + b"\n")
            proc.stdin.write(b"mark :%d\ncommitter s <s@x> %d +0000\n" % (mark, 1_700_000_000 + depth))
            proc.stdin.write(b"data %d\n%s\n" % (len(msg), msg))
            if parent is not None:
                proc.stdin.write(b"from :%d\n" % parent)
            proc.stdin.write(b"M 100644 inline %06d.json\ndata %d\n%s\n" % (depth, len(data), data))
            parent = mark
    proc.stdin.close()
    proc.wait()


def bench_clone(root: Path, n: int) -> None:
    print(f"\n== clone of a {n:,}-node store")
    source = open_store(root / "clone-src")
    per = 1000
    fill(source, "s0", per)
    for i in range(1, n // per):
        fill(source, f"s{i}", per - 50, start=f"s{i - 1}~{per // 2}" if i % 4 == 0 else None,
             offset=i * per)
    nodes = source.backend.count_nodes()
    times: dict[str, float] = {}
    t = time.perf_counter()
    clone(root / "clone-src", root / "clone-path").close()
    times["path"] = time.perf_counter() - t
    with serving(source) as url:
        t = time.perf_counter()
        clone(url, root / "clone-http").close()
        times["http"] = time.perf_counter() - t
    git = shutil.which("git")
    if git is not None:
        git_repo(source, root / "conv.git")
        t = time.perf_counter()
        subprocess.run([git, "clone", "-q", "--no-local", "--bare", str(root / "conv.git"),
                        str(root / "conv-clone.git")], check=True)
        times["git"] = time.perf_counter() - t
    source.close()
    print(f"{nodes:,} nodes: path to path {times['path']:.2f} s, over HTTP {times['http']:.2f} s"
          + (f", git clone --no-local {times['git']:.2f} s" if "git" in times else ""))
    print(f"HTTP / path: {times['http'] / times['path']:.2f}x (target <= 2x)"
          + (f"; HTTP / git: {times['http'] / times['git']:.2f}x" if "git" in times else ""))


def bench_noop_fetch(root: Path, sessions: int) -> None:
    print(f"\n== no-op fetch of an up-to-date store of {sessions:,} sessions")
    remote = open_store(root / "many")
    fill(remote, "base", 20)
    with remote.batch():
        for i in range(sessions - 1):
            remote.fork(f"s{i:05d}", "base~" + str(i % 15))
            remote.session(f"s{i:05d}").append("user/message",
                                               {"role": "user", "content": f"fork {i}"})
    local = open_store(root / "many-local")
    with serving(remote) as url:
        sync.fetch(local, url)
        fetched = []
        seconds = best(lambda: fetched.append(sync.fetch(local, url)), 5)
    print(f"{sessions:,} sessions: {fetched[-1].round_trips} round trip, {fetched[-1].nodes} "
          f"nodes, {seconds * 1000:.0f} ms")
    local.close()
    remote.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sesstree-bench-sync-"))
    try:
        bench_push(root, 100_000 if args.quick else 1_000_000)
        bench_clone(root, 20_000 if args.quick else 100_000)
        bench_noop_fetch(root, 2_000 if args.quick else 10_000)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
