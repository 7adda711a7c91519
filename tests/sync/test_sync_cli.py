"""``sess serve / remote / clone / fetch / pull / push`` as a user runs them."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cli_kit import Sess, msg
from sync_kit import TOKEN, served

from sesstree import open_store

SESS = [sys.executable, "-c", "from sesstree.cli import main; main()"]


@pytest.fixture
def two(sess: Sess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sess:
    """``sess`` in tmp_path/.sess holding main (3 events), and a clone of it in mine/.sess."""
    monkeypatch.delenv("SESS_TOKEN", raising=False)
    sess.quest()
    out = sess.ok("clone", str(tmp_path), "mine")
    assert "Cloned 1 session and 0 tags" in out
    return sess


def mine(sess: Sess, *args: str, env: dict[str, str | None] | None = None) -> str:
    return sess.ok("--store", "mine/.sess", *args, env=env)


def test_clone_log_branch_diff_with_remote_sessions(two: Sess) -> None:
    assert mine(two, "remote", "list") == "origin\n"
    assert mine(two, "remote", "list", "-v") == f"origin\t{two.root}\n"
    shown = mine(two, "remote", "show", "origin").splitlines()
    assert shown[:2] == ["remote origin", f"  url: {two.root}"]
    assert re.fullmatch(r"  origin/main  [0-9a-f]{10}  3 events", shown[2]), shown
    head = two.head()
    assert head[:10] in mine(two, "log", "-n", "1", "origin/main")
    assert "Created session work" in mine(two, "branch", "origin/main~1", "work")
    mine(two, "append", "work", "user/message", msg("user", "another way"))
    out = mine(two, "diff", "origin/main", "work")
    assert "another way" in out
    with open_store(two.root / "mine" / ".sess") as store:
        assert store.fsck() == []


def test_push_fetch_pull_round(two: Sess) -> None:
    mine(two, "append", "user/message", msg("user", "from the clone"))
    out = mine(two, "push")
    assert re.search(r"^   [0-9a-f]{10}\.\.[0-9a-f]{10}  main$", out, re.M), out
    assert "Sent 1 node" in out
    assert "from the clone" in two.ok("log", "-n", "1")
    assert "Everything up to date" in mine(two, "push", "origin", "main")
    two.ok("append", "assistant/message", msg("assistant", "answered at the origin"))
    out = mine(two, "fetch")
    assert re.search(r"^   [0-9a-f]{10}\.\.[0-9a-f]{10}  origin/main$", out, re.M), out
    out = mine(two, "pull")
    assert out.startswith("main: fast-forward")
    assert "answered at the origin" in mine(two, "log", "-n", "1")
    assert "already up to date" in mine(two, "pull", "origin", "main")


def test_user_errors_are_one_line(two: Sess, tmp_path: Path) -> None:
    two.ok("append", "user/message", msg("user", "theirs"))
    mine(two, "append", "user/message", msg("user", "ours"))
    line = two.fail("--store", "mine/.sess", "push", needles=("non-fast-forward",))
    theirs = two.head()
    assert theirs[:12] in line
    line = two.fail("--store", "mine/.sess", "pull", needles=("diverged at",
                                                             "sess branch origin/main"))
    two.fail("--store", "mine/.sess", "fetch", "nowhere", needles=("no remote named 'nowhere'",))
    two.fail("--store", "mine/.sess", "remote", "add", "x", "ftp://host/x",
             needles=("unsupported URL ftp://",))
    two.fail("--store", "mine/.sess", "remote", "add", "origin", "/x",
             needles=("already exists",))
    two.fail("--store", "mine/.sess", "remote", "remove", "nope", needles=("no remote named",))
    two.fail("--store", "mine/.sess", "remote", "show", "nope", needles=("no remote named",))
    mine(two, "remote", "add", "down", "http://127.0.0.1:1")
    two.fail("--store", "mine/.sess", "fetch", "down", needles=("cannot reach", "127.0.0.1:1"))
    two.fail("clone", "http://127.0.0.1:1", "elsewhere", needles=("cannot reach",))
    assert not (tmp_path / "elsewhere").exists()  # a failed clone leaves nothing behind
    two.fail("clone", "http://127.0.0.1:1", needles=("give PATH",))
    assert "Cloned 1 session" in two.ok("clone", str(tmp_path / ".sess"))
    assert (tmp_path / str(tmp_path.name) / ".sess" / "store.db").exists()
    two.fail("clone", str(tmp_path), "mine", needles=("already holds a store",))
    two.fail("--store", "mine/.sess", "push", "--token-file", str(tmp_path / "no-such"),
             needles=("cannot read the token file",))


def test_tokens_are_never_printed(two: Sess, tmp_path: Path) -> None:
    with open_store(two.root / ".sess", create=False) as origin, served(origin) as url:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        mine(two, "remote", "add", "web", url, "--token-file", str(token_file))
        remotes = (tmp_path / "mine" / ".sess" / "remotes.json").read_text()
        assert TOKEN not in remotes and str(token_file) in remotes
        mine(two, "append", "user/message", msg("user", "over http"))
        secret = "wrong-" + TOKEN
        result = two("--store", "mine/.sess", "push", "web", env={"SESS_TOKEN": secret})
        assert result.exit_code == 1
        assert "refused the token" in result.stderr and secret not in result.output
        out = mine(two, "push", "web")  # the token from the remote's token file
        assert "Sent 1 node" in out and TOKEN not in out
        assert TOKEN not in mine(two, "remote", "list", "-v", "--json")
        out = mine(two, "push", "--dry-run", "web")
        assert "Everything up to date" in out


def test_serve_subprocess_clone_and_push(tmp_path: Path, sess: Sess) -> None:
    sess.quest()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    env = {**os.environ, "SESS_HOME": str(tmp_path / "home")}
    env.pop("SESS_TOKEN", None)
    server = subprocess.Popen([*SESS, "--store", ".sess", "serve", "--port", "0", "--token-file",
                               str(token_file)], cwd=tmp_path, env=env, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+) \(writes need the token\)", line)
        assert match, line
        url = match.group(1)
        run = subprocess.run([*SESS, "clone", url, "copy"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        subprocess.run([*SESS, "--store", "copy/.sess", "append", "user/message",
                        msg("user", "pushed")], cwd=tmp_path, env=env, check=True,
                       capture_output=True, timeout=60)
        run = subprocess.run([*SESS, "--store", "copy/.sess", "push"], cwd=tmp_path,
                             env={**env, "SESS_TOKEN": TOKEN}, capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stderr == ""  # no progress when stderr is not a terminal
        assert "pushed" in sess.ok("log", "-n", "1")
        # The same server shows the store in a browser, under its strict policy.
        page = httpx.get(url + "/", timeout=30)
        assert page.status_code == 200 and "/session/main" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        session = httpx.get(url + "/session/main", timeout=30)
        assert session.status_code == 200 and "pushed" in session.text
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)
        if server.stderr is not None:
            server.stderr.close()
    # A bad address: one line, no traceback.
    taken = subprocess.run([*SESS, "serve", "--host", "nonsense"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert taken.returncode == 1
    assert taken.stderr.strip().splitlines() == ["Error: --host 'nonsense' is not an IP address"]


def test_serve_refuses_a_short_token_and_writes_a_strong_one(tmp_path: Path, sess: Sess) -> None:
    sess.quest()
    env = {**os.environ, "SESS_HOME": str(tmp_path / "home")}
    env.pop("SESS_TOKEN", None)
    short = tmp_path / "short"
    short.write_text("1234\n")
    run = subprocess.run([*SESS, "serve", "--port", "0", "--token-file", str(short)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "1234" not in run.stderr + run.stdout
    assert run.stderr.strip().splitlines() == [
        f"Error: the token in {short} is 4 characters long: a server's token needs at least 16, "
        f"or it can be guessed (remove the file and 'sess serve --token-file {short}' writes a "
        "strong one)"]
    # No such file yet: a new strong token is written there, readable by this user only.
    new = tmp_path / "new-token"
    server = subprocess.Popen([*SESS, "serve", "--port", "0", "--token-file", str(new)],
                              cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        wrote = server.stderr.readline()
        token = new.read_text().strip()
        assert wrote.startswith(f"Wrote a new token to {new} (readable only by you)")
        assert token not in wrote and len(token) >= 43  # 32 random bytes, base64url
        assert new.stat().st_mode & 0o777 == 0o600
        match = re.search(r"on (http://127\.0\.0\.1:\d+) \(writes need the token\)",
                          server.stderr.readline())
        assert match
        auth = {"authorization": f"Bearer {token}"}
        r = httpx.post(match.group(1) + "/api/v1/web/tag", json={"name": "t", "rev": "main"},
                       headers=auth, timeout=30)
        assert r.status_code == 200
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)
        if server.stderr is not None:
            server.stderr.close()
    # The next start reads the same token back.
    again = subprocess.Popen([*SESS, "serve", "--port", "0", "--token-file", str(new)],
                             cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert again.stderr is not None
        assert "(writes need the token)" in again.stderr.readline()
        assert new.read_text().strip() == token
    finally:
        again.send_signal(signal.SIGINT)
        again.wait(20)
        if again.stderr is not None:
            again.stderr.close()
    missing = subprocess.run([*SESS, "serve", "--token-file", str(tmp_path / "no" / "dir")],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"Error: cannot write a new token to {tmp_path / 'no' / 'dir'}: No such file or directory"]


def test_serve_counts_wrong_tokens_by_the_connection_not_a_forwarded_header(
        tmp_path: Path, sess: Sess) -> None:
    # Every local program connects from 127.0.0.1, which uvicorn trusts as a proxy by default:
    # if X-Forwarded-For named the client, a guesser would name a new one with every guess.
    sess.quest()
    env = {**os.environ, "SESS_HOME": str(tmp_path / "home")}
    env.pop("SESS_TOKEN", None)
    (tmp_path / "token").write_text("a-long-enough-server-token\n")
    server = subprocess.Popen([*SESS, "serve", "--port", "0", "--token-file", "token"],
                              cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        match = re.search(r"on (http://127\.0\.0\.1:\d+) ", server.stderr.readline())
        assert match
        with httpx.Client(base_url=match.group(1), timeout=30) as c:
            answers = [c.post("/api/v1/push", content=b"\x80", headers={
                "authorization": "Bearer wrong-guess-of-the-token",
                "x-forwarded-for": f"10.0.{i // 256}.{i % 256}"}).status_code
                       for i in range(11)]
        assert answers == [401] * 10 + [429]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)
        if server.stderr is not None:
            server.stderr.close()


def test_a_token_no_http_header_can_carry_is_refused_without_being_shown(
        tmp_path: Path, two: Sess) -> None:
    # A header carries printable ASCII only: a token with anything else cannot be sent (and
    # the encoding error quoted the whole "Bearer TOKEN" header to the terminal).
    secret = "s\u00e9same-" + "\u00e9" * 16
    bad = tmp_path / "bad-token"
    bad.write_text(secret + "\n")
    with open_store(tmp_path / ".sess", create=False) as store, served(store) as url:
        line = two.fail("--store", "mine/.sess", "push", url, "--token-file", str(bad),
                        needles=(str(bad), "printable ASCII"))
        assert "\u00e9" not in line and "\\xe9" not in line
        line = two("--store", "mine/.sess", "push", url, env={"SESS_TOKEN": secret}).stderr
        assert "SESS_TOKEN" in line and "printable ASCII" in line
        assert "\u00e9" not in line and "\\xe9" not in line
        line = two("--store", "mine/.sess", "push", url, env={"SESS_TOKEN": "a\x1bb"}).stderr
        assert "SESS_TOKEN" in line and "\x1b" not in line and "x1b" not in line
    # The server refuses it at start-up, as it does a short one, before it listens.
    line = two.fail("serve", "--port", "0", "--token-file", str(bad),
                    needles=(str(bad), "printable ASCII"))
    assert "\u00e9" not in line and "\\xe9" not in line


def test_serve_leaves_no_part_of_a_new_token_when_the_disk_is_full(tmp_path: Path) -> None:
    # The file-size limit stands in for a full disk: the write fails after a few bytes.
    def little_room() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write, do not kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (20, 20))

    env = {**os.environ, "SESS_HOME": str(tmp_path / "home")}
    new = tmp_path / "new-token"
    run = subprocess.run([*SESS, "serve", "--port", "0", "--token-file", str(new)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                         preexec_fn=little_room)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"Error: cannot write a new token to {new}: File too large"]
    assert not new.exists()  # else the next start would serve with a 20-character token


def _ipv6_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::ffff:127.0.0.2", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_works(), reason="no IPv6 sockets here")
def test_serve_on_an_ipv4_mapped_address_answers_to_that_ipv4_address(tmp_path: Path,
                                                                     sess: Sess) -> None:
    # A dual-stack socket (--host ::, or this loopback stand-in for it) sees an IPv4
    # client's connection arrive on ::ffff:A.B.C.D while its Host header says A.B.C.D.
    sess.quest()
    env = {**os.environ, "SESS_HOME": str(tmp_path / "home")}
    server = subprocess.Popen([*SESS, "serve", "--host", "::ffff:127.0.0.2", "--port", "0"],
                              cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        assert line.startswith("Serving "), line  # no warning: it is a loopback address
        port = re.search(r":(\d+) \(read-only\)", line)
        assert port
        url = f"http://127.0.0.2:{port.group(1)}"
        r = httpx.get(url + "/api/v1/refs", timeout=30)
        assert r.status_code == 200 and "sessions/main" in r.json()["refs"]
        assert httpx.get(url + "/", headers={"host": f"[::ffff:127.0.0.2]:{port.group(1)}"},
                         timeout=30).status_code == 200
        # Another name for it is still refused (DNS rebinding).
        refused = httpx.get(url + "/", headers={"host": "evil.example"}, timeout=30)
        assert refused.status_code == 400 and "evil.example" in refused.text
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)
        if server.stderr is not None:
            server.stderr.close()


def test_serve_refuses_a_token_file_someone_else_could_have_chosen(tmp_path: Path,
                                                                   sess: Sess) -> None:
    # Whoever chooses the file's content chooses the token: a file others may write, or one
    # (or a symlink: say in /tmp, to a file whose first line they know) of another user's.
    def refused(path: Path) -> str:
        run = subprocess.run([*SESS, "serve", "--port", "0", "--token-file", str(path)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=20)
        assert run.returncode == 1, run.stderr
        return run.stderr.strip()

    sess.quest()  # a store to serve, were the token taken
    token = tmp_path / "token"
    token.write_text("a-long-enough-server-token\n")
    token.chmod(0o666)
    assert refused(token) == (
        f"Error: the token file {token} can be written by other users, who could choose the "
        f"server's token: 'chmod go-w {token}' first")
    token.chmod(0o600)
    if os.getuid() != 0:
        return  # only root can give a file away
    known = tmp_path / "known"  # this user's own file, whose first line another user knows
    known.write_text("# ~/.bashrc: executed by bash(1) for non-login shells.\n")
    planted = tmp_path / "planted"
    planted.symlink_to(known)
    os.lchown(planted, 65534, 65534)
    os.chown(token, 65534, 65534)
    for path in (token, planted):
        assert refused(path) == (
            f"Error: the token file {path} belongs to another user, who could choose the "
            "server's token: use a file of your own")
