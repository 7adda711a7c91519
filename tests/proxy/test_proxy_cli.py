"""``sess proxy`` as a user runs it: a real process, stopped with Ctrl-C; an upstream it
could not reach refused in one line."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fake_upstream import FakeUpstream

from sesstree import open_store

SESS = [sys.executable, "-c", "from sesstree.cli import main; main()"]


def start(store: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([*SESS, "--store", str(store), "proxy", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"the proxy did not start: {proc.communicate()}")


def test_run_record_and_stop(tmp_path: Path, upstream: FakeUpstream) -> None:
    open_store(tmp_path / "s").close()
    secret_url = upstream.url.replace("http://", "http://user:hunter2secret@")
    proc, url = start(tmp_path / "s", "--upstream", secret_url, "--port", "0")
    try:
        r = httpx.post(url + "/v1/chat/completions",
                       headers={"Authorization": "Bearer sk-cli-1234567890abcdefgh"},
                       json={"model": "m",
                             "messages": [{"role": "user", "content": "from the cli"}]})
        assert r.status_code == 200
        stats = httpx.get(url + "/_sess/stats").json()
        assert stats["requests"] == 1
        # the upstream's Server and Date headers, not the proxy's own as well
        direct, via = httpx.get(upstream.url + "/v1/models"), httpx.get(url + "/v1/models")
        assert via.headers.get_list("server") == direct.headers.get_list("server")
        assert len(via.headers.get_list("date")) == 1
        # the URL's credentials went upstream as Basic authorization
        assert {k.lower(): v for k, v in upstream.headers[-1].items()}["authorization"] == \
            "Basic dXNlcjpodW50ZXIyc2VjcmV0"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "hunter2secret" not in err + out and "sk-cli-1234567890" not in err + out
    assert re.search(r"POST /v1/chat/completions 200 -> from-the-cli \(new\) \+\d+ nodes", err)
    assert "sess proxy: requests 2, recorded 1, passed through 1" in err  # the counters, at exit
    with open_store(tmp_path / "s") as store:
        assert store.messages("from-the-cli")[0]["content"] == "from the cli"


def test_bad_upstream_and_busy_port_are_one_line(tmp_path: Path) -> None:
    open_store(tmp_path / "s").close()
    bad = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--upstream",
                          "ftp://me:hunter2secret@example.invalid"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and "http:// or https://" in bad.stderr
    assert "hunter2secret" not in bad.stderr and "me:" not in bad.stderr
    for url, problem in (("http://me:hunter2secret@", "must be an http:// or https:// URL"),
                         ("http://me:hunter2secret@h:bad/?key=AIzaQuerySecret",
                          "is not a URL: Invalid port")):
        bad = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--upstream",
                              url], capture_output=True, text=True, timeout=30)
        assert bad.returncode == 1
        assert bad.stderr.count("\n") == 1 and problem in bad.stderr, bad.stderr
        assert "hunter2secret" not in bad.stderr and "AIzaQuerySecret" not in bad.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--upstream",
                                "http://127.0.0.1:9", "--port", str(port)],
                               capture_output=True, text=True, timeout=30)
    assert taken.returncode == 1
    assert taken.stderr.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr


def test_help_does_not_load_the_server_stack() -> None:
    code = ("import sys; from click.testing import CliRunner; from sesstree.cli import cli; "
            "r = CliRunner().invoke(cli, ['--help']); assert 'proxy' in r.output; "
            "print(sorted(m for m in ('starlette', 'uvicorn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("url, named", [
    ("http://a..b", "a..b"), (f"https://{'x' * 64}.example/v1", "x" * 64),
    ("http://127.0.0.1:99999", "99999"), ("http://127.0.0.1:0/v1", "port 0 ")])
def test_sess_proxy_refuses_an_upstream_it_could_not_reach(
        tmp_path: Path, url: str, named: str) -> None:
    """A host that is no DNS name, a port outside 1..65535: one error line, no server (a port
    out of range was taken modulo 65536, sending the calls and their keys elsewhere)."""
    done = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--upstream", url,
                           "--port", "0"], capture_output=True, text=True, timeout=20)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "listening" not in done.stderr, lines


def test_stats_of_a_running_proxy_per_session(tmp_path: Path, upstream: FakeUpstream) -> None:
    open_store(tmp_path / "s").close()
    proc, url = start(tmp_path / "s", "--upstream", upstream.url, "--port", "0")
    port = url.rsplit(":", 1)[1]
    try:
        history = [{"role": "user", "content": "count the files"}]
        for turn in range(2):
            r = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": history})
            history += [r.json()["choices"][0]["message"], {"role": "user", "content": f"{turn}"}]
        # an edit of the first message the model read: the re-sent history diverges
        edited = [{"role": "user", "content": "count the dirs"}, *history[1:]]
        httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": edited})
        deadline = time.monotonic() + 20
        while httpx.get(url + "/_sess/stats").json()["recorded"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shown = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--stats",
                                "--port", port], capture_output=True, text=True, timeout=30)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("requests 3, recorded 3,") and "resent unmatched 4" in lines[0]
    assert lines[1].split() == ["session", "calls", "re-sent", "matched", "unmatched",
                                "diverged"]
    # the conversation: 2 calls, 2 messages re-sent and matched; the edit: 4 re-sent, none
    # matched, on a session of its own
    assert [line.split() for line in lines[2:]] == [["count-the-dirs", "1", "4", "0", "4", "1"],
                                                   ["count-the-files", "2", "2", "2", "0", "0"]]
    assert "4 re-sent did not match" in err
    assert "sess proxy: count-the-dirs: 4 of 4 re-sent messages did not match" in err
    # no proxy there: one line, exit 1
    gone = subprocess.run([*SESS, "--store", str(tmp_path / "s"), "proxy", "--stats", "--port",
                           port], capture_output=True, text=True, timeout=30)
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1
    assert "no sess proxy answers at http://127.0.0.1:" in gone.stderr
