"""``sess run`` for a person: tool calls shown as they run (-q quiet), the endpoint, model
and tools remembered per session (never the key), prompts from stdin."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fake_openai import FakeOpenAI, call, message

from sesstree import open_store
from sesstree.cli import cli
from sesstree.store.base import RUN_KEY

TOOLS = '''
from sesstree import tool

@tool
def shout(word: str) -> str:
    """Shout a word."""
    return word.upper() + "!"

TOOLS = [shout]
'''


def _sess(tmp_path: Path, *args: str, input: str | None = None,
          env: dict[str, str | None] | None = None) -> Result:
    store = tmp_path / "store"
    if not store.exists():
        open_store(store).close()
    return CliRunner().invoke(cli, ["--store", str(store), *args], input=input,
                              env={"SESSTREE_BASE_URL": None, "SESSTREE_MODEL": None,
                                   **(env or {})})


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "ux_tools_mod.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    return "ux_tools_mod:TOOLS"


def test_run_remembers_endpoint_model_and_tools(tmp_path: Path, server: FakeOpenAI,
                                                tools_module: str) -> None:
    server.add(message(tool_calls=[call("shout", '{"word": "cave"}')]), message("It echoes."))
    first = _sess(tmp_path, "run", "quest", "Shout", "--base-url", server.url, "--model", "m1",
                  "--tools", tools_module, "--no-stream", "--api-key-env", "QUEST_KEY",
                  env={"QUEST_KEY": "sk-secret-123"})
    assert first.exit_code == 0, first.output
    assert first.stdout == "It echoes.\n"
    assert first.stderr == '-> shout {"word": "cave"}\n<- CAVE!\n'
    with open_store(tmp_path / "store") as store:
        remembered = store.get_session_meta("quest")
    assert remembered == {RUN_KEY: {"base_url": server.url, "model": "m1", "tools": [tools_module],
                                    "api_key_env": "QUEST_KEY", "null_content": "null"}}
    assert "sk-secret-123" not in json.dumps(remembered)
    # No flags: the same endpoint, model and tools, and the key from the same variable.
    server.add(message(tool_calls=[call("shout", '{"word": "again"}', id="c2")]),
               message("Louder."))
    again = _sess(tmp_path, "run", "quest", "Again", "--no-stream", "-q",
                  env={"QUEST_KEY": "sk-secret-123"})
    assert again.exit_code == 0, again.output
    assert again.stdout == "Louder.\n" and again.stderr == ""  # -q: the answer only
    assert [t["function"]["name"] for t in server.requests[2]["tools"]] == ["shout"]
    assert server.requests[2]["model"] == "m1"
    assert server.request_headers[2]["Authorization"] == "Bearer sk-secret-123"
    # A flag given again wins, and is remembered; --no-tools drops the tools.
    server.add(message("Fine."))
    third = _sess(tmp_path, "run", "quest", "Quietly", "--model", "m2", "--no-tools",
                  "--no-stream")
    assert third.exit_code == 0, third.output
    assert server.requests[4]["model"] == "m2" and "tools" not in server.requests[4]
    with open_store(tmp_path / "store") as store:
        meta = store.get_session_meta("quest") or {}
    assert meta[RUN_KEY]["model"] == "m2" and meta[RUN_KEY]["tools"] == []
    # branch -v says where it runs
    assert json.loads(_sess(tmp_path, "branch", "-v", "--json").stdout)[0]["source"] == (
        f"run: m2 at {server.url}")


def test_an_endpoint_with_a_password_is_not_remembered(tmp_path: Path,
                                                       server: FakeOpenAI) -> None:
    server.add(message("Hi."))
    url = server.url.replace("http://", "http://user:hunter2@")
    result = _sess(tmp_path, "run", "s", "hello", "--base-url", url, "--model", "m",
                   "--no-stream")
    assert result.exit_code == 0, result.output
    with open_store(tmp_path / "store") as store:
        meta = store.get_session_meta("s") or {}
    assert "base_url" not in meta[RUN_KEY] and "hunter2" not in json.dumps(meta)
    # so the next run asks for the endpoint again
    again = _sess(tmp_path, "run", "s", "hello?", "--no-stream")
    assert again.exit_code == 2 and "no endpoint" in again.stderr


def test_run_session_reads_the_prompt_from_stdin(tmp_path: Path, server: FakeOpenAI) -> None:
    server.add(message("One."), message("Two."))
    flags = ["--base-url", server.url, "--model", "m", "--no-stream"]
    assert _sess(tmp_path, "run", "s", "first", *flags).exit_code == 0
    result = _sess(tmp_path, "run", "s", input="second\nprompt\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Two.\n"
    assert server.requests[1]["messages"][-1] == {"role": "user", "content": "second\nprompt"}
    empty = _sess(tmp_path, "run", "s", input="")
    assert empty.exit_code == 2 and "no pending turn" in empty.stderr


def test_run_on_a_terminal_takes_one_prompt_after_another(tmp_path: Path,
                                                          server: FakeOpenAI) -> None:
    """``sess run SESSION`` on a terminal with nothing pending: a conversation until Ctrl-D."""

    server.add(message("One."), message("Two."), message("Three."))
    open_store(tmp_path / "store").close()
    flags = ["--base-url", server.url, "--model", "m", "--no-stream"]
    first = _sess(tmp_path, "run", "talk", "first", *flags)
    assert first.exit_code == 0, first.output
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSTREE_", "SESS_"))}
    proc = subprocess.Popen([sys.executable, "-c", "from sesstree.cli import main; main()",
                             "--store", str(tmp_path / "store"), "run", "talk"],
                            stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""

    def read_until(needle: bytes, count: int = 1) -> None:
        nonlocal out
        deadline = time.monotonic() + 30
        while out.count(needle) < count:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, out  # nothing came in time
            chunk = os.read(master, 4096)
            assert chunk, out
            out += chunk

    read_until(b">")  # the prompt
    os.write(master, b"second\n")
    read_until(b"Two.")
    read_until(b">", 2)
    os.write(master, b"third\n")
    read_until(b"Three.")
    read_until(b">", 3)
    os.write(master, b"\x04")  # Ctrl-D
    assert proc.wait(timeout=60) == 0, out
    os.close(master)
    assert [m["messages"][-1]["content"] for m in server.requests] == ["first", "second", "third"]
    with open_store(tmp_path / "store") as store:
        assert [m["content"] for m in store.messages("talk")] == [
            "first", "One.", "second", "Two.", "third", "Three."]
