"""What ``sess proxy`` costs: latency added against calling the same provider directly, and
storage of a long conversation against the request bodies a request-logging proxy keeps.

The provider is the tests' fake (``tests/proxy/fake_upstream.py``) in a process of its own on
127.0.0.1; the proxy is ``sess proxy`` in another, recording into a fresh SQLite store. The
clients (httpx, asyncio) run here: 32 at once, each holding a growing conversation, first
straight to the provider, then through the proxy, in alternating rounds so both see the same
machine load.

    python bench/bench_proxy.py            # 32 clients x 15 calls per round, 3 rounds, 200 turns
    python bench/bench_proxy.py --quick    # a smoke run
    python bench/bench_proxy.py --delay 0  # a provider that answers at once: throughput
    python bench/bench_proxy.py --against /tmp/old/src   # also another sesstree's proxy, same run
    python bench/bench_proxy.py --only long-stream       # recording 1, 10 and 50 MB streams

Figures are milliseconds per call (non-streamed: the whole reply; streamed: time to the first
chunk of the body); "added" is proxy minus direct at the same percentile, in this run. "CPU/call"
is the proxy process's CPU time per call (forwarding and recording), "loop CPU" the part of it
spent on the event loop's thread (the forwarding: what a call waits for).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec

from sesstree import open_store

HERE = Path(__file__).resolve().parent
FAKE = HERE.parent / "tests" / "proxy" / "fake_upstream.py"
SESS = [sys.executable, "-c", "from sesstree.cli import main; main()"]
_json = msgspec.json.Encoder()

#: A tool's output of the size agents re-send every turn (a file read, a test run).
TOOL_TEXT = ("def test_parse():\n    assert parse('a=1') == {'a': 1}\n" * 24)[:1500]


def tool_output(i: int) -> str:
    """1.5 KB of text that compresses about as well as source code does (not a repetition,
    which zlib would shrink to nothing and flatter the store)."""
    rng = random.Random(i)
    words = ["self", "return", "value", "parse", "assert", "def", "test", "config", "path",
             "None", "import", "from", "for", "in", "if", "else", "raise", "error", "line"]
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < 1500:
        lines.append(" ".join(rng.choice(words) + str(rng.randrange(1000))
                              for _ in range(rng.randrange(3, 9))))
    return "\n".join(lines)[:1500]


def start_upstream(delay: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(FAKE), str(delay)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def start_proxy(store: Path, upstream: str, source: str | None = None
                ) -> tuple[subprocess.Popen[str], str]:
    """``sess proxy`` in a process of its own; ``source``: the ``src`` directory of another
    sesstree to run instead of the installed one."""
    open_store(store).close()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if source is not None:
        env["PYTHONPATH"] = source
    proc = subprocess.Popen([*SESS, "--store", str(store), "proxy", "--upstream", upstream,
                             "--port", "0", "--quiet"], stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("sess proxy did not start")
        m = re.search(r"listening on (http://\S+),", line)
        if m:
            return proc, m.group(1)


def _reply_text(raw: bytes, stream: bool) -> str:
    """The assistant's text in a chat completion, whole or streamed."""
    if not stream:
        return str(msgspec.json.decode(raw)["choices"][0]["message"]["content"])
    parts = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: {"):
            delta = msgspec.json.decode(line[6:])["choices"][0].get("delta", {})
            parts.append(delta.get("content") or "")
    return "".join(parts)


async def client(base: str, n: int, calls: int, stream: bool, out: list[float],
                 start: float = 0.0) -> None:
    """One agent: each call re-sends the whole history, the model's answers as they came
    (an agent that did not would fork its conversation at every call). Its first call opens
    its connection and is not counted: 32 connections opened at once to the fake provider's
    accept loop take up to 600 ms, which would make every p99 measure that loop alone. It
    starts after ``start`` seconds (staggered clients keep their phase: each next call follows
    its own reply)."""
    await asyncio.sleep(start)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": f"client {n}: fix the test"}]
    async with httpx.AsyncClient(timeout=60) as c:
        for i in range(calls):
            body = {"model": "m", "messages": messages, "stream": stream}
            started = time.perf_counter()
            chunks = []
            async with c.stream("POST", base + "/v1/chat/completions", json=body) as r:
                first = None
                async for chunk in r.aiter_raw():
                    if first is None:
                        first = time.perf_counter()
                    chunks.append(chunk)
            done = time.perf_counter()
            if i:
                out.append(((first or done) if stream else done) - started)
            messages += [{"role": "assistant", "content": _reply_text(b"".join(chunks), stream)},
                         {"role": "user", "content": f"tool output {i}: " + TOOL_TEXT[:200]}]


async def round_of(base: str, clients: int, calls: int, stream: bool,
                   stagger: float = 0.0) -> list[float]:
    """``clients`` conversations at once; with ``stagger``, client n starts n/clients of it
    later (spread evenly, as agents on their own rhythm are), else all together, in step."""
    out: list[float] = []
    await asyncio.gather(*(client(base, n, calls, stream, out, stagger * n / clients)
                           for n in range(clients)))
    return out


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time of a process so far, or of one of its threads (Linux)."""
    where = f"/proc/{pid}/task/{thread}/stat" if thread is not None else f"/proc/{pid}/stat"
    try:
        fields = Path(where).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency(direct: str, proxies: dict[str, tuple[str, int]], clients: int, calls: int,
            rounds: int, delay: float, stagger: bool = False) -> None:
    """Rounds of ``clients`` conversations straight to the provider and through each proxy
    (name -> (URL, pid)), alternating, so that all see the same machine load."""
    for stream in (False, True):
        got: dict[str, list[float]] = {"direct": [], **{name: [] for name in proxies}}
        cpu = dict.fromkeys(proxies, 0.0)
        loop = dict.fromkeys(proxies, 0.0)  # the event loop's thread: the forwarding alone
        for _ in range(rounds):
            for name in got:
                base, pid = proxies[name] if name in proxies else (direct, 0)
                before = cpu_seconds(pid) if pid else 0.0
                before_loop = cpu_seconds(pid, pid) if pid else 0.0
                got[name] += asyncio.run(round_of(base, clients, calls, stream,
                                                  delay if stagger else 0.0))
                if pid:
                    time.sleep(0.2)  # the last recordings land just after their replies
                    cpu[name] += cpu_seconds(pid) - before
                    loop[name] += cpu_seconds(pid, pid) - before_loop
        what = "time to first chunk, streamed" if stream else "whole reply, non-streamed"
        print(f"\n{what}: {clients} clients x {calls} calls (the first not counted) x {rounds} "
              f"rounds, provider answering in {delay * 1000:.0f} ms, clients "
              f"{'staggered over one answer' if stagger else 'in step'}")
        print(f"  {'':8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'added p50':>10} "
              f"{'added p99':>10} {'CPU/call':>9} {'loop CPU':>9}")
        for name, values in got.items():
            line = (f"  {name:8} {pct(values, 50):8.2f} {pct(values, 99):8.2f} "
                    f"{statistics.mean(values) * 1000:8.2f}")
            if name in proxies:
                added = [pct(values, p) - pct(got["direct"], p) for p in (50, 99)]
                line += (f" {added[0]:+10.2f} {added[1]:+10.2f} "
                         f"{cpu[name] / len(values) * 1000:6.2f} ms "
                         f"{loop[name] / len(values) * 1000:6.2f} ms")
            print(line)


def storage(proxied: str, store: Path, turns: int) -> None:
    sent = 0
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "x" * 200,
                                               "parameters": {"type": "object"}}}
             for i in range(8)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "fix the flaky test"}]
    with httpx.Client(timeout=60) as c:
        for i in range(turns):
            body = _json.encode({"model": "m", "messages": messages, "tools": tools})
            sent += len(body)
            reply = c.post(proxied + "/v1/chat/completions", content=body,
                           headers={"content-type": "application/json"}).json()
            messages += [reply["choices"][0]["message"],
                         {"role": "user", "content": f"tool output {i}:\n{tool_output(i)}"}]
        time.sleep(1.0)  # the last recordings land just after their replies
        stats = c.get(proxied + "/_sess/stats").json()
    with open_store(store) as s:
        st = s.stats()
        chain = max(s.sessions(), key=lambda info: info.length)
    print(f"\nstorage of a {turns}-turn conversation (each turn re-sends the history; "
          f"{len(tool_output(0))} B of tool output per turn, echoed in the reply)")
    print(f"  request bodies (a request-logging proxy): {sent / 1e6:8.2f} MB")
    print(f"  sesstree store on disk:                   {st.physical_bytes / 1e6:8.2f} MB "
          f"({st.nodes} nodes, session of {chain.length} events)")
    print(f"  ratio: {sent / st.physical_bytes:.0f}x smaller; prefix misses "
          f"{stats['prefix_misses']}, re-sent messages matched {stats['dedup_hits']}")


RECORDER_TURNS = (10, 100, 200)


def recorder_child() -> None:
    """In a process of its own (the sesstree to measure on its path): the recorder thread's
    time per call at turns 10, 100 and 200 of the storage conversation, printed as JSON."""
    from sesstree.proxy.app import Proxy
    try:
        from sesstree.proxy.calls import Call
    except ImportError:  # a sesstree from before the split of app.py
        from sesstree.proxy.app import _Call as Call  # type: ignore[attr-defined,no-redef]
    from sesstree.proxy.protocols import protocol_of

    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "x" * 200,
                                               "parameters": {"type": "object"}}}
             for i in range(8)]
    path = "/v1/chat/completions"
    with tempfile.TemporaryDirectory() as tmp:
        proxy = Proxy(open_store(Path(tmp) / "s"), "http://127.0.0.1:9", quiet=True)
        proxy.recorder.index.refresh()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "fix the flaky test"}]
        took: dict[int, float] = {}
        for i in range(max(RECORDER_TURNS) + 1):
            text = f"answer {i}: " + tool_output(i)[:300]
            reply = {"id": f"c{i}", "model": "m", "object": "chat.completion",
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}]}
            call = Call("POST", path, protocol_of("POST", path),
                        _json.encode({"model": "m", "messages": messages, "tools": tools}),
                        time.perf_counter())
            call.status = 200
            call.chunks = [_json.encode(reply)]
            started = time.perf_counter()
            for _ in proxy._record(call) or ():  # in steps, where recording is one
                pass
            took[i] = time.perf_counter() - started
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": f"tool output {i}:\n{tool_output(i)}"}]
        # the mean of the ten calls up to each turn: one call is too short to time alone
        print(msgspec.json.encode({str(t): statistics.mean(took[i] for i in range(t - 9, t + 1))
                                   for t in RECORDER_TURNS}).decode())


def recorder(sources: dict[str, str | None]) -> None:
    """The recorder thread's time per call as the conversation grows, for each sesstree."""
    print("\nrecording one call (the recorder thread, after the reply has passed: parse, "
          "match the re-sent history, write), storage conversation")
    print("  " + " " * 8 + "".join(f"{f'turn {t}':>12}" for t in RECORDER_TURNS))
    for name, source in sources.items():
        env = {**os.environ}
        if source is not None:
            env["PYTHONPATH"] = source
        out = subprocess.run([sys.executable, __file__, "--only", "recorder-child"], env=env,
                             capture_output=True, text=True, check=True).stdout
        ms = msgspec.json.decode(out)
        print(f"  {name:8}" + "".join(f"{ms[str(t)] * 1000:9.2f} ms" for t in RECORDER_TURNS))


LONG_SIZES = (1, 10, 50)
#: What a streamed chat chunk of one token looks like (OpenAI's shape, ~220 bytes).
_TOKEN_CHUNK = (b'data: {"id":"chatcmpl-long","object":"chat.completion.chunk","created":1700000000,'
                b'"model":"m","choices":[{"index":0,"delta":{"content":" tok%05d"},'
                b'"logprobs":null,"finish_reason":null}]}\n\n')


def _long_call(megabytes: float, text: str) -> Any:
    """A streamed chat call whose reply is about ``megabytes`` MB of one-token chunks, as the
    relay hands them to the recorder (one network read of 64 KB at a time)."""
    try:
        from sesstree.proxy.calls import Call
    except ImportError:
        from sesstree.proxy.app import _Call as Call  # type: ignore[attr-defined,no-redef]
    from sesstree.proxy.protocols import protocol_of

    path = "/v1/chat/completions"
    n = int(megabytes * 1e6 / len(_TOKEN_CHUNK % 0))
    body = b"".join(_TOKEN_CHUNK % (i % 100000) for i in range(n))
    body += (b'data: {"id":"chatcmpl-long","model":"m","choices":[{"index":0,"delta":{},'
             b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    call = Call("POST", path, protocol_of("POST", path), _json.encode(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}),
        time.perf_counter())
    call.status, call.streamed = 200, True
    call.chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]
    return call


