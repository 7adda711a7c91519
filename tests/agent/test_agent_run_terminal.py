"""``sess run`` on a real pseudo-terminal, as a person uses it: a conversation goes on after an
answer cut short, Ctrl-C during a turn exits 130 with the turn recorded as cancelled, and one
unknown name is asked about."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_openai import FakeOpenAI, Reply, chunk, message

from sesstree import open_store
from sesstree.cli import cli


def _take_terminal() -> None:
    # In the child: a session of its own with the pty as its controlling terminal, so that
    # Ctrl-C typed on it is a SIGINT to sess, as in a shell.
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``sess --store STORE ARGS...`` with stdin, stdout and stderr on a pseudo-terminal."""

    def __init__(self, store: Path, *args: str) -> None:
        master, slave = os.openpty()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSTREE_", "SESS_"))}
        env.pop("OPENAI_API_KEY", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from sesstree.cli import main; main()", "--store",
             str(store), *args],
            stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=_take_terminal)
        os.close(slave)
        self.master = master
        self.out = b""

    def read_until(self, needle: bytes, count: int = 1) -> None:
        deadline = time.monotonic() + 30
        while self.out.count(needle) < count:
            ready, _, _ = select.select([self.master], [], [],
                                        max(0.0, deadline - time.monotonic()))
            assert ready, self.out  # nothing came in time
            try:
                data = os.read(self.master, 4096)
            except OSError:  # EIO: sess exited
                data = b""
            assert data, self.out
            self.out += data

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def exit_code(self) -> int:
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            # Killed, so that a failure here leaves no process behind to disturb later tests.
            self.proc.kill()
            self.proc.wait()
            os.close(self.master)
            raise
        try:  # what it printed last
            while select.select([self.master], [], [], 0)[0]:
                data = os.read(self.master, 4096)
                if not data:
                    break
                self.out += data
        except OSError:
            pass
        os.close(self.master)
        return code


@pytest.fixture
def store(tmp_path: Path, server: FakeOpenAI) -> Path:
    """A store whose session ``talk`` has one finished turn run against ``server``."""
    path = tmp_path / "store"
    open_store(path).close()
    server.add(message("One."))
    result = CliRunner().invoke(cli, ["--store", str(path), "run", "talk", "first", "--base-url",
                                      server.url, "--model", "m", "--no-stream"],
                                env={"SESSTREE_BASE_URL": None, "SESSTREE_MODEL": None})
    assert result.exit_code == 0, result.output
    return path


def test_a_conversation_goes_on_after_an_answer_cut_short(store: Path,
                                                         server: FakeOpenAI) -> None:
    server.add(message("Cut", finish_reason="length"), message("Two."))
    term = Terminal(store, "run", "talk")
    term.read_until(b">")
    term.type(b"second\n")
    term.read_until(b"token limit")  # said once, on stderr...
    term.read_until(b">", 2)  # ...and the next prompt comes
    term.type(b"third\n")
    term.read_until(b"Two.")
    term.read_until(b">", 3)
    term.type(b"\x04")  # Ctrl-D
    assert term.exit_code() == 0, term.out
    assert term.out.count(b"cut short") == 1
    with open_store(store) as s:
        assert [m["content"] for m in s.messages("talk")] == [
            "first", "One.", "second", "Cut", "third", "Two."]


def test_ctrl_c_during_a_turn_exits_130_with_the_turn_cancelled(store: Path,
                                                                server: FakeOpenAI) -> None:
    # A stream that sends part of its answer, then nothing until released.
    server.add(Reply(events=[chunk({"role": "assistant", "content": "Half"}),
                             chunk({"content": " more"})], stall_after=1))
    term = Terminal(store, "run", "talk", "go on")
    term.read_until(b"Half")
    term.type(b"\x03")  # Ctrl-C, through the terminal
    code = term.exit_code()
    server.release.set()
    assert code == 130, term.out
    assert b"Aborted!" not in term.out and b"Traceback" not in term.out
    assert b"cancelled" in term.out
    with open_store(store) as s:
        turn_end = next(n for n in s.log("talk") if n.type == "turn/end")
        assert turn_end.data["reason"] == {"kind": "cancelled", "by": "KeyboardInterrupt"}
        chunks = [n.data["content"] for n in s.log("talk") if n.type == "assistant/chunk"]
        assert chunks == ["Half"]


def test_one_unknown_name_is_asked_about_on_a_terminal(store: Path, server: FakeOpenAI) -> None:
    server.add(message("Hi, new."))
    with open_store(store) as s:
        s.set_head_session("talk")
    term = Terminal(store, "run", "--base-url", server.url, "--model", "m", "--no-stream",
                    "tty3")
    term.read_until(b"[s/p/q]")
    assert b"no session named tty3" in term.out
    term.type(b"s\n")  # start session tty3, and talk in it
    term.read_until(b"talking in tty3")
    term.read_until(b">")
    term.type(b"hello\n")
    term.read_until(b"Hi, new.")
    term.type(b"\x04")
    assert term.exit_code() == 0, term.out
    with open_store(store) as s:
        assert [m["content"] for m in s.messages("tty3")] == ["hello", "Hi, new."]
        assert [m["content"] for m in s.messages("talk")] == ["first", "One."]


def test_ctrl_c_at_the_question_or_the_prompt_exits_130(store: Path, server: FakeOpenAI) -> None:
    for args, asked in ((["tty3"], b"[s/p/q]"), (["talk"], b">")):
        term = Terminal(store, "run", "--base-url", server.url, "--model", "m", *args)
        term.read_until(asked)
        term.type(b"\x03")
        assert term.exit_code() == 130, term.out
        assert b"Aborted!" not in term.out and b"interrupted" in term.out
    assert server.requests[1:] == []  # nothing was sent: only the fixture's turn
    with open_store(store) as s:
        assert not s.has_session("tty3")
        assert [m["content"] for m in s.messages("talk")] == ["first", "One."]
