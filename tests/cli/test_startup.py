"""``sess`` starts as fast as Python can: ``sess --help`` loads no command and no store module,
``sess log`` only what reading a store needs. Checked by what a fresh process imports, never
by timing (bench/bench_scale.py measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from sesstree import open_store
from sesstree.cli import cli
from sesstree.cli.core import _Group
from sesstree.cli.locate import _STORE_FILE

PROBE = """
import json, sys
sys.argv = ["sess", *json.loads(sys.argv[1])]
from sesstree.cli import main
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print("\\n" + json.dumps(sorted(sys.modules)))
"""
SERVERS = ("httpx", "starlette", "uvicorn", "psycopg", "jinja2", "markdown_it", "asyncio")


def modules_after(*args: str) -> set[str]:
    """The modules a fresh ``sess ARGS`` process has imported when it ends."""
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names or m in names)


def test_help_loads_no_command_and_no_store_module() -> None:
    modules = modules_after("--help")
    assert "click" in modules
    assert loaded(modules, SERVERS) == []
    assert loaded(modules, ("sqlite3", "msgspec", "blake3")) == []
    assert sorted(m for m in modules if m.startswith("sesstree.")) == [
        "sesstree.cli", "sesstree.cli.core", "sesstree.cli.locate", "sesstree.cli.term",
        "sesstree.errors", "sesstree.store", "sesstree.store.urls"]


def test_log_loads_what_reading_a_store_needs_only(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        store.session("main").add_message({"role": "user", "content": "hello"})
    modules = modules_after("--store", str(tmp_path / "s"), "log", "-n", "20")
    assert "sesstree.cli.reading" in modules and "sqlite3" in modules
    assert loaded(modules, SERVERS) == []
    for lazy in ("sesstree.cli.graph", "sesstree.agent", "sesstree.sync", "sesstree.interop",
                 "sesstree.store.memory", "sesstree.store.sqlite.gc", "sesstree.cli.remote",
                 "subprocess", "tempfile", "secrets"):
        assert lazy not in modules, lazy


@pytest.mark.parametrize("width", [40, 80, 200])
def test_the_help_list_says_what_each_command_says(width: int) -> None:
    ctx = click.Context(cli)
    assert set(_Group.summaries) <= set(_Group.lazy)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        if name in _Group.summaries:
            stand_in = click.Command(name, help=_Group.summaries[name])
            assert stand_in.get_short_help_str(width) == command.get_short_help_str(width), name
            assert not command.hidden and command.short_help is None
    assert "completion" not in _Group.lazy  # defined beside the group: always loaded


def test_the_store_file_name_is_the_stores() -> None:
    from sesstree.repo.store import STORE_FILE

    assert _STORE_FILE == STORE_FILE


@pytest.mark.parametrize(("args", "line"), [
    (["lgo"], "Error: No such command 'lgo'. Did you mean 'log'? (see 'sess --help')"),
    (["clnoe"], "Error: No such command 'clnoe'. Did you mean 'clone'? (see 'sess --help')"),
    (["--bogus"], "Error: No such option '--bogus'. (see 'sess --help')"),
    (["log", "--bogus"], "Error: No such option '--bogus'. (see 'sess log --help')"),
])
def test_a_mistyped_command_or_option_is_one_line_with_a_suggestion(
    args: list[str], line: str
) -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, args, prog_name="sess")
    assert result.exit_code == 2
    assert result.output.splitlines() == [line]
