"""Hostile arguments, names and output: every one is one line and a non-zero exit, never a
traceback, and changes nothing. Each test guards something that once gave a traceback or a
wrong answer; the fuzzing campaign at the end keeps looking for more."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from cli_kit import Sess, msg, user_error
from click.testing import Result

from sesstree import InvalidRefNameError, Store, open_store
from sesstree.node import check_ref_name

SESS = [sys.executable, "-c", "from sesstree.cli import main; main()"]


def run(root: Path, *args: str | bytes, stdout: object = subprocess.PIPE,
        stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``sess`` as a user runs it: a real process, real argv bytes, real file descriptors."""
    env = {**os.environ, "SESS_STORE": str(root / ".sess")}
    return subprocess.run([*SESS, *args], cwd=root, env=env, stdout=stdout,  # type: ignore[arg-type]
                          stderr=subprocess.PIPE, input=stdin, timeout=60)


def one_line_error(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    assert proc.returncode != 0
    err = proc.stderr.decode(errors="backslashreplace")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def quest(sess: Sess) -> Sess:
    sess.quest()
    sess.ok("tag", "v1")
    return sess


# -- output that cannot be written -------------------------------------------------------------


@pytest.mark.parametrize("args", [("log",), ("messages", "--json"), ("status",), ("show", "--json"),
                                  ("log", "--graph", "--all"), ("reflog",)])
def test_a_full_disk_on_stdout_is_one_line(quest: Sess, args: tuple[str, ...]) -> None:
    with open("/dev/full", "wb") as full:
        proc = run(quest.root, *args, stdout=full)
    one_line_error(proc, "cannot write the output", "No space left on device")


# -- arguments that are not text, or are too much of it ---------------------------------------


@pytest.mark.parametrize("args", [
    (b"log", b"\xff"), (b"branch", b"\xff\xfe"), (b"show", b"ma\xffin"),
    (b"checkout", b"\xc3"), (b"append", b"\xff", b"user/message", b'{"role": "user"}'),
    (b"tag", b"v\xff"), (b"reflog", b"\xff"), (b"diff", b"main", b"\xff"),
    (b"branch", b"-m", b"main", b"\xff"), (b"reset", b"main", b"\xff"),
])
def test_argv_that_is_not_utf8_is_one_line(quest: Sess, args: tuple[bytes, ...]) -> None:
    before = quest.json("reflog", "main")
    one_line_error(run(quest.root, *args), "UTF-8")
    assert quest.json("reflog", "main") == before


def test_stdin_that_is_not_utf8_is_one_line(quest: Sess) -> None:
    proc = run(quest.root, "append", "user/message", stdin=b'{"role": "user", "content": "\xff"}')
    one_line_error(proc, "stdin is not valid UTF-8")


@pytest.mark.parametrize("rev", [
    "main~" + "9" * 5000, "main@{" + "9" * 5000 + "}", "main~99999999999", "main@{99999999999}",
    "HEAD" + "~" * 64_000, "HEAD" + "^" * 64_000, "x" * 5000, "@{" * 3000,
])
def test_huge_revisions_are_refused_cheaply(quest: Sess, rev: str) -> None:
    for args in (("log", rev), ("show", rev), ("branch", rev, "new"), ("reset", "main", rev)):
        line = user_error(quest(*args))
        assert len(line) < 300  # the revision is clipped, not echoed whole
    assert [b["name"] for b in quest.json("branch")] == ["main"]


def test_runs_of_steps_still_count_exactly(quest: Sess) -> None:
    ids = [n["id"] for n in quest.json("log")]
    assert quest.json("show", "main~~")["id"] == ids[2]
    assert quest.json("show", "main~1~1")["id"] == ids[2]
    assert quest.json("show", "main^^")["id"] == ids[2]
    assert quest.json("show", "v1@{0}~2")["id"] == ids[2]
    quest.fail("show", "main" + "~" * 500, needles=("has only 3 events", "cannot go back 500"))


@pytest.mark.parametrize(("payload", "needle"), [
    ("[" * 2000 + "]" * 2000, "nested too deeply"),
    ('{"role": "user", "content": ' + "[" * 600 + "]" * 600 + "}", "nested more than 500"),
    ("9" * 5000, "cannot be read"),
    ('{"role": "user", "content": ' + "1" * 30 + "}", "not a JSON value"),
    ('{"role": "user", "content": NaN}', "nan, which JSON cannot hold"),
])
def test_hostile_json_for_append_is_one_line(quest: Sess, payload: str, needle: str) -> None:
    quest.fail("append", "user/message", payload, needles=(needle,))
    quest.fail("append", "user/message", input=payload, needles=(needle,))
    assert len(quest.json("log")) == 3


def test_errors_that_quote_line_breaks_stay_one_line(quest: Sess) -> None:
    # Found by the long campaign: the swapped-order hint echoed a name holding a line break.
    quest.ok("branch", "main", "x")
    for bad in ("\n\u2028y", "y\u2028", "a\rb"):
        line = quest.fail("branch", bad, "x")
        assert "\n" not in line and "\u2028" not in line and "\r" not in line


# -- names -------------------------------------------------------------------------------------


BAD_NAMES = [
    ("tags/v1", "namespace"), ("sessions/x", "namespace"), ("refs/heads/x", "namespace"),
    ("remotes/o/x", "namespace"),
    ("a\u202eb", "U+202E"), ("a\u2066b", "U+2066"), ("a\u2028b", "U+2028"), ("a\u200bb", "U+200B"),
    ("a\u00a0b", "U+00A0"), ("a\ufeffb", "U+FEFF"), ("cafe\u0301", "NFC"), ("a\udcffb", "UTF-8"),
    ("é" * 101, "200 bytes"), ("x" * 201, "200 bytes"),
    ("", "empty"), ("-x", "'-'"), ("a..b", ".."), ("a//b", "empty component"), ("a/", "'/'"),
    ("a@{1}", "@{"), ("HEAD", "reserved"), ("@", "reserved"), ("a b", "whitespace"),
    ("a~1", "whitespace"), ("a.lock", ".lock"), ("a/.b", "'.'"), ("a.", "ends with '.'"),
]
GOOD_NAMES = ["quest-1", "café", "日本語/セッション", "🚀launch", "a/b/c", "x" * 200, "é" * 100,
              "tagsy", "sessionsx/y", "v1.2_rc-3"]


@pytest.mark.parametrize(("name", "needle"), BAD_NAMES)
def test_ref_name_rules(name: str, needle: str) -> None:
    with pytest.raises(InvalidRefNameError) as info:
        check_ref_name(name)
    assert needle in str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_work_everywhere(sess: Sess, name: str) -> None:
    sess.ok("append", name, "user/message", msg("user", "hi"))
    assert [b["name"] for b in sess.json("branch")] == [name]
    sess.ok("tag", name, name)
    assert sess.json("show", name)["id"] == sess.json("show", f"sessions/{name}")["id"]
    assert sess.json("reflog", name)[0]["new"] == sess.json("show", name)["id"]


def test_a_session_cannot_be_shadowed_by_a_tag(quest: Sess) -> None:
    # Guards a past bug: a session named `tags/v1` was shadowed by the tag `v1`.
    quest.fail("branch", "main", "tags/v1", needles=("'tags/v1'", "namespace"))
    quest.fail("append", "tags/v1", "user/message", msg("user", "x"), needles=("namespace",))
    quest.fail("tag", "sessions/main", needles=("namespace",))


def test_the_sessions_prefix_names_the_session_it_prefixes(quest: Sess) -> None:
    # Guards a past bug: a session literally named `sessions/x` could not be reached by
    # `sess append sessions/x`; such a name can no longer be made, so the prefix is exact.
    quest.ok("append", "sessions/main", "user/message", msg("user", "more"))
    assert len(quest.json("log", "main")) == 4
    quest.ok("append", "sessions/west", "user/message", msg("user", "new"))
    assert [b["name"] for b in quest.json("branch")] == ["main", "west"]


def test_bad_names_are_refused_by_the_python_api(store: Store) -> None:
    store.session("ok").add_message({"role": "user", "content": "hi"})
    for name, _ in BAD_NAMES:
        for call in (lambda n: store.session(n), lambda n: store.fork(n, "ok"),
                     lambda n: store.tag(n, "ok"), lambda n: store.rename_session("ok", n)):
            with pytest.raises(InvalidRefNameError):
                call(name)
    assert [s.name for s in store.sessions()] == ["ok"] and store.tags() == []


# -- the campaign ------------------------------------------------------------------------------


_PIECES = ["main", "v1", "HEAD", "@", "~", "^", "@{", "}", "0", "1", "9" * 12, "..", "/", "-",
           "tags/", "sessions/", ":", "\u202e", "\u2028", "\udcff", "é", "e\u0301", " ", "\x00",
           "\n", "*", "[", "\\", "abcd", "ffff", "..."]
_COMMANDS = [("log", "{}"), ("show", "{}"), ("branch", "{}"), ("branch", "main", "{}"),
             ("branch", "{}", "x"), ("checkout", "{}"), ("reset", "main", "{}"), ("tag", "{}"),
             ("reflog", "{}"), ("diff", "main", "{}"), ("messages", "{}"),
             ("append", "{}", "user/message", '{"role": "user", "content": "x"}'),
             ("branch", "-m", "main", "{}"), ("branch", "-d", "{}"), ("tag", "-d", "{}"),
             ("export", "{}", "-o", "-")]


def _hostile(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 8)))


