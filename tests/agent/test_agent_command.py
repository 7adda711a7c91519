"""``sess run`` through click's CliRunner, on a tiny group standing in for the real CLI."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from fake_openai import FakeOpenAI, call, message, stream

from sesstree import ProviderError, Store, open_store
from sesstree.agent.command import run


class Locator:
    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> Store:
        return open_store(self.path)


def _invoke(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> click.testing.Result:
    @click.group()
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        ctx.obj = Locator(tmp_path / "store")

    cli.add_command(run)
    return CliRunner().invoke(cli, ["run", *args], env=env)


TOOLS = '''
from sesstree import tool

@tool
def shout(word: str) -> str:
    """Shout a word."""
    return word.upper() + "!"

def whisper(word: str) -> str:
    """Whisper a word."""
    return word.lower()

TOOLS = [shout, whisper]
'''


def test_run_new_session_then_continue(tmp_path: Path, server: FakeOpenAI,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_tools_mod.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    server.add(message(tool_calls=[call("shout", '{"word": "cave"}')]), message("It echoes."))
    result = _invoke(tmp_path, "quest-1", "Shout into the cave", "--base-url", server.url,
                     "--model", "m", "--tools", "cli_tools_mod:TOOLS", "--no-stream")
    assert result.exit_code == 0, result.output
    assert result.output == "It echoes.\n"
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["shout", "whisper"]
    assert server.requests[1]["messages"][-1]["content"] == "CAVE!"
    # Continue it, streamed, with the endpoint from the environment.
    server.add(stream("Still ", "echoing."))
    result = _invoke(tmp_path, "quest-1", "And now?",
                     env={"SESSTREE_BASE_URL": server.url, "SESSTREE_MODEL": "m"})
    assert result.exit_code == 0, result.output
    assert result.output == "Still echoing.\n"
    with open_store(tmp_path / "store") as store:
        assert len(store.session("quest-1").messages()) == 6


def test_run_defaults_to_head_session(tmp_path: Path, server: FakeOpenAI) -> None:
    with open_store(tmp_path / "store") as store:
        store.session("main").add_message({"role": "user", "content": "hi"})
        store.set_head_session("main")
    server.add(message("Hello again."))
    result = _invoke(tmp_path, "what did I say?", "--base-url", server.url, "--model", "m",
                     "--no-stream")
    assert result.exit_code == 0, result.output
    assert result.output == "Hello again.\n"
    assert len(server.requests[0]["messages"]) == 2


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["s", "p", "--model", "m"], "no endpoint"),
        (["s", "p", "--base-url", "http://x/v1"], "no model"),
        (["a", "b", "c", "--base-url", "http://x/v1", "--model", "m"], "[SESSION] PROMPT"),
        (["s", "p", "--base-url", "http://x/v1", "--model", "m", "--tools", "nope"],
         "module:attr"),
        (["s", "p", "--base-url", "http://x/v1", "--model", "m", "--tools", "no_such_mod:x"],
         "cannot import"),
    ],
)
def test_user_errors_are_one_line(tmp_path: Path, args: list[str], words: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESSTREE_BASE_URL", raising=False)
    monkeypatch.delenv("SESSTREE_MODEL", raising=False)
    result = _invoke(tmp_path, *args)
    assert result.exit_code == 2
    assert words in result.output
    assert "Traceback" not in result.output


def test_server_down_raises_provider_error(tmp_path: Path) -> None:
    result = _invoke(tmp_path, "s", "p", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    # The real CLI's main() turns any SesstreeError into one line and exit code 1.
    assert isinstance(result.exception, ProviderError)
