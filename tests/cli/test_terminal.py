"""The terminal side of ``sess``, on a real pseudo-terminal: a pager only on a terminal,
colour only on a terminal (``--color``, ``NO_COLOR``), lines fitted to the terminal's width."""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from cli_kit import drain

from sesstree import open_store

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PAGER = """
import json, os, sys
data = sys.stdin.read()
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"run": os.environ.get("RUN"), "less": os.environ.get("LESS"),
                        "text": data}) + "\\n")
"""
LONG = "The innkeeper says the cave opens only at dawn, and only to the silver key. " * 3


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    with open_store(tmp_path / "s") as store:
        quest = store.session("main")
        quest.add_message({"role": "user", "content": "Where is the cave?"})
        quest.add_message({"role": "assistant", "content": LONG})
        store.tag("start", "main~1")
    (tmp_path / "pager.py").write_text(PAGER)
    return tmp_path / "s"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "PAGER", "SESS_PAGER", "LESS", "COLUMNS", "SESS_STORE")}
    env["TERM"] = "xterm"
    env["SESS_PAGER"] = f"{sys.executable} {tmp_path / 'pager.py'} {tmp_path / 'paged.json'}"
    env.update(extra)
    return env


#: Runs several ``sess`` command lines in one process (starting Python is the slow part),
#: each with its own environment changes, and marks where each one's output ends.
DRIVER = """
import json, os, sys
from sesstree.cli import cli
for args, env in json.loads(sys.argv[1]):
    saved = dict(os.environ)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        cli.main(args, prog_name="sess")
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, f"\\n=== exit {code}\\n".encode())
    os.environ.clear()
    os.environ.update(saved)
"""