def long_stream_child(megabytes: float) -> None:
    """In a process of its own: the recorder's time for one streamed call of ``megabytes``
    MB, then how long a short call made right after another such call waits to be recorded
    (and the long one), on the proxy's recorder thread. Printed as JSON."""
    from sesstree.proxy.app import Proxy

    with tempfile.TemporaryDirectory() as tmp:
        proxy = Proxy(open_store(Path(tmp) / "s"), "http://127.0.0.1:9", quiet=True)
        proxy.recorder.index.refresh()
        call = _long_call(megabytes, "the long one")
        started = time.perf_counter()
        for _ in proxy._record(call) or ():
            pass
        took = time.perf_counter() - started
        try:
            from sesstree.proxy.worker import RecordWorker
            proxy._worker = RecordWorker("bench-recorder")
        except ImportError:  # a sesstree with one recorder thread taking one call at a time
            from concurrent.futures import ThreadPoolExecutor
            proxy._worker = ThreadPoolExecutor(1)  # type: ignore[assignment]
        done: dict[str, float] = {}
        record = proxy.recorder.record

        def timed(exchange: Any) -> Any:
            outcome = record(exchange)
            done[outcome.session] = time.perf_counter()
            return outcome

        proxy.recorder.record = timed  # type: ignore[method-assign]
        short, long = _long_call(0.0, "short call"), _long_call(megabytes, "the long one again")
        started = time.perf_counter()
        proxy._submit(long)
        proxy._submit(short)
        proxy.flush()
    print(msgspec.json.encode({"took": took, "short_after": done["short-call"] - started,
                               "long_after": done["the-long-one-again"] - started}).decode())


