"""docs/cli.md names every command and every option of ``sess``."""

from __future__ import annotations

from pathlib import Path

import click

from sesstree.cli import cli

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_every_command_and_option_is_documented() -> None:
    ctx = click.Context(cli)
    missing = []
    for param in cli.params:
        missing += [o for o in param.opts if o.startswith("--") and f"`{o}" not in DOC
                    and f" {o}" not in DOC and o != "--colour"]
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        if f"`sess {name}" not in DOC:
            missing.append(f"sess {name}")
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for opt in [*param.opts, *param.secondary_opts]:
                    if opt in ("--help", "-h"):
                        continue
                    if opt not in DOC:
                        missing.append(f"sess {name} {opt}")
    assert missing == []
