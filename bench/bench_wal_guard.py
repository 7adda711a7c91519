"""What the look at the write-ahead log on open (sesstree.store.sqlite.walguard) costs.

Opening a store and reading its last 20 events (what ``sess log -n 20`` does) with the check
and without it (the check replaced by a no-op), in the same run:

- a store closed cleanly (no WAL: the usual case);
- a store another process has open, with commits in its WAL (an agent at work): the check
  asks the kernel whether store.db-shm is locked and leaves the log alone;
- the same with 20,000 other locks held on the machine (each open reads the whole table);
- a store whose writer was killed (the first open after a crash reads the whole log once).

    python bench/bench_wal_guard.py [--quick]

Each figure is the best of several repeats; ratios compare figures of this same run.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sesstree import open_store
from sesstree.store.sqlite import opening as sqlite_open
from sesstree.store.sqlite.walguard import find_damage

HOLD = """
import sys, time
from sesstree import open_store
store = open_store(sys.argv[1])
q = store.session("q")
for i in range(int(sys.argv[2])):
    q.add_message({"role": "user", "content": f"held {i}"})
print("READY", flush=True)
time.sleep(600)
"""

KILLED = """
import sys
from sesstree import open_store
store = open_store(sys.argv[1])
q = store.session("q")
for i in range(int(sys.argv[2])):
    q.add_message({"role": "user", "content": f"killed {i} " + "x" * 200})
print("READY", flush=True)
import time; time.sleep(600)
"""

LOCKS = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
for i in range(int(sys.argv[2])):
    fcntl.lockf(fd, fcntl.LOCK_SH, 1, 2 * i)  # (every other byte: the locks do not merge)
print("READY", flush=True)
time.sleep(600)
"""


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def log_20(folder: Path) -> None:
    with open_store(folder, create=False) as store:
        store.log("q", limit=20)


def with_and_without(folder: Path, repeat: int) -> tuple[float, float]:
    checked = best(lambda: log_20(folder), repeat)
    guard = sqlite_open.guard_wal
    sqlite_open.guard_wal = lambda path: None  # type: ignore[assignment]
    try:
        bare = best(lambda: log_20(folder), repeat)
    finally:
        sqlite_open.guard_wal = guard
    return checked, bare


def child(script: str, folder: Path, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", script, str(folder), str(count)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("READY")
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 5 if args.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "s"
        with open_store(folder) as store:
            q = store.session("q")
            with store.batch():
                for i in range(2000):
                    q.add_message({"role": "user", "content": f"m {i}"})
        rows = []
        checked, bare = with_and_without(folder, repeat)
        rows.append(("closed cleanly (no WAL)", checked, bare))
        holder = child(HOLD, folder, 300)
        try:
            checked, bare = with_and_without(folder, repeat)
            rows.append(("open in another process (WAL in use)", checked, bare))
            locks = child(LOCKS, Path(tmp) / "locked", 20_000)
            try:
                checked, bare = with_and_without(folder, repeat)
                rows.append(("the same, 20,000 other locks held", checked, bare))
            finally:
                locks.kill()
                locks.communicate()
        finally:
            holder.kill()
            holder.communicate()
        for count in (300, 3000) if args.quick else (300, 3000, 9000):
            crashed = Path(tmp) / f"k{count}"
            proc = child(KILLED, crashed, count)
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            size = (crashed / "store.db-wal").stat().st_size
            store_file = crashed / "store.db"
            scan = best(lambda: find_damage(store_file), 3)  # noqa: B023 - called right here
            rows.append((f"after a kill: reading a {size / 1e6:.1f} MB WAL once", scan, 0.0))
    print(f"WAL check on open (Python {sys.version.split()[0]}, best of {repeat})")
    for label, checked, bare in rows:
        if bare:
            print(f"  {label:<46} {checked * 1e3:7.2f} ms with the check, {bare * 1e3:7.2f} ms "
                  f"without: x{checked / bare:.2f}")
        else:
            print(f"  {label:<46} {checked * 1e3:7.2f} ms (the first open after it only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
