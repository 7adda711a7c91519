"""``sess watch`` as a user runs it: a real process over the agents' folders (found from
HOME), fed by writers that mimic each agent, killed and restarted, a second watcher beside
it; what it recorded is what ``sess import`` of the final files records, node for node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest
from agent_writers import AGENTS, session_lines, session_path
from cli_kit import Sess
from watch_kit import imported, recorded

import sesstree
from sesstree import open_store
from sesstree.cli.watch import default_folders
from sesstree.interop import claude

#: Long enough for a loaded machine; the tests wait for a state, they never time one.
_PATIENCE = 60.0


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home),
           "PYTHONPATH": str(Path(sesstree.__file__).resolve().parents[1])}
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "PI_CODING_AGENT_DIR", "GEMINI_CLI_HOME"):
        env.pop(name, None)
    return env


_RUNNING: list[subprocess.Popen[str]] = []


def _watch(home: Path, store: Path, *args: str) -> subprocess.Popen[str]:
    code = "from sesstree.cli import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", code, "--store", str(store), "watch", *args],
                            env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _RUNNING.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_watch_left_running() -> Iterator[None]:
    """A test that fails half-way leaves no watcher behind (nor its pipes open)."""
    yield
    while _RUNNING:
        proc = _RUNNING.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=_PATIENCE)


def _recorded_up_to(store: Path, files: dict[Path, str]) -> None:
    """Wait until the store's marks say each file was read to the end of its last line."""
    deadline = time.monotonic() + _PATIENCE
    want = {str(p): blake3.blake3(text.encode()[: text.encode().rfind(b"\n") + 1]).hexdigest()
            for p, text in files.items()}
    while True:
        with open_store(store) as s:
            marks = s.watch_marks()
        if all(src in marks and marks[src].digest == d for src, d in want.items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not recorded in {_PATIENCE} s: {want} vs {marks}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=_PATIENCE)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    return out, err


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for folder in (home / ".claude" / "projects", home / ".codex" / "sessions",
                   home / ".pi" / "agent" / "sessions", home / ".gemini" / "tmp"):
        folder.mkdir(parents=True)
    return home


def test_watch_records_what_import_of_the_final_files_records(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claude, "LIVE_WINDOW", 600.0)  # as the watcher's, for the import below
    store = tmp_path / "s"
    open_store(store).close()
    lines = {agent: session_lines(agent, "w", 4) for agent in AGENTS}
    paths = {agent: session_path(home, agent, "w") for agent in AGENTS}
    texts = {paths[a]: "" for a in AGENTS}
    for p in paths.values():
        p.parent.mkdir(parents=True, exist_ok=True)

    def write(upto: int, half: bool = False) -> None:
        for agent in AGENTS:
            path = paths[agent]
            done = texts[path]
            text = "".join(line + "\n" for line in lines[agent][:upto])
            if half and upto < len(lines[agent]):
                nxt = lines[agent][upto]
                text += nxt[: len(nxt) // 2]  # a write torn in the middle of a line
            with path.open("a") as f:
                f.write(text[len(done):] if text.startswith(done) else text)
            texts[path] = text if text.startswith(done) else done + text

    write(3)
    first = _watch(home, store)
    _recorded_up_to(store, texts)
    write(6, half=True)
    _recorded_up_to(store, texts)
    first.kill()  # no chance to tidy up
    first.communicate(timeout=_PATIENCE)
    write(9)
    again = _watch(home, store)  # a restart goes on from the marks in the store
    second = _watch(home, store)  # and a second watcher on the same store does no harm
    _recorded_up_to(store, texts)
    for n in range(10, max(len(v) for v in lines.values()) + 1):
        write(n, half=n % 2 == 0)
    _recorded_up_to(store, texts)
    _, err = _stop(again)
    _stop(second)
    with open_store(store) as s:
        watched = recorded(s)
        names = sorted(watched[0])
    assert watched == imported(home, tmp_path / "i")
    assert len(names) == len(AGENTS) and not any(n.endswith("-2") for n in names)
    assert "stopped" in err


def test_once_catches_up_and_a_second_run_records_nothing(home: Path, tmp_path: Path) -> None:
    for agent in AGENTS:
        path = session_path(home, agent, "o")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in session_lines(agent, "o", 2)))
    store = tmp_path / "s"
    open_store(store).close()
    first = subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()",
                            "--store", str(store), "watch", "--once"], env=_env(home),
                           capture_output=True, text=True, timeout=_PATIENCE)
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == len(AGENTS)
    assert all(": created, " in line for line in first.stdout.splitlines())
    again = subprocess.run(first.args, env=_env(home), capture_output=True, text=True,
                           timeout=_PATIENCE)
    assert again.returncode == 0 and again.stdout == ""


def test_nothing_to_watch_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "PI_CODING_AGENT_DIR", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    sess = Sess(tmp_path)
    sess.ok("init")
    result = sess("watch", "--once")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "nothing to watch" in result.stderr
    result = sess("watch", "--once", str(tmp_path / "missing"))
    assert result.exit_code == 1 and "no such file or folder" in result.stderr


