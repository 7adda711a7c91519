"""Running ``sess`` in-process for the CLI tests (tests/cli/)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from sesstree import Store, open_store
from sesstree.cli import cli


def msg(role: str, content: str, **extra: Any) -> str:
    """A chat message as the JSON text a user would type."""
    return json.dumps({"role": role, "content": content, **extra})


def user_error(result: Result, *needles: str) -> str:
    """Assert the issue-2 rule for a user error and return its one line.

    Non-zero exit, a clean SystemExit (no other exception escaped click), nothing on stdout,
    exactly one line on stderr that names the problem, and no traceback.
    """
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.stdout == "", result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


class Sess:
    """``sess`` run in-process in folder ``root`` (the test has chdir'd there)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None,
                 env: dict[str, str | None] | None = None) -> Result:
        return self.runner.invoke(cli, list(args), input=input, env=env, prog_name="sess")

    def ok(self, *args: str, input: str | None = None,
           env: dict[str, str | None] | None = None) -> str:
        """Run a command that must succeed; its stdout."""
        result = self(*args, input=input, env=env)
        assert result.exception is None, (args, repr(result.exception), result.output)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    def lines(self, *args: str, input: str | None = None) -> list[str]:
        return self.ok(*args, input=input).splitlines()

    def json(self, *args: str) -> Any:
        """Run a command with ``--json`` and decode its output."""
        return json.loads(self.ok(*args, "--json"))

    def fail(self, *args: str, needles: tuple[str, ...] = (), input: str | None = None) -> str:
        """Run a command that must be a user error; its one error line."""
        return user_error(self(*args, input=input), *needles)

    def head(self, rev: str = "HEAD") -> str:
        """The full id ``rev`` names."""
        return str(self.json("show", rev)["id"])

    def store(self) -> Store:
        """The store, through the Python API (use it as a context manager)."""
        return open_store(self.root / ".sess", create=False)

    def quest(self) -> list[str]:
        """main: three messages; returns their ids, oldest first."""
        self.ok("append", "user/message", msg("user", "I need to get into the Cave of Echoes."))
        self.ok("append", "assistant/message", msg("assistant", "Go west past the old mill."))
        self.ok("append", "user/message", msg("user", "I go west."))
        return [n["id"] for n in reversed(self.json("log"))]


def drain(master: int) -> bytes:
    """All a pseudo-terminal's other side wrote until it closed; closes ``master``."""
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out
