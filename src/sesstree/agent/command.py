"""``sess run [SESSION] [PROMPT]``: run the agent loop on a session from the shell."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any, Protocol

import click
from click.core import ParameterSource

from ..errors import (
    AgentError,
    IncompleteReplyError,
    InvalidRefNameError,
    MaxTurnsExceeded,
    ProviderError,
)
from ..fmt import printable
from ..node import Node, check_ref_name
from ..repo.store import Store
from .loop import Agent
from .pending import has_pending_turn
from .provider import NullContent, OpenAIProvider
from .settings import RESERVED_FIELDS, parse_params, remember, remembered, secret_field
from .tools import Tool, as_tools

__all__ = ["load_tools", "run"]


class _Locator(Protocol):
    def open(self) -> Store: ...


def load_tools(spec: str) -> list[Tool]:
    """Import ``module:attr`` (attr: a tool, a function, or a list of them) as tools.

    The current folder is importable, so ``--tools mytools:TOOLS`` finds ``./mytools.py``.

    Raises:
        click.BadParameter: the spec is malformed, the import fails, or attr is no tool.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r}: expected module:attr", param_hint="--tools")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a broken tools module is the user's error, shown in one line
        raise click.BadParameter(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}", param_hint="--tools"
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise click.BadParameter(f"{module_name!r} has no {attr!r}", param_hint="--tools")
        value = getattr(value, part)
    try:
        tools = as_tools(value)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(f"{spec}: {exc}", param_hint="--tools") from None
    for t in tools:
        if t.is_async:  # the loop would only answer the model that it cannot be called
            raise click.BadParameter(f"{spec}: {t.name} is async (async def), and sess run "
                                     "calls tools synchronously: offer a plain function",
                                     param_hint="--tools")
    return tools


#: ``ctx.meta`` key: how many arguments followed ``--`` (absent: there was no ``--``).
_AFTER_DASHES = "sesstree.run.after_dashes"

#: What ``sess run`` tells the provider to say to raise a setting.
_CLI_ADVICE = {"timeout": "--timeout", "null_content": "--null-content empty"}