def _campaign(sess: Sess, runs: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(runs):
        template = rng.choice(_COMMANDS)
        arg = _hostile(rng)
        args = [a.replace("{}", arg) for a in template]
        result: Result = sess(*args)
        # Every outcome is click's clean exit: success, or a user error of one line.
        assert isinstance(result.exception, SystemExit) or result.exception is None, (
            args, repr(result.exception))
        if result.exit_code == 0:
            outcomes["ok"] += 1
        else:
            assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
            outcomes["refused"] += 1
        if template[0] in ("branch", "reset", "checkout", "tag") and result.exit_code == 0:
            # Keep the store small and main in place, so later runs still have it to hit.
            sess("checkout", "main")
    return outcomes


def test_hostile_argument_campaign_short(quest: Sess) -> None:
    outcomes = _campaign(quest, 300, seed=1)
    assert outcomes["refused"] > 0
    with open_store(quest.root / ".sess", create=False) as store:
        assert store.fsck() == []


@pytest.mark.stress
def test_hostile_argument_campaign_long(quest: Sess) -> None:
    outcomes = _campaign(quest, 30_000, seed=2)
    print(json.dumps(outcomes))
    with open_store(quest.root / ".sess", create=False) as store:
        assert store.fsck() == []


def test_a_bug_reaches_a_user_as_one_line_not_a_traceback(quest: Sess) -> None:
    broken = ("import sesstree.cli as c, sesstree.repo.store as r\n"
              "def boom(*a, **k): raise KeyError('surprise')\n"
              "r.Store.log = boom\n"
              "c.main()\n")
    env = {**os.environ, "SESS_STORE": str(quest.root / ".sess")}
    env.pop("SESS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", broken, "log"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 70
    assert proc.stderr.splitlines() == [
        "Error: internal error (KeyError: 'surprise'); please report it (SESS_DEBUG=1 shows the "
        "traceback)"]
    proc = subprocess.run([sys.executable, "-c", broken, "log"], env={**env, "SESS_DEBUG": "1"},
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" in proc.stderr and "surprise" in proc.stderr
