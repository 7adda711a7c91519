"""What ``sess watch`` costs: CPU while idle over 1,000 files, and catching up on them.

    .venv/bin/python bench/bench_watch.py [--files N] [--idle SECONDS]

Writes N transcripts (a quarter each of Claude Code, Codex, pi and Gemini CLI, 4 turns with a
tool call each, shaped as tests/helpers/agent_writers.py makes them) under a temporary HOME,
then measures, each against a baseline taken in the same run:

- catching up: ``sess watch --once`` of the agents' folders into a fresh store, against
  ``sess import -r`` of the same folders into another (alternated, best of 2 each);
- one line appended to a long session (5,000 lines of Claude Code): the watch's look at it
  (it reads the line, then lands the file's tree again from the records it keeps) against
  ``sess import`` of the file (which reads and parses it all), in one process, alternated;
- idle: the CPU time (utime + stime from /proc/PID/stat) that a caught-up ``sess watch``
  uses over an idle interval, with notifications and with ``--poll``, side by side, against a
  ``sleep`` process over the same interval. A watch that is idle should cost about what
  ``sleep`` costs; polling 1,000 files once a second is the cost that notifications avoid.

No number here is asserted anywhere: the machine is shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))  # the sesstree of this tree, as the runs below use

from tests.helpers.agent_writers import AGENTS, session_lines, session_path  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
_SESS = "from sesstree.cli import main; main()"


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "PI_CODING_AGENT_DIR", "GEMINI_CLI_HOME",
                 "WATCHFILES_FORCE_POLLING"):
        env.pop(name, None)
    return env


def _folders(home: Path) -> list[str]:
    return [str(home / ".claude" / "projects"), str(home / ".codex" / "sessions"),
            str(home / ".pi" / "agent" / "sessions"), str(home / ".gemini" / "tmp")]


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _write_files(home: Path, n: int) -> int:
    size = 0
    for i in range(n):
        agent = AGENTS[i % len(AGENTS)]
        path = session_path(home, agent, f"bench{i}")
        if agent == "codex":  # one day folder holds many rollouts: the names differ
            path = path.with_name(f"rollout-2026-11-30T10-00-00-{i:08d}-0000-7000-8000-"
                                  f"{i:012d}.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(line + "\n" for line in session_lines(agent, f"bench{i}", 4))
        path.write_text(text)
        size += len(text)
    return size


def _run(home: Path, store: Path, *args: str) -> float:
    subprocess.run([sys.executable, "-c", _SESS, "--store", str(store), "init"],
                   env=_env(home), check=True, capture_output=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _SESS, "--store", str(store), *args],
                   env=_env(home), check=True, capture_output=True)
    return time.perf_counter() - start


def _append_costs(tmp: Path, rounds: int = 5) -> tuple[float, float]:
    """Seconds per look at a long session that grew by one line, and per import of it."""
    from sesstree import open_store
    from sesstree.interop import import_files
    from sesstree.interop.follow import Follower

    lines = session_lines("claude", "long", 1250 + rounds)
    path = session_path(tmp / "long", "claude", "long")
    path.parent.mkdir(parents=True)
    path.write_text("".join(line + "\n" for line in lines[:-2 * rounds]))
    look_s, import_s = [], []
    with open_store(tmp / "long-w") as watched, open_store(tmp / "long-i") as imported:
        follower = Follower(watched)
        follower.look_all([path])
        import_files(imported, [path])
        for i in range(rounds):
            for line, store in ((lines[-2 * rounds + 2 * i], "w"),
                                (lines[-2 * rounds + 2 * i + 1], "i")):
                with path.open("a") as f:
                    f.write(line + "\n")
                start = time.perf_counter()
                if store == "w":
                    follower.look_all([path])
                    look_s.append(time.perf_counter() - start)
                else:
                    import_files(imported, [path])
                    import_s.append(time.perf_counter() - start)
    return min(look_s), min(import_s)


def _started(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("watching "):
            return
    raise SystemExit(f"the watch ended before it caught up: exit {proc.wait()}")


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=30.0, help="idle interval, seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        size = _write_files(home, args.files)
        print(f"{args.files} files, {size / 1e6:.1f} MB, under {home}")

        watch_s, import_s = [], []
        for i in range(2):  # alternated, so that a neighbour's load falls on both
            watch_s.append(_run(home, Path(tmp) / f"w{i}", "watch", "--once"))
            import_s.append(_run(home, Path(tmp) / f"i{i}", "import", "-r", *_folders(home)))
        w, im = min(watch_s), min(import_s)
        print(f"catch up   sess watch --once   {w:7.2f} s   {args.files / w:7.0f} files/s")
        print(f"           sess import -r      {im:7.2f} s   {args.files / im:7.0f} files/s")
        print(f"           ratio watch/import  {w / im:7.2f}")

        look, whole = _append_costs(Path(tmp))
        print(f"one line appended to 5,000: look {look * 1000:7.1f} ms   import {whole * 1000:7.1f}"
              f" ms   ratio {look / whole:5.2f}")

        # Idle: two caught-up watches (their own stores, caught up first) and a sleep.
        procs = {}
        for name, extra in (("notify", []), ("poll", ["--poll"])):
            store = Path(tmp) / f"idle-{name}"
            _run(home, store, "watch", "--once")
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", _SESS, "--store", str(store), "watch", *extra],
                env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for proc in procs.values():
                _started(proc)
            procs_sleep = subprocess.Popen(["sleep", str(args.idle + 60)])
            time.sleep(2.0)  # past start-up
            before = {n: _cpu(p.pid) for n, p in procs.items()}
            before["sleep"] = _cpu(procs_sleep.pid)
            time.sleep(args.idle)
            after = {n: _cpu(p.pid) for n, p in procs.items()}
            after["sleep"] = _cpu(procs_sleep.pid)
            procs_sleep.kill()
            procs_sleep.wait()
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.communicate(timeout=60)
        used = {n: after[n] - before[n] for n in after}
        tick = 1 / _TICK
        print(f"idle {args.idle:.0f} s (CPU seconds; the clock ticks every {tick:.2f} s)")
        for name in ("notify", "poll", "sleep"):
            print(f"   {name:8} {used[name]:7.2f} s   {100 * used[name] / args.idle:6.2f}% "
                  "of one core")
        print(f"   ratio notify/poll  {used['notify'] / max(used['poll'], tick):7.3f}")
        print(f"   notify above sleep {used['notify'] - used['sleep']:7.2f} s "
              f"({(used['notify'] - used['sleep']) / args.idle * 1000:.1f} ms per second)")


if __name__ == "__main__":
    main()