class _RunCommand(click.Command):
    """``sess run``, which needs to know where ``--`` was: ``sess run NAME --`` names a
    session, ``sess run -- PROMPT`` gives a prompt (click drops the ``--`` itself)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            ctx.meta[_AFTER_DASHES] = len(args) - args.index("--") - 1
        return super().parse_args(ctx, args)


@click.command("run", cls=_RunCommand)
@click.argument("args", nargs=-1, metavar="[SESSION] [PROMPT]")
@click.option("--base-url", envvar="SESSTREE_BASE_URL", help="OpenAI-compatible endpoint, "
              "e.g. http://localhost:11434/v1 [env SESSTREE_BASE_URL; remembered per session]")
@click.option("--model", envvar="SESSTREE_MODEL",
              help="Model name [env SESSTREE_MODEL; remembered per session]")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the API key (its name is remembered, the key "
                   "never).")
@click.option("--tools", "tool_specs", multiple=True, metavar="MODULE:ATTR",
              help="Tools to offer: a tool, a function or a list of them. Repeatable; "
                   "remembered per session, so a later run need not repeat them.")
@click.option("--no-tools", is_flag=True, help="Offer no tools (and forget the remembered ones).")
@click.option("--max-turns", default=10, show_default=True, type=click.IntRange(min=1),
              help="Model calls allowed before giving up.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Stream the reply (printed, and recorded as chunks, as it arrives).")
@click.option("--system", default=None, help="System prompt, recorded if the session is new.")
@click.option("--timeout", default=600.0, show_default=True, metavar="SECONDS",
              type=click.FloatRange(min=0, min_open=True),
              help="Read timeout: how long to wait for the reply to start and, when streaming, "
                   "between two chunks (never for the whole reply).")
@click.option("--connect-timeout", default=10.0, show_default=True, metavar="SECONDS",
              type=click.FloatRange(min=0, min_open=True),
              help="How long to wait for the connection to the endpoint.")
@click.option("--null-content", type=click.Choice(["null", "empty", "omit"]), default="null",
              show_default=True,
              help="How to send an assistant message that has tool calls and no text: "
                   "content null (OpenAI), \"\" (llama-cpp-python's server needs this), "
                   "or no content key. Remembered per session.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, metavar="N",
              help="Longest reply, in tokens (the request's max_tokens). Remembered per "
                   "session.")
@click.option("--temperature", type=click.FloatRange(min=0), default=None, metavar="T",
              help="Sampling temperature (the request's temperature). Remembered per session.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Another request field, VALUE as JSON or else text (top_p=0.9, "
                   "stop='[\"END\"]'); KEY= forgets a remembered one. Repeatable; remembered "
                   "per session. Never a credential.")
@click.option("--extra-body", default=None, metavar="JSON",
              help="Request fields as one JSON object, merged before --param. Remembered per "
                   "session.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print only the answer: not the tool calls and results as they happen.")
@click.pass_context
def run(
    ctx: click.Context,
    args: tuple[str, ...],
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    tool_specs: tuple[str, ...],
    no_tools: bool,
    max_turns: int,
    stream: bool,
    system: str | None,
    timeout: float,
    connect_timeout: float,
    null_content: NullContent,
    max_tokens: int | None,
    temperature: float | None,
    params: tuple[str, ...],
    extra_body: str | None,
    quiet: bool,
) -> None:
    """Send PROMPT to the model on SESSION (default: the HEAD session) and print the answer.

    The session is continued if it exists, started if not; every event is recorded as it
    happens, so an interrupted run is picked up by the next one. Tool calls and their results
    are shown on stderr as they happen (-q: not at all). The endpoint, model, tools, API key
    variable, --null-content and request fields (--max-tokens, --temperature, --param,
    --extra-body) are remembered in the session's metadata when a turn starts (never the
    key): `sess run quest-1 "and now?"` goes on where it left off, a flag given again
    overrides what was remembered, and a fork takes them from the session it came from.

    Without a PROMPT (``sess run SESSION``, or ``sess run`` for the HEAD session) the pending
    turn of a session whose last turn failed is retried; with nothing pending, the prompt is
    read from stdin, or, on a terminal, one prompt after another until end of input (Ctrl-D).
    A single argument naming an existing session is that session, and one that cannot be a
    session name (it has a space) a prompt; for any other, say which: `sess run NAME --`
    starts session NAME, `sess run -- PROMPT` sends PROMPT to the HEAD session (on a
    terminal, sess asks).

    Exit status: 0 for an answer; 1 for an error (the server failed, or the reply was
    incomplete); 2 for a usage error; 3 for an answer the server cut short (the token limit,
    a content filter), which is printed all the same; 130 when interrupted (Ctrl-C), the
    turn recorded as cancelled.
    """
    if no_tools and tool_specs:
        raise click.UsageError("--tools and --no-tools contradict each other")
    try:
        given = parse_params(extra_body, params)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if max_tokens is not None:
        given["max_tokens"] = max_tokens
    if temperature is not None:
        given["temperature"] = temperature
    locator: _Locator = ctx.obj
    store = locator.open()
    try:
        name, prompt = _target(store, args, ctx.meta.get(_AFTER_DASHES))
        found = remembered(store, name)
        settings = _settings(ctx, found, base_url=base_url, model=model,
                             api_key_env=api_key_env, null_content=null_content)
        settings["params"] = _request_fields(found.get("params"), given,
                                             os.environ.get(settings["api_key_env"]))
        if not settings.get("base_url"):
            raise click.UsageError("no endpoint: give --base-url or set SESSTREE_BASE_URL")
        if not settings.get("model"):
            raise click.UsageError("no model: give --model or set SESSTREE_MODEL")
        specs = [] if no_tools else list(tool_specs) or list(found.get("tools", []))
        settings["tools"] = specs
        tools: list[Tool] = []
        for spec in specs:
            tools.extend(load_tools(spec))
        session = store.session(name)
        prompts: Iterator[str | None]
        talking = False
        if prompt is not None or has_pending_turn(session):
            prompts = iter([prompt])
        else:
            talking = sys.stdin.isatty()
            prompts = _prompts_from_stdin(name)
        provider = OpenAIProvider(
            settings["base_url"], settings["model"], api_key_env=settings["api_key_env"],
            stream=stream, timeout=timeout, connect_timeout=connect_timeout,
            null_content=settings["null_content"], extra_body=settings["params"],
        )
        provider.advice.update(_CLI_ADVICE)
        screen = _Screen(quiet)
        try:
            agent = Agent(provider, session, tools, system=system, max_turns=max_turns)
            agent.subscribe(screen.show)

            def on_event(node: Node) -> None:
                # Remembered as the turn starts: a turn that fails is retried as it was run.
                if node.type == "turn/start":
                    remember(store, name, settings)

            agent.subscribe(on_event)
            for next_prompt in prompts:
                _one_turn(agent, screen, name, next_prompt)
                if screen.cut_short is not None:
                    click.echo(f"sess: {_CUT_SHORT.get(screen.cut_short, screen.cut_short)}",
                               err=True)
                    if not talking:  # a conversation goes on: the user has read why
                        ctx.exit(3)
        except KeyboardInterrupt:
            screen.end_line()
            click.echo("sess: interrupted; the turn is recorded as cancelled "
                       f"(`sess run {name}` asks again)" if has_pending_turn(session)
                       else "sess: interrupted", err=True)
            ctx.exit(130)
        finally:
            provider.close()
    except KeyboardInterrupt:  # before any turn: at the question of _one_argument, say
        click.echo("\nsess: interrupted", err=True)
        ctx.exit(130)
    finally:
        store.close()


def _request_fields(old: Any, given: dict[str, Any | None], key: str | None) -> dict[str, Any]:
    """The request fields to send and remember: the remembered ones, then those given
    (a None forgets one). Refused: a field sess sets itself, or one holding a credential."""
    fields: dict[str, Any] = dict(old) if isinstance(old, dict) else {}
    for field in given:
        if field in RESERVED_FIELDS:
            raise click.UsageError(f"--param {field}: sess run sets {field} itself "
                                   f"({RESERVED_FIELDS[field]})")
    secret = secret_field({k: v for k, v in given.items() if v is not None}, key)
    if secret is not None:  # the name only: the value may be the key itself
        raise click.UsageError(
            f"--param {secret}: a request field may not hold a credential (it would be "
            "remembered in the store); the key goes in the environment, named by "
            "--api-key-env, and is sent as the Authorization header")
    for field, value in given.items():
        if value is None:
            fields.pop(field, None)
        else:
            fields[field] = value
    return fields


def _one_turn(agent: Agent, screen: _Screen, name: str, prompt: str | None) -> None:
    screen.printed = False
    try:
        answer = agent.run(prompt) if prompt is not None else agent.resume()
    except IncompleteReplyError as exc:
        screen.end_line()
        raise click.ClickException(
            f"{exc}; what arrived is recorded, the turn as incomplete: "
            f"`sess run {name}` retries it"
        ) from None
    except MaxTurnsExceeded:
        screen.end_line()
        raise click.ClickException(
            f"no answer after {agent.max_turns} model calls in session {name} (--max-turns); "
            f"`sess run {name}` (no prompt) continues it"
        ) from None
    except AgentError as exc:
        screen.end_line()
        pending = f" (the turn is recorded: `sess run {name}` retries it)"
        fields = sorted(getattr(agent.provider, "extra_body", None) or {})
        if isinstance(exc, ProviderError) and exc.status == 400 and fields:
            # A refused request field is remembered, so a plain retry is refused again.
            pending = (f" (the turn is recorded: `sess run {name}` retries it, sending the "
                       f"request fields {', '.join(fields)} again; `sess run {name} --param "
                       "KEY=` forgets one)")
        raise click.ClickException(
            f"{exc}{pending if has_pending_turn(agent.session) else ''}") from None
    except BaseException:
        screen.end_line()  # the error is printed on its own line, not after the text
        raise
    if not screen.printed:
        click.echo(answer)


def _prompts_from_stdin(name: str) -> Iterator[str | None]:
    """The prompts of ``sess run SESSION`` with nothing pending: all of stdin as one, or on a
    terminal one line at a time until end of input (Ctrl-D; Ctrl-C interrupts)."""
    if not sys.stdin.isatty():
        text = sys.stdin.read()
        if not text.strip():
            raise click.UsageError(
                f"session {name} has no pending turn to retry (its last turn ended with an "
                f"answer, or it is empty): give a prompt, as in sess run {name} PROMPT, or "
                "on stdin"
            )
        yield text.strip()
        return
    click.echo(f"sess: talking in {name}; end with Ctrl-D", err=True)
    while True:
        line = _read_line(click.style(">", bold=True) + " ")
        if line is None:
            click.echo("", err=True)
            return
        if line.strip():
            yield line.strip()


def _read_line(prompt: str) -> str | None:
    """One line typed at the terminal after ``prompt`` (on stderr), None at end of input.
    Not click.prompt: it turns Ctrl-C into end of input, and Ctrl-C is to interrupt."""
    click.echo(prompt, nl=False, err=True)
    try:
        return input()
    except EOFError:
        return None


def _settings(ctx: click.Context, remembered: dict[str, Any], **given: Any) -> dict[str, Any]:
    """Each setting from the command line, else what the session remembers, else the
    environment or the default."""
    out = {}
    for key, value in given.items():
        source = ctx.get_parameter_source(key)
        if source is not ParameterSource.COMMANDLINE and isinstance(remembered.get(key), str):
            value = remembered[key]
        out[key] = value
    return out


#: What a cut-short answer is told as, by the finish_reason that cut it.
_CUT_SHORT = {
    "length": "the answer above is cut short: the reply reached the model's token limit "
              "(finish_reason length)",
    "content_filter": "the answer above is cut short: the server's content filter stopped it "
                      "(finish_reason content_filter)",
}


def _target(store: Store, args: tuple[str, ...], after_dashes: int | None
            ) -> tuple[str, str | None]:
    """``(session, prompt or None)`` from the arguments, as the help text says;
    ``after_dashes`` is how many of them came after ``--`` (None: no ``--``)."""
    if len(args) > 2:
        raise click.UsageError("expected [SESSION] [PROMPT] (quote the prompt)")
    name: str | None
    prompt: str | None
    if after_dashes is not None:  # SESSION before the --, PROMPT after it
        before = len(args) - after_dashes
        if before > 1 or after_dashes > 1:
            raise click.UsageError("expected [SESSION] -- [PROMPT] (quote the prompt)")
        name = args[0] if before else None
        prompt = args[-1] if after_dashes else None
    elif len(args) == 2:
        name, prompt = args
    elif len(args) == 1:
        name, prompt = _one_argument(store, args[0])
    else:
        name, prompt = None, None
    if name is None:
        name = store.head()[0]
        if name is None:
            raise click.UsageError("HEAD is not on a session: use sess run SESSION [PROMPT]")
    if prompt is not None and not prompt.strip():
        raise click.UsageError("the prompt is empty")
    return name, prompt


def _one_argument(store: Store, arg: str) -> tuple[str | None, str | None]:
    """``sess run X``: session X if it exists, a prompt if X cannot name a session, and
    otherwise the user's choice (asked on a terminal, refused elsewhere)."""
    if store.has_session(arg):
        return arg, None
    try:
        check_ref_name(arg)
    except InvalidRefNameError:
        return None, arg
    head = store.head()[0] or "HEAD"
    shown = printable(arg)
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise click.UsageError(
            f"no session named {shown}: to start session {shown}, run sess run {shown} --; "
            f"to send it as a prompt to {head}, run sess run -- {shown}")
    while True:
        answer = _read_line(f"sess: no session named {shown}. Start session {shown} (s), "
                            f"send it to {head} as a prompt (p), or neither (q)? [s/p/q] ")
        choice = (answer or "q").strip().lower()[:1]
        if choice == "s":
            return arg, None
        if choice == "p":
            return None, arg
        if choice == "q":
            raise click.exceptions.Exit(1)


