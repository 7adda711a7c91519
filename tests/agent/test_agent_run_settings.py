"""``sess run`` in-process against the loopback server: which session one argument names,
the settings remembered when a turn starts (and found by forks and after ``reset --empty``),
request fields (never a credential), and errors in the words of the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_kit import Sess
from click.testing import Result
from fake_openai import FakeOpenAI, Reply, call, chunk, error, message

from sesstree import Agent, OpenAIProvider
from sesstree.store.base import RUN_KEY

#: No endpoint or model from the environment of whoever runs the tests.
CLEAN = {"SESSTREE_BASE_URL": None, "SESSTREE_MODEL": None, "OPENAI_API_KEY": None}


class Run:
    """``sess`` in a fresh folder with a store, run in-process."""

    def __init__(self, root: Path) -> None:
        self.sess = Sess(root)
        self.sess.ok("init")

    def __call__(self, *args: str, input: str | None = None,
                 env: dict[str, str | None] | None = None) -> Result:
        return self.sess(*args, input=input, env={**CLEAN, **(env or {})})

    def contents(self, name: str) -> list[str]:
        with self.sess.store() as store:
            return [str(m["content"]) for m in store.messages(name)]


@pytest.fixture
def sess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.chdir(tmp_path)
    return Run(tmp_path)


def _flags(server: FakeOpenAI, model: str = "m1") -> list[str]:
    return ["--base-url", server.url, "--model", model, "--no-stream"]


# -- one argument ------------------------------------------------------------------------------


def test_one_argument_that_could_be_a_new_session_is_refused_with_both_ways(
        sess: Run, server: FakeOpenAI) -> None:
    server.add(message("Hello."))
    assert sess("run", "main", "first", *_flags(server)).exit_code == 0
    refused = sess("run", "tty3", *_flags(server))
    assert refused.exit_code == 2 and refused.stdout == ""
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "no session named tty3" in line
    assert "sess run tty3 --" in line and "sess run -- tty3" in line
    assert len(server.requests) == 1  # nothing was sent...
    assert sess.contents("main") == ["first", "Hello."]  # ...nor recorded
    with sess.sess.store() as store:
        assert not store.has_session("tty3")
    # Each way of saying it does what it says.
    server.add(message("Started."), message("Noted."), message("Sure."))
    new = sess("run", *_flags(server), "tty3", "--", input="hello there\n")
    assert new.exit_code == 0, new.output
    assert sess.contents("tty3") == ["hello there", "Started."]
    to_head = sess("run", *_flags(server), "--", "tty3")
    assert to_head.exit_code == 0, to_head.output
    assert sess.contents("main")[-2:] == ["tty3", "Noted."]
    # A prompt that cannot be a session name needs no saying.
    assert sess("run", "what now?", *_flags(server)).exit_code == 0
    assert sess.contents("main")[-2:] == ["what now?", "Sure."]


# -- settings remembered when the turn starts --------------------------------------------------


@pytest.mark.parametrize("failure", [
    Reply(events=[chunk({"role": "assistant", "content": "Hal"})], done=False),  # cut stream
    error(400),  # refused: not retried
])
def test_a_failed_first_turn_is_retried_with_its_settings(sess: Run, server: FakeOpenAI,
                                                          failure: Reply) -> None:
    server.add(failure)
    first = sess("run", "down", "hi", "--base-url", server.url, "--model", "m1",
                 "--max-tokens", "64")
    assert first.exit_code == 1 and "`sess run down` retries it" in first.stderr
    server.add(message("Hello."))
    again = sess("run", "down")  # no flag, nothing in the environment
    assert again.exit_code == 0, again.output
    assert again.stdout == "Hello.\n"
    assert server.requests[-1]["model"] == "m1" and server.requests[-1]["max_tokens"] == 64
    assert sess.contents("down")[-2:] == ["hi", "Hello."]


def test_every_fork_inherits_the_settings_and_an_unrelated_session_does_not(
        sess: Run, server: FakeOpenAI, tmp_path: Path) -> None:
    (tmp_path / "fork_tools_mod.py").write_text(
        "def shout(word: str) -> str:\n    \"\"\"Shout.\"\"\"\n    return word.upper()\n")
    server.add(message(tool_calls=[call("shout", '{"word": "a"}')]), message("A."),
               message("B."))
    flags = [*_flags(server), "--tools", "fork_tools_mod:shout", "--temperature", "0.25"]
    assert sess("run", "chat", "one", *flags).exit_code == 0
    assert sess("run", "chat", "two").exit_code == 0
    # A fork from the middle of chat, by each way of making one.
    sess.sess.ok("branch", "chat~3", "chat-b")
    sess.sess.ok("checkout", "-b", "chat-c", "chat~3")
    with sess.sess.store() as store:
        store.session("chat").fork("chat-d")
        # A session the library wrote, sharing no prompt with chat: it inherits nothing.
        provider = OpenAIProvider(server.url, "lib")
        server.add(message("Elsewhere."))
        Agent(provider, store.session("other")).run("something else")
        provider.close()
    for fork in ("chat-b", "chat-c", "chat-d"):
        server.add(message(f"{fork}!"))
        result = sess("run", fork, "again")
        assert result.exit_code == 0, (fork, result.output)
        sent = server.requests[-1]
        assert sent["model"] == "m1" and sent["temperature"] == 0.25, fork
        assert [t["function"]["name"] for t in sent["tools"]] == ["shout"], fork
    unrelated = sess("run", "other", "and?")
    assert unrelated.exit_code == 2 and "no endpoint" in unrelated.stderr


def test_reset_empty_keeps_the_settings(sess: Run, server: FakeOpenAI) -> None:
    server.add(message("One."), message("Fresh."))
    assert sess("run", "chat", "one", *_flags(server, "m7")).exit_code == 0
    sess.sess.ok("reset", "--empty", "chat")
    result = sess("run", "chat", "start over")
    assert result.exit_code == 0, result.output
    assert server.requests[-1]["model"] == "m7"
    assert sess.contents("chat") == ["start over", "Fresh."]


# -- request fields ----------------------------------------------------------------------------


def test_request_fields_are_sent_and_remembered(sess: Run, server: FakeOpenAI) -> None:
    server.add(message("One."), message("Two."), message("Three."))
    first = sess("run", "s", "hi", *_flags(server), "--max-tokens", "64", "--temperature",
                 "0.2", "--param", "top_p=0.9", "--param", 'stop=["END"]', "--param",
                 "mirostat_mode=off", "--extra-body", '{"seed": 7, "top_p": 0.5}')
    assert first.exit_code == 0, first.output
    fields = {"max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": ["END"],
              "mirostat_mode": "off", "seed": 7}
    assert {k: server.requests[0].get(k) for k in fields} == fields
    with sess.sess.store() as store:
        assert (store.get_session_meta("s") or {})[RUN_KEY]["params"] == fields
    # Remembered; a flag given again overrides, KEY= forgets.
    assert sess("run", "s", "again", "--max-tokens", "32", "--param", "top_p=").exit_code == 0
    assert server.requests[1]["max_tokens"] == 32 and "top_p" not in server.requests[1]
    assert server.requests[1]["seed"] == 7 and server.requests[1]["stop"] == ["END"]
    assert sess("run", "s", "and again").exit_code == 0
    assert server.requests[2]["max_tokens"] == 32 and "top_p" not in server.requests[2]


@pytest.mark.parametrize(("args", "named"), [
    (["--param", "api_key=sk-live-abcdefgh12345678"], "api_key"),
    (["--param", "X-Auth-Token=sk-live-abcdefgh12345678"], "X-Auth-Token"),
    (["--extra-body", '{"accessToken": "sk-live-abcdefgh12345678"}'], "accessToken"),
    # Under an innocent name, the key itself (from the variable that holds it).
    (["--extra-body", '{"user": {"id": "sk-live-abcdefgh12345678"}}'], "user.id"),
    (["--param", "extra=Bearer sk-live-abcdefgh12345678"], "extra"),
    # Nested under innocent names, with the key from elsewhere (not the variable's).
    (["--extra-body", '{"metadata": {"api_key": "sk-other-abcdefgh"}}'], "metadata.api_key"),
    (["--param", 'extra_headers={"Authorization": "x abcdefgh"}'],
     "extra_headers.Authorization"),
    (["--param", 'hints=[{"note": "Bearer abcdefgh"}]'], "hints[0].note"),
])
def test_a_credential_in_a_request_field_is_refused_and_never_stored(
        sess: Run, server: FakeOpenAI, tmp_path: Path, args: list[str], named: str) -> None:
    result = sess("run", "s", "hi", *_flags(server), *args,
                  env={"OPENAI_API_KEY": "sk-live-abcdefgh12345678"})
    assert result.exit_code == 2, result.output
    assert f"--param {named}:" in result.stderr and "credential" in result.stderr
    assert "abcdefgh" not in result.output
    assert server.requests == []
    for path in (tmp_path / ".sess").iterdir():
        assert b"abcdefgh" not in path.read_bytes(), path


@pytest.mark.parametrize("item", ["Authorization: Bearer sk-live-abcdefgh",
                                  "api_key sk-live-abcdefgh"])
def test_a_malformed_param_that_looks_like_a_credential_is_not_echoed(
        sess: Run, server: FakeOpenAI, item: str) -> None:
    result = sess("run", "s", "hi", *_flags(server), "--param", item)
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.stderr
    assert "abcdefgh" not in result.output and server.requests == []
    typo = sess("run", "s", "hi", *_flags(server), "--param", "top_p:0.9")
    assert typo.exit_code == 2 and "'top_p:0.9'" in typo.stderr  # a plain typo is shown


def test_a_refused_request_field_is_named_with_how_to_forget_it(
        sess: Run, server: FakeOpenAI) -> None:
    server.add(error(400, {"error": {"message": "temperature must be a number"}}),
               error(400, {"error": {"message": "temperature must be a number"}}),
               message("Fine."))
    first = sess("run", "s", "hi", *_flags(server), "--param", "temperature=abc")
    assert first.exit_code == 1 and "temperature must be a number" in first.stderr
    assert "sending the request fields temperature again" in first.stderr
    assert "sess run s --param KEY=" in first.stderr
    assert sess("run", "s").exit_code == 1  # remembered: refused again, as it said
    forgot = sess("run", "s", "--param", "temperature=")
    assert forgot.exit_code == 0, forgot.output
    assert "temperature" not in server.requests[-1]


def test_max_tokens_is_no_credential_and_fields_sess_sets_are_refused(
        sess: Run, server: FakeOpenAI) -> None:
    server.add(message("Short."))
    ok = sess("run", "s", "hi", *_flags(server), "--param", "max_completion_tokens=9")
    assert ok.exit_code == 0, ok.output
    assert server.requests[0]["max_completion_tokens"] == 9
    refused = sess("run", "s", "hi", "--param", "model=other")
    assert refused.exit_code == 2 and "--model" in refused.stderr
    bad = sess("run", "s", "hi", "--extra-body", "[1]")
    assert bad.exit_code == 2 and "--extra-body must be a JSON object" in bad.stderr


# -- the words of the command line -------------------------------------------------------------


def test_errors_name_options_not_python_parameters(sess: Run, server: FakeOpenAI,
                                                   tmp_path: Path) -> None:
    (tmp_path / "words_tools_mod.py").write_text(
        "async def slow(word: str) -> str:\n    \"\"\"Slow.\"\"\"\n    return word\n\n"
        "def shout(word: str) -> str:\n    \"\"\"Shout.\"\"\"\n    return word.upper()\n")
    # Stalled before the reply started (only its role came): not retried, so this is the error.
    stalled = Reply(events=[chunk({"role": "assistant", "content": ""})], stall_after=1)
    server.add(stalled)
    cut = sess("run", "s", "hi", "--base-url", server.url, "--model", "m", "--timeout", "0.3")
    server.release.set()
    assert cut.exit_code == 1
    assert "raise it with --timeout)" in cut.stderr and "timeout=" not in cut.stderr
    server.add(message(tool_calls=[call("shout", '{"word": "a"}')]))
    turns = sess("run", "s", "go", "--tools", "words_tools_mod:shout", "--max-turns", "1")
    assert turns.exit_code == 1 and "`sess run s` (no prompt) continues it" in turns.stderr
    assert "resume()" not in turns.stderr and "--max-turns" in turns.stderr
    not_sync = sess("run", "s", "go", "--tools", "words_tools_mod:slow")
    assert not_sync.exit_code == 2 and "slow is async" in not_sync.stderr
    assert "Agent.arun" not in not_sync.stderr
    for result in (cut, turns, not_sync):
        assert "Traceback" not in result.output
        assert "()" not in json.dumps(result.stderr)


def test_a_fork_finds_its_settings_without_reading_every_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup reads the fork's own history only, never each other session's: on a store
    of many sessions it stays one metadata read and one walk of node keys."""
    from sesstree import open_store
    from sesstree.agent.settings import remembered

    def turn(prompt: str) -> list[tuple[str, object]]:
        return [("turn/start", {"trigger": {"kind": "user"}}),
                ("user/message", {"role": "user", "content": prompt}),
                ("assistant/message", {"role": "assistant", "content": prompt.upper()}),
                ("turn/end", {})]

    with open_store(tmp_path / "store") as store:
        with store.batch():
            for i in range(40):
                store.session(f"s{i}").extend(turn(f"q{i}"))
                store.set_session_meta(f"s{i}", {RUN_KEY: {"model": f"m{i}"}})
            store.session("s7").extend(turn("deeper"))
            store.fork("near", "s7~4")  # shares s7's first turn and more with no one
            store.session("near").extend(turn("mine"))
        chains: list[object] = []
        real = store.backend.chain
        monkeypatch.setattr(store.backend, "chain",
                            lambda head, limit=None: chains.append(head) or real(head, limit))
        assert remembered(store, "near")["model"] == "m7"
        assert chains == [store.session_head("near")]
        # Of two sharing as much, the one moved last; more shared history beats that.
        store.fork("twin", "s7")
        store.set_session_meta("twin", {RUN_KEY: {"model": "twin"}})
        store.fork("late", "s7~4")
        assert remembered(store, "late")["model"] == "twin"
        store.session("s7").extend(turn("moved"))
        assert remembered(store, "late")["model"] == "m7"
        assert remembered(store, "s0")["model"] == "m0"
