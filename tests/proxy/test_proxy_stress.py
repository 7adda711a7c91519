"""The long campaigns for the proxy (``pytest -m stress``): tens of megabytes of streamed
reply through a real proxy on loopback, the calls after them, and Ctrl-C during and after.

No clock decides a result: the order in which the proxy recorded the calls and the count of
calls recorded (or named as not recorded) do. The waits are bounds a hung proxy would
exceed by far, not measurements.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy
from test_proxy_cli import start
from test_proxy_long_streams import ask, big_chat_events

from sesstree import Store, open_store

pytestmark = pytest.mark.stress

SHORT = 7


def recorded_order(lines: list[str]) -> list[str]:
    return [line.split(" -> ")[1].split(" ")[0] for line in lines if " -> " in line]


def short_calls(base: str) -> None:
    # All at once, as soon as the long reply has passed: an agent's next steps, or others.
    with ThreadPoolExecutor(SHORT) as pool:
        replies = list(pool.map(lambda i: ask(base, f"short {i}"), range(SHORT)))
    assert all(r.status_code == 200 for r in replies)


def test_calls_after_a_40_mb_stream_are_recorded_before_it(store: Store,
                                                           upstream: FakeUpstream) -> None:
    upstream.add(Scripted(events=big_chat_events(40)))
    with RunningProxy(store, upstream.url) as proxy:
        assert len(ask(proxy.url, "the long one").content) > 40_000_000
        short_calls(proxy.url)
        proxy.flush()
        order = recorded_order(proxy.lines)
    # the short calls went between the long one's turns, not behind all of them
    assert sorted(order) == sorted([*(f"short-{i}" for i in range(SHORT)), "the-long-one"])
    assert order[-1] == "the-long-one"
    assert len(store.messages("the-long-one")[1]["content"]) == 40_000_000


def test_ctrl_c_after_a_50_mb_stream_records_every_call_and_exits(
        tmp_path: Path, upstream: FakeUpstream) -> None:
    open_store(tmp_path / "s").close()
    upstream.add(Scripted(events=big_chat_events(50)))
    proc, url = start(tmp_path / "s", "--upstream", upstream.url, "--port", "0")
    try:
        assert len(ask(url, "the long one").content) > 50_000_000
        short_calls(url)
    finally:
        proc.send_signal(signal.SIGINT)  # at once: the recordings are still under way
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = err.splitlines()
    order = recorded_order(lines)
    unrecorded = [line for line in lines if ": not recorded: the proxy stopped" in line]
    # every call received is recorded, or named as not recorded
    assert len(order) + len(unrecorded) == SHORT + 1, err[-3000:]
    assert unrecorded == []  # 30 s is ample for 50 MB: nothing was given up
    with open_store(tmp_path / "s") as store:
        assert len(store.messages("the-long-one")[1]["content"]) == 50_000_000
        assert len(list(store.sessions())) == SHORT + 1


def test_ctrl_c_during_a_50_mb_stream_cuts_it_records_it_and_exits(
        tmp_path: Path, upstream: FakeUpstream) -> None:
    open_store(tmp_path / "s").close()
    proc, url = start(tmp_path / "s", "--upstream", upstream.url, "--port", "0")
    got = [0]
    halfway = threading.Event()

    def read() -> None:
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", timeout=120, json={
                    "model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "the long one"}]}) as r:
                for chunk in r.iter_raw():
                    got[0] += len(chunk)
                    if got[0] > 20_000_000:
                        halfway.set()
        except httpx.HTTPError:
            pass  # the proxy broke the stream off as it stopped
        finally:
            halfway.set()

    try:
        for i in range(3):
            assert ask(url, f"before {i}").status_code == 200
        events = big_chat_events(50)
        # half the reply, then the upstream holds the rest back (until released, or 10 s)
        upstream.add(Scripted(events=events, stall_after=len(events) // 2))
        reader = threading.Thread(target=read)
        reader.start()
        assert halfway.wait(120)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        upstream.release.set()
    reader.join(60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = err.splitlines()
    order = recorded_order(lines)
    unrecorded = [line for line in lines if ": not recorded: the proxy stopped" in line]
    assert len(order) + len(unrecorded) == 4, err[-3000:]
    assert sorted(order) == ["before-0", "before-1", "before-2", "the-long-one"]
    assert re.search(r"-> the-long-one \(new\).*cut by the proxy", err), err[-3000:]
    with open_store(tmp_path / "s") as store:
        node = next(n for n in store.log("the-long-one") if n.type == "step/end")
        assert node.data["cut_by"] == "proxy" and node.data["incomplete"] is True
        chunk = next(n for n in store.log("the-long-one") if n.type == "assistant/chunk")
        assert len(chunk.data["content"]) >= 20_000_000


def test_a_second_ctrl_c_during_a_stream_still_accounts_for_every_call(
        tmp_path: Path, upstream: FakeUpstream) -> None:
    # The second Ctrl-C makes the server quit without its shutdown (no grace period, no
    # lifespan): the calls received are still recorded or named, and it exits 0.
    open_store(tmp_path / "s").close()
    proc, url = start(tmp_path / "s", "--upstream", upstream.url, "--port", "0")
    halfway = threading.Event()

    def read() -> None:
        got = 0
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", timeout=120, json={
                    "model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "the long one"}]}) as r:
                for chunk in r.iter_raw():
                    got += len(chunk)
                    if got > 10_000_000:
                        halfway.set()
        except httpx.HTTPError:
            pass
        finally:
            halfway.set()

    try:
        for i in range(3):
            assert ask(url, f"before {i}").status_code == 200
        events = big_chat_events(20)
        upstream.add(Scripted(events=events, stall_after=len(events) // 2))
        reader = threading.Thread(target=read)
        reader.start()
        assert halfway.wait(120)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(1)  # the first Ctrl-C waits for the stream: still running
        except subprocess.TimeoutExpired:
            pass
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        upstream.release.set()
    reader.join(60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = err.splitlines()
    order = recorded_order(lines)
    unrecorded = [line for line in lines if "not recorded" in line and "stopp" in line]
    assert len(order) + len(unrecorded) == 4, err[-3000:]
    assert {"before-0", "before-1", "before-2"} <= set(order)
    assert "sess proxy: requests 4, recorded" in err  # the counters, at exit