class _Screen:
    """Shows a run as it is recorded: streamed text on stdout; tool calls, their results and
    retries on stderr (so that stdout is the answer alone)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.printed = False  # some streamed text was shown: the answer is not echoed again
        self.line_open = False  # the streamed text has no newline yet
        self.cut_short: str | None = None

    def show(self, node: Node) -> None:
        data = node.data if isinstance(node.data, dict) else {}
        if node.type == "assistant/chunk" and isinstance(data.get("content"), str):
            click.echo(data["content"], nl=False)
            self.printed = self.line_open = True
        elif node.type == "assistant/message":
            self.end_line()  # end the streamed text of this step on its own line
        elif node.type == "tool/call" and not self.quiet:
            self.end_line()
            self._note(f"-> {data.get('name', '?')} {_one_line(str(data.get('arguments', '')))}")
        elif node.type == "tool/result" and not self.quiet:
            content = data.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            self._note(f"<- {_one_line(text)}")
        elif node.type == "error" and data.get("kind") == "retry":
            self.end_line()
            if data.get("cut_after") is not None:
                self.printed = False  # the text shown is not the answer: the retry's will be
            click.echo(f"sess: {_retry_line(data)}", err=True)
        elif node.type == "turn/end":
            reason = data.get("reason")
            kind = reason.get("kind") if isinstance(reason, dict) else None
            self.cut_short = kind if kind in _CUT_SHORT else None

    def _note(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 24)).columns
        line = printable(text, max(40, width - 2))
        click.echo(click.style(line, dim=True) if _stderr_colour() else line, err=True)

    def end_line(self) -> None:
        if self.line_open:
            click.echo()
            self.line_open = False


def _retry_line(data: dict[str, Any]) -> str:
    """What ``sess run`` says of a retry event: ``stream cut after 2 chunks; retrying (2/4)
    in 1.2 s: MESSAGE``, or for a provider that says less, ``retrying after attempt 1: ...``."""
    attempt, most, delay = data.get("attempt"), data.get("max_attempts"), data.get("delay")
    message = data.get("message")
    cut = data.get("cut_after")
    if not (isinstance(attempt, int) and isinstance(most, int) and isinstance(delay, (int, float))):
        return f"retrying after attempt {attempt}: {message}"
    wait = f"{delay:.1f} s" if delay >= 0.1 else f"{delay * 1000:.0f} ms"
    what = f"stream cut after {cut} chunk{'' if cut == 1 else 's'}; " if isinstance(cut, int) else ""
    return f"{what}retrying ({attempt + 1}/{most}) in {wait}: {message}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _stderr_colour() -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.color is not None:
        return ctx.color
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")