def _on_terminal(runs: list[tuple[list[str], dict[str, str | None]]], env: dict[str, str],
                 columns: int = 120) -> list[str]:
    """Run each ``(ARGS, ENV)`` with stdin, stdout and stderr on a pseudo-terminal COLUMNS
    wide; what each showed (each must succeed unless its args end with a bad revision)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(runs)], stdin=slave,
                            stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = drain(master)
    assert proc.wait(timeout=60) == 0, out
    parts = re.split(r"\n=== exit (\S+)\n", out.decode().replace("\r\n", "\n"))
    shown, codes = parts[0:-1:2], parts[1::2]
    assert len(shown) == len(runs), out
    for (args, _), code in zip(runs, codes, strict=True):
        assert code == ("1" if "nosuch" in args else "0"), (args, out)
    return shown


def _piped(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pager_on_a_terminal_only(store_dir: Path, tmp_path: Path) -> None:
    store = ["--store", str(store_dir)]
    pager = _env(tmp_path)["SESS_PAGER"]
    runs: list[tuple[list[str], dict[str, str | None]]] = [
        ([*store, "log"], {}),
        ([*store, "log"], {"LESS": "-R"}),  # the user's own LESS is kept
        ([*store, "show", "main"], {"SESS_PAGER": None, "PAGER": pager}),  # else PAGER
        # no pager at all:
        ([*store, "--no-pager", "log"], {}),
        ([*store, "log"], {"SESS_PAGER": "cat"}),
        ([*store, "log"], {"SESS_PAGER": ""}),
        ([*store, "log", "nosuch"], {}),  # an error before any output
    ]
    runs = [(args, {**env, "RUN": str(i)}) for i, (args, env) in enumerate(runs)]
    shown = _on_terminal(runs, _env(tmp_path))
    paged = {r["run"]: r for r in map(json.loads, (tmp_path / "paged.json").read_text()
                                                   .splitlines())}
    assert sorted(paged) == ["0", "1", "2"]
    assert paged["0"]["less"] == "FRX"  # as git runs less: quit if one screen, colours, no clear
    assert "Where is the cave?" in paged["0"]["text"]
    assert "\x1b[" in paged["0"]["text"]  # the terminal is still the reader: coloured
    assert "Where is the cave?" not in shown[0]  # everything went through the pager
    assert paged["1"]["less"] == "-R"
    assert "Where is the cave?" in paged["2"]["text"]
    for out in shown[3:6]:
        assert "Where is the cave?" in out
    assert "unknown revision 'nosuch'" in shown[6]
    # piped: never a pager
    (tmp_path / "paged.json").unlink()
    out = _piped([*store, "log"], _env(tmp_path))
    assert "Where is the cave?" in out and not (tmp_path / "paged.json").exists()


def test_colour_on_a_terminal_only(store_dir: Path, tmp_path: Path) -> None:
    args = ["--no-pager", "--store", str(store_dir), "log", "--oneline"]
    plain, no_color, never = _on_terminal(
        [(args, {}), (args, {"NO_COLOR": "1"}), (["--color=never", *args], {})], _env(tmp_path))
    assert "\x1b[" in plain and "HEAD -> main" in ANSI.sub("", plain)
    assert "\x1b[" not in no_color and "\x1b[" not in never
    assert "\x1b[" not in _piped(args, _env(tmp_path))
    assert "\x1b[" in _piped(["--color=always", *args], _env(tmp_path, NO_COLOR="1"))


@pytest.mark.parametrize("columns", [60, 140])
def test_lines_fit_the_terminal(store_dir: Path, tmp_path: Path, columns: int) -> None:
    commands = [["log"], ["log", "--oneline"], ["messages", "--oneline"], ["branch", "-v"],
                ["diff", "start", "main"]]
    shown = _on_terminal([(["--no-pager", "--store", str(store_dir), *c], {}) for c in commands],
                         _env(tmp_path), columns=columns)
    for command, out in zip(commands, shown, strict=True):
        lines = [ANSI.sub("", line) for line in out.splitlines() if line]
        assert lines, command
        assert max(len(line) for line in lines) <= columns, (command, lines)
        if columns > 100 and command != ["branch", "-v"]:
            # the long reply fills the width: it is not cut at a fixed 72
            assert max(len(line) for line in lines) >= columns - 2, (command, lines)
    # piped output uses COLUMNS when set
    out = _piped(["--store", str(store_dir), "log"], _env(tmp_path, COLUMNS="70"))
    assert max(len(line) for line in out.splitlines()) <= 70


HOSTILE = "ok \x1b[2J\x1b]0;pwned\x07 end \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ \r\u202egnp.exe"


def test_stored_escape_sequences_never_reach_the_terminal(tmp_path: Path) -> None:
    # Stored content is anyone's: a message, a tool call or a reflog reason holding escape
    # sequences is shown escaped, in colour on a terminal and piped alike.
    with open_store(tmp_path / "s") as store:
        s = store.session("main")
        s.add_message({"role": "user", "content": "line one\n" + HOSTILE})
        s.add_message({"role": "assistant", "content": None, "tool_calls": [{
            "id": "c\x1b[1m", "type": "function",
            "function": {"name": "run\x1b]0;t\x07", "arguments": json.dumps({"x": HOSTILE})}}]})
        store.reset("main", "main", "evil \x1b]0;pwned\x07")  # a no-op move: not logged
        store.tag("t", "main")
        store.reset("main", "main~1", "evil \x1b]0;pwned\x07 \x1b[2J")
    store_args = ["--no-pager", "--store", str(tmp_path / "s")]
    commands = [["log", "main@{1}"], ["log", "--all-events", "main@{1}"], ["show", "t"],
                ["messages", "t"], ["messages", "--oneline", "t"], ["reflog", "main"],
                ["diff", "main", "t"]]
    shown = _on_terminal([([*store_args, *c], {}) for c in commands], _env(tmp_path))
    shown += [_piped([*store_args, *c], _env(tmp_path)) for c in commands]
    for out in shown:
        plain = ANSI.sub("", out)  # sess's own colours, which are fine
        assert "\x1b" not in plain and "\x07" not in plain and "\r" not in plain, plain
        assert "\u202e" not in plain
    assert "pwned" in ANSI.sub("", shown[5])  # the reason is there, escaped
    assert "\\x1b]0;pwned" in ANSI.sub("", shown[3])  # the message, escaped


def test_usage_errors_are_one_plain_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sesstree.cli import cli

    result = CliRunner().invoke(cli, ["completion"])
    assert result.output.strip().splitlines() == [
        "Error: Missing argument '{bash|fish|zsh}'. Choose from: bash, fish, zsh "
        "(see 'sess completion --help')"]
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "log", "-n", "-1"])
    assert "-1 is not in the range" in result.output and "not a valid integer" not in result.output


def test_import_of_many_files_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    folder = tmp_path / "transcripts"
    folder.mkdir()
    for i in range(12):
        (folder / f"chat{i:02d}.jsonl").write_text(
            json.dumps({"role": "user", "content": f"question {i}"}) + "\n"
            + json.dumps({"role": "assistant", "content": f"answer {i}"}) + "\n")
    (folder / "notes.json").write_text("{}")  # skipped: counted as a file all the same
    with open_store(tmp_path / "s"):
        pass
    store = ["--store", str(tmp_path / "s")]
    # (one file: its result line says it all, no progress line)
    one, many = _on_terminal([([*store, "import", str(folder / "chat00.jsonl")], {}),
                              ([*store, "import", "-r", str(folder)], {})], _env(tmp_path))
    assert "importing files" not in one and "chat00: created" in one
    assert "\rimporting files: 0% (0/13)\x1b[K" in many
    assert "\rimporting files: 100% (13/13)\x1b[K\n" in many  # the line is ended
    assert many.index("(13/13)") < many.index("chat05: created")  # then the results
    piped = subprocess.run(
        [sys.executable, "-c", "from sesstree.cli import main; main()", *store, "import", "-r",
         str(folder)], env=_env(tmp_path), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL)
    assert piped.returncode == 0, piped.stderr
    assert "chat05: up to date" in piped.stdout
    assert "importing files" not in piped.stderr and "\r" not in piped.stderr + piped.stdout