def long_stream(sources: dict[str, str | None], budget: float) -> None:
    """Recording a long streamed reply, per MB, and the wait of the call after it. A size is
    given ``budget`` seconds (quadratic parsing would take hours at 50 MB); the larger ones
    are skipped after one that ran out of it."""
    print("\nrecording a long streamed chat reply (one-token chunks of ~220 B; the recorder "
          "thread: parse, build the reply, write)")
    print("  " + " " * 8 + "".join(f"{f'{mb} MB':>12}" for mb in LONG_SIZES)
          + f"{'50 MB / 1 MB':>14}" + "   a short call right after the longest")
    for name, source in sources.items():
        env = {**os.environ}
        if source is not None:
            env["PYTHONPATH"] = source
        got: dict[int, dict[str, float]] = {}
        for mb in LONG_SIZES:
            try:
                out = subprocess.run([sys.executable, __file__, "--only", "long-stream-child",
                                      "--size", str(mb)], env=env, capture_output=True,
                                     text=True, check=True, timeout=budget).stdout
            except subprocess.TimeoutExpired:
                break
            got[mb] = msgspec.json.decode(out)
        cells = "".join(f"{got[mb]['took'] / mb * 1000:7.0f} ms/MB" if mb in got
                        else f"{f'(> {budget:g} s)':>12}" for mb in LONG_SIZES)
        ratio = (f"{got[50]['took'] / 50 / got[1]['took']:13.2f}x" if 50 in got and 1 in got
                 else f"{'-':>14}")
        tail = ""
        if got:
            big = max(got)
            tail = (f"   recorded after {got[big]['short_after'] * 1000:.0f} ms (the {big} MB "
                    f"one after {got[big]['long_after'] * 1000:.0f} ms)")
        print(f"  {name:8}{cells}{ratio}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--delay", type=float, default=0.2,
                        help="seconds the provider takes to answer (default 0.2; 0 makes the "
                             "32 clients a throughput test of the proxy's one process)")
    parser.add_argument("--clients", type=int, default=None, help="concurrent clients (32)")
    parser.add_argument("--stagger", action="store_true",
                        help="spread the clients' starts evenly over one provider answer (agents "
                             "on their own rhythm) instead of starting them all together")
    parser.add_argument("--only", choices=["latency", "recorder", "storage", "long-stream",
                                           "recorder-child", "long-stream-child"],
                        help="run one part")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="long-stream: seconds given to each size before the larger ones "
                             "are skipped (default 120)")
    parser.add_argument("--size", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--against", metavar="SRC", action="append", default=[],
                        help="also measure the proxy of the sesstree source tree SRC (its src "
                             "directory), as 'before' (repeatable: before, before2, ...)")
    args = parser.parse_args()
    if args.only == "recorder-child":
        recorder_child()
        return
    if args.only == "long-stream-child":
        long_stream_child(args.size)
        return
    clients, calls, rounds, turns = (8, 5, 1, 40) if args.quick else (32, 15, 3, 200)
    if args.clients is not None:
        clients = args.clients
    sources: dict[str, str | None] = {"proxy": None, **{
        "before" + (str(i + 1) if i else ""): src for i, src in enumerate(args.against)}}
    if args.only == "long-stream":
        long_stream(sources, args.budget)
        return
    up, upstream = start_upstream(args.delay)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if args.only in (None, "latency"):
                procs: list[subprocess.Popen[str]] = []
                proxies: dict[str, tuple[str, int]] = {}
                try:
                    for name, src in sources.items():
                        px, proxied = start_proxy(Path(tmp) / f"latency-{name}", upstream, src)
                        procs.append(px)
                        proxies[name] = (proxied, px.pid)
                    latency(upstream, proxies, clients, calls, rounds, args.delay, args.stagger)
                finally:
                    for px in procs:
                        px.terminate()
                        px.wait()
            if args.only in (None, "recorder"):
                recorder(sources)
            if args.only is None:
                long_stream(sources, args.budget)
            if args.only in (None, "storage"):
                px, proxied = start_proxy(Path(tmp) / "storage", upstream)
                try:
                    storage(proxied, Path(tmp) / "storage", turns)
                finally:
                    px.terminate()
                    px.wait()
        finally:
            assert up.stdin is not None
            up.stdin.close()
            up.wait()


if __name__ == "__main__":
    main()