def test_default_folders_follow_each_tools_home(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    for name in ("CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert default_folders() == [tmp_path / ".claude" / "projects", tmp_path / "cx" / "sessions",
                                 tmp_path / ".pi" / "agent" / "sessions",
                                 tmp_path / ".gemini" / "tmp"]


def test_watch_of_a_truncation_and_a_rewrite_is_what_imports_at_each_step_record(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file cut back (a rewind) and one rewritten whole (a new inode, and in place): the
    # running watch records each as importing it then would (the cut lines kept, as a branch
    # or in the reflog), and every session of the final files' import is there as it is.
    from sesstree.interop import import_files

    monkeypatch.setattr(claude, "LIVE_WINDOW", 600.0)
    store = tmp_path / "s"
    open_store(store).close()
    lines = {agent: session_lines(agent, "r", 3) for agent in AGENTS}
    paths = {agent: session_path(home, agent, "r") for agent in AGENTS}
    for p in paths.values():
        p.parent.mkdir(parents=True, exist_ok=True)
    proc = _watch(home, store)
    with open_store(tmp_path / "step") as step:

        def state(pick: dict[str, list[str]], how: str) -> None:
            # Each change is one system call, so that the watch sees the states named here
            # and none between them (a real tool's rewrite may show it more).
            texts = {}
            for agent in AGENTS:
                path = paths[agent]
                text = "".join(line + "\n" for line in pick[agent])
                data = text.encode()
                if how == "rename":
                    temp = path.with_name("new.tmp")
                    temp.write_bytes(data)
                    os.replace(temp, path)
                elif how == "truncate":
                    os.truncate(path, len(data))
                else:  # append, or write over as long as before
                    old = path.read_bytes() if path.exists() else b""
                    start = len(old) if data.startswith(old) else 0
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
                    try:
                        os.pwrite(fd, data[start:], start)
                    finally:
                        os.close(fd)
                texts[path] = text
            _recorded_up_to(store, texts)
            import_files(step, [home], recursive=True)

        state(lines, "write")
        state({a: v[:5] for a, v in lines.items()}, "truncate")  # cut back
        state({a: v[:5] + v[9:] for a, v in lines.items()}, "write")  # and grown differently
        state({a: v[:7] for a, v in lines.items()}, "rename")  # rewritten, a new file
        state({a: [line.replace("prompt 1", "prompt 9") for line in v[:7]]
               for a, v in lines.items()}, "write")  # edited in place, as long as before
        stepwise = recorded(step)
    _stop(proc)
    with open_store(store) as s:
        watched = recorded(s)
    assert watched == stepwise
    final_heads, final_nodes = imported(home, tmp_path / "i")
    assert set(final_heads.values()) <= set(watched[0].values())
    assert final_nodes <= watched[1]


def test_ctrl_c_stops_it_cleanly(home: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    open_store(store).close()
    proc = _watch(home, store)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # once it has caught up and waits
    assert line.startswith("watching "), line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=_PATIENCE)
    assert proc.returncode == 0 and err == "stopped\n" and out == ""


def test_a_file_it_cannot_read_is_one_line_and_the_others_are_recorded(
    home: Path, tmp_path: Path
) -> None:
    good = session_path(home, "codex", "k")
    good.parent.mkdir(parents=True, exist_ok=True)
    good.write_text("".join(line + "\n" for line in session_lines("codex", "k", 1)))
    os.mkfifo(good.with_name("pipe.jsonl"))  # reading it would wait for ever
    store = tmp_path / "s"
    open_store(store).close()
    run = subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()",
                          "--store", str(store), "watch", "--once"], env=_env(home),
                         capture_output=True, text=True, timeout=_PATIENCE)
    assert run.returncode == 1
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "pipe.jsonl: not a regular file" in warnings[0]
    assert "Traceback" not in run.stderr
    assert run.stdout.count(": created, ") == 1


def test_poll_records_what_is_appended(home: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    open_store(store).close()
    proc = _watch(home, store, "--poll")
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("watching ")
    path = session_path(home, "pi", "p")
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = session_lines("pi", "p", 2)
    path.write_text("".join(line + "\n" for line in lines[:4]))
    _recorded_up_to(store, {path: path.read_text()})
    with path.open("a") as f:
        f.write("".join(line + "\n" for line in lines[4:]))
    _recorded_up_to(store, {path: path.read_text()})
    _stop(proc)
    with open_store(store) as s:
        assert recorded(s) == imported(home, tmp_path / "i")


def test_an_agent_folder_made_after_the_watch_started_is_watched(tmp_path: Path) -> None:
    # Codex installed (its ~/.codex/sessions made) while a watch of the agents' folders runs:
    # the watch takes the folder in without a restart.
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    store = tmp_path / "s"
    open_store(store).close()
    proc = _watch(home, store)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("watching ")
    path = session_path(home, "codex", "late")
    path.parent.mkdir(parents=True)
    lines = session_lines("codex", "late", 3)
    path.write_text("".join(line + "\n" for line in lines[:5]))
    _recorded_up_to(store, {path: path.read_text()})
    with path.open("a") as f:  # and followed from then on
        f.write("".join(line + "\n" for line in lines[5:]))
    _recorded_up_to(store, {path: path.read_text()})
    _, err = _stop(proc)
    assert f"watching {home / '.codex' / 'sessions'} too" in err
    with open_store(store) as s:
        assert recorded(s) == imported(home, tmp_path / "i")
