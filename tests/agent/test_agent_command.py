"""``sess run`` through click's CliRunner, on a tiny group standing in for the real CLI."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from fake_openai import (
    FakeOpenAI,
    Reply,
    call,
    chunk,
    error,
    message,
    rejects_null_content,
    stream,
    strict_roles,
)

from sesstree import Store, open_store
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
    # stdout is the answer alone; the tool call and its result are shown on stderr as they run
    assert result.stdout == "It echoes.\n"
    assert result.stderr == '-> shout {"word": "cave"}\n<- CAVE!\n'
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
    # The stored history ends with a user message: the sending view merges it with the new
    # prompt rather than send two user messages in a row.
    (sent,) = server.requests[0]["messages"]
    assert sent["role"] == "user" and "hi" in sent["content"] and "what did I" in sent["content"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["s", "p", "--model", "m"], "no endpoint"),
        (["s", "p", "--base-url", "http://x/v1"], "no model"),
        (["a", "b", "c", "--base-url", "http://x/v1", "--model", "m"], "[SESSION] [PROMPT]"),
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


def test_server_down_is_one_line_that_says_how_to_retry(tmp_path: Path) -> None:
    result = _invoke(tmp_path, "s", "p", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "127.0.0.1:9" in result.stderr and "`sess run s` retries it" in result.stderr


# -- against misbehaving servers, through the real `sess` CLI (one-line errors, exit codes) --


def _sess(tmp_path: Path, server: FakeOpenAI, *args: str, stream: bool = True,
          env: dict[str, str] | None = None) -> click.testing.Result:
    from sesstree.cli import cli

    store = tmp_path / "store"
    if not store.exists():
        open_store(store).close()
    flags = ["--base-url", server.url, "--model", "m", "--stream" if stream else "--no-stream"]
    return CliRunner().invoke(cli, ["--store", str(store), "run", *args, *flags], env=env)


def test_cut_stream_ends_the_line_before_the_retry_and_the_error(tmp_path: Path,
                                                                 server: FakeOpenAI) -> None:
    # The cut is retried, and the retry refused: each line of stderr stands on its own.
    server.add(Reply(events=[chunk({"content": "The key is under"})], done=False), error(400))
    result = _sess(tmp_path, server, "s", "where is the key?")
    assert result.exit_code == 1
    assert result.stdout == "The key is under\n"  # the notes are not glued to the text
    retry, failed = result.stderr.splitlines()
    assert retry.startswith("sess: stream cut after 1 chunk; retrying (2/4) in ")
    assert failed.startswith("Error: ") and "answered 400" in failed
    assert "`sess run s` retries it" in failed and "Traceback" not in result.output


def test_stream_error_event_is_on_its_own_line(tmp_path: Path, server: FakeOpenAI) -> None:
    server.add(Reply(events=[chunk({"content": "Half"}),
                             {"error": {"message": "the model crashed\nat layer 3"}}]))
    result = _sess(tmp_path, server, "s", "hi")
    assert result.exit_code == 1 and result.stdout == "Half\n"
    assert result.stderr == (f"Error: the stream from {server.url}/chat/completions sent an "
                             "error mid-stream: the model crashed at layer 3 (the turn is "
                             "recorded: `sess run s` retries it)\n")


def test_run_without_prompt_retries_the_pending_turn(tmp_path: Path, server: FakeOpenAI) -> None:
    server.add(error(400, {"error": {"message": "model is loading"}}))
    assert _sess(tmp_path, server, "quest-1", "Find the key").exit_code == 1
    # A strict chat template refuses two user messages in a row.
    server.add(strict_roles(message("Under the mat.")))
    result = _sess(tmp_path, server, "quest-1", stream=False)
    assert result.exit_code == 0, result.output
    assert result.stdout == "Under the mat.\n"
    assert server.requests[-1]["messages"] == [{"role": "user", "content": "Find the key"}]
    # Nothing is pending now: without a prompt there is nothing to do.
    result = _sess(tmp_path, server, "quest-1")
    assert result.exit_code == 2 and "no pending turn" in result.stderr
    assert len(server.requests) == 2


def test_run_with_no_arguments_retries_the_head_session(tmp_path: Path,
                                                        server: FakeOpenAI) -> None:
    with open_store(tmp_path / "store") as store:
        store.session("main").add_message({"role": "user", "content": "hi"})
        store.set_head_session("main")
    server.add(message("Hello."))
    result = _sess(tmp_path, server, stream=False)
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello.\n"


def test_max_turns_then_run_without_prompt_continues(tmp_path: Path, server: FakeOpenAI,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_tools_mod2.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    server.add(message(tool_calls=[call("shout", '{"word": "a"}', id="c1")]))
    result = _sess(tmp_path, server, "s", "go", "--tools", "cli_tools_mod2:TOOLS",
                   "--max-turns", "1", stream=False)
    assert result.exit_code == 1 and "`sess run s` (no prompt) continues it" in result.stderr
    server.add(message("A!"))
    result = _sess(tmp_path, server, "s", "--tools", "cli_tools_mod2:TOOLS", stream=False)
    assert result.exit_code == 0 and result.stdout == "A!\n"


@pytest.mark.parametrize(("finish", "words"), [("length", "token limit"),
                                               ("content_filter", "content filter")])
@pytest.mark.parametrize("stream", [True, False])
def test_answer_cut_short_says_so_and_exits_3(tmp_path: Path, server: FakeOpenAI, finish: str,
                                              words: str, stream: bool) -> None:
    if stream:
        server.add(Reply(events=[chunk({"content": "The first half"}), chunk({}, finish)]))
    else:
        server.add(message("The first half", finish_reason=finish))
    result = _sess(tmp_path, server, "s", "hi", stream=stream)
    assert result.exit_code == 3
    assert result.stdout == "The first half\n"
    assert words in result.stderr and f"finish_reason {finish}" in result.stderr


def test_timeout_flags(tmp_path: Path, server: FakeOpenAI) -> None:
    server.add(*[Reply(hold=10, body=message("late").body) for _ in range(4)])
    result = _sess(tmp_path, server, "s", "hi", "--timeout", "0.2", "--connect-timeout", "5")
    assert result.exit_code == 1 and len(server.requests) == 1
    assert "sent no answer within 0.2 s (the read timeout" in result.stderr
    assert "raise it with --timeout)" in result.stderr and "timeout=" not in result.stderr


def test_null_content_flag(tmp_path: Path, server: FakeOpenAI,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_tools_mod3.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    results = []
    for flags in [], ["--null-content", "empty"]:
        server.add(message(tool_calls=[call("shout", '{"word": "a"}', id="c1")]),
                   rejects_null_content(message("A!")))
        results.append(_sess(tmp_path, server, f"s{len(flags)}", "go", "--tools",
                             "cli_tools_mod3:TOOLS", *flags, stream=False))
    refused, accepted = results
    assert refused.exit_code == 1 and "try --null-content empty" in refused.stderr
    assert "null_content=" not in refused.stderr  # CLI words for a CLI user
    assert len(server.requests) == 4  # two per run: the refused request was not sent again
    assert accepted.exit_code == 0 and accepted.stdout == "A!\n"
    assert server.requests[-1]["messages"][1]["content"] == ""


def test_retries_are_shown_on_stderr(tmp_path: Path, server: FakeOpenAI) -> None:
    server.add(error(429, retry_after="0"), stream("ok"))
    result = _sess(tmp_path, server, "s", "hi")
    assert result.exit_code == 0 and result.stdout == "ok\n"
    assert result.stderr.startswith("sess: retrying (2/4) in 0 ms: ")
    assert "answered 429" in result.stderr
