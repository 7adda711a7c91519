"""``sess run [SESSION] [PROMPT]``: run the agent loop on a session from the shell."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import urlsplit

import click
from click.core import ParameterSource

from ..cli.titles import RUN_KEY
from ..errors import IncompleteReplyError
from ..fmt import printable
from ..node import Node
from ..repo import Store
from .loop import Agent
from .provider import NullContent, OpenAIProvider
from .sending import has_pending_turn
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
        return as_tools(value)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(f"{spec}: {exc}", param_hint="--tools") from None


@click.command("run")
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
    quiet: bool,
) -> None:
    """Send PROMPT to the model on SESSION (default: the HEAD session) and print the answer.

    The session is continued if it exists, started if not; every event is recorded as it
    happens, so an interrupted run is picked up by the next one. Tool calls and their results
    are shown on stderr as they happen (-q: not at all). The endpoint, model, tools, API key
    variable and --null-content a session was run with are remembered in its metadata (never
    the key): `sess run quest-1 "and now?"` goes on where it left off, a flag given again
    overrides what was remembered.

    Without a PROMPT (``sess run SESSION``, or ``sess run`` for the HEAD session) the pending
    turn of a session whose last turn failed is retried; with nothing pending, the prompt is
    read from stdin, or, on a terminal, one prompt after another until end of input (Ctrl-D).
    A single argument naming an existing session is that session; anything else is a prompt
    for the HEAD session.

    Exit status: 0 for an answer; 1 for an error (the server failed, or the reply was
    incomplete); 2 for a usage error; 3 for an answer the server cut short (the token limit,
    a content filter), which is printed all the same.
    """
    if len(args) > 2:
        raise click.UsageError("expected [SESSION] [PROMPT] (quote the prompt)")
    if no_tools and tool_specs:
        raise click.UsageError("--tools and --no-tools contradict each other")
    locator: _Locator = ctx.obj
    store = locator.open()
    try:
        name, prompt = _target(store, args)
        remembered = _remembered(store, name)
        settings = _settings(ctx, remembered, base_url=base_url, model=model,
                             api_key_env=api_key_env, null_content=null_content)
        if not settings.get("base_url"):
            raise click.UsageError("no endpoint: give --base-url or set SESSTREE_BASE_URL")
        if not settings.get("model"):
            raise click.UsageError("no model: give --model or set SESSTREE_MODEL")
        specs = [] if no_tools else list(tool_specs) or list(remembered.get("tools", []))
        tools: list[Tool] = []
        for spec in specs:
            tools.extend(load_tools(spec))
        session = store.session(name)
        prompts: Iterator[str | None]
        if prompt is not None or has_pending_turn(session):
            prompts = iter([prompt])
        else:
            prompts = _prompts_from_stdin(name)
        provider = OpenAIProvider(
            settings["base_url"], settings["model"], api_key_env=settings["api_key_env"],
            stream=stream, timeout=timeout, connect_timeout=connect_timeout,
            null_content=settings["null_content"],
        )
        try:
            agent = Agent(provider, session, tools, system=system, max_turns=max_turns)
            screen = _Screen(quiet)
            agent.subscribe(screen.show)
            for next_prompt in prompts:
                _one_turn(agent, screen, name, next_prompt)
                _remember(store, name, settings, specs)
                if screen.cut_short is not None:
                    click.echo(f"sess: {_CUT_SHORT.get(screen.cut_short, screen.cut_short)}",
                               err=True)
                    ctx.exit(3)
        finally:
            provider.close()
    finally:
        store.close()


def _one_turn(agent: Agent, screen: _Screen, name: str, prompt: str | None) -> None:
    screen.printed = False
    try:
        answer = agent.run(prompt) if prompt is not None else agent.resume()
    except IncompleteReplyError as exc:
        screen.end_line()
        raise click.ClickException(
            f"{exc}; the part received is recorded, the turn as incomplete: "
            f"`sess run {name}` retries it"
        ) from None
    except BaseException:
        screen.end_line()  # the error is printed on its own line, not after the text
        raise
    if not screen.printed:
        click.echo(answer)


def _prompts_from_stdin(name: str) -> Iterator[str | None]:
    """The prompts of ``sess run SESSION`` with nothing pending: all of stdin as one, or on a
    terminal one line at a time until end of input."""
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
        try:
            line = click.prompt(click.style(">", bold=True), prompt_suffix=" ", default="",
                                show_default=False, err=True)
        except (EOFError, click.Abort):
            click.echo("", err=True)
            return
        if line.strip():
            yield line.strip()


def _remembered(store: Store, name: str) -> dict[str, Any]:
    meta = store.get_session_meta(name) if store.has_session(name) else None
    found = (meta or {}).get(RUN_KEY)
    return found if isinstance(found, dict) else {}


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


def _remember(store: Store, name: str, settings: dict[str, Any], specs: list[str]) -> None:
    """Keep how the session was run in its metadata. Never the key: only the name of the
    variable that holds it; and an endpoint URL with a password or a query (where keys
    hide) is not kept at all."""
    if not store.has_session(name):
        return
    meta = dict(store.get_session_meta(name) or {})
    run: dict[str, Any] = {"model": settings["model"], "api_key_env": settings["api_key_env"],
                           "null_content": settings["null_content"], "tools": specs}
    url = urlsplit(str(settings["base_url"]))
    if url.password is None and not url.query:
        run["base_url"] = settings["base_url"]
    if meta.get(RUN_KEY) == run:
        return
    meta[RUN_KEY] = run
    store.set_session_meta(name, meta)


#: What a cut-short answer is told as, by the finish_reason that cut it.
_CUT_SHORT = {
    "length": "the answer above is cut short: the reply reached the model's token limit "
              "(finish_reason length)",
    "content_filter": "the answer above is cut short: the server's content filter stopped it "
                      "(finish_reason content_filter)",
}


def _target(store: Store, args: tuple[str, ...]) -> tuple[str, str | None]:
    """``(session, prompt or None)`` from the arguments, as the help text says."""
    prompt: str | None
    if len(args) == 2:
        name, prompt = args
    elif len(args) == 1 and store.has_session(args[0]):
        return args[0], None
    else:
        current, _ = store.head()
        if current is None:
            raise click.UsageError("HEAD is not on a session: use sess run SESSION [PROMPT]")
        name, prompt = current, (args[0] if args else None)
    if prompt is not None and not prompt.strip():
        raise click.UsageError("the prompt is empty")
    return name, prompt


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
            click.echo(f"sess: retrying after attempt {data.get('attempt')}: "
                       f"{data.get('message')}", err=True)
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


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _stderr_colour() -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.color is not None:
        return ctx.color
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")
