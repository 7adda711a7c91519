"""``sess run [SESSION] PROMPT``: run the agent loop on a session from the shell."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Protocol

import click

from ..node import Node
from ..repo import Store
from .loop import Agent
from .provider import OpenAIProvider
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
@click.argument("args", nargs=-1, required=True, metavar="[SESSION] PROMPT")
@click.option("--base-url", envvar="SESSTREE_BASE_URL", help="OpenAI-compatible endpoint, "
              "e.g. http://localhost:11434/v1 [env SESSTREE_BASE_URL]")
@click.option("--model", envvar="SESSTREE_MODEL", help="Model name [env SESSTREE_MODEL]")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the API key (never stored).")
@click.option("--tools", "tool_specs", multiple=True, metavar="MODULE:ATTR",
              help="Tools to offer: a tool, a function or a list of them. Repeatable.")
@click.option("--max-turns", default=10, show_default=True, type=click.IntRange(min=1),
              help="Model calls allowed before giving up.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Stream the reply (printed, and recorded as chunks, as it arrives).")
@click.option("--system", default=None, help="System prompt, recorded if the session is new.")
@click.pass_obj
def run(
    locator: _Locator,
    args: tuple[str, ...],
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    tool_specs: tuple[str, ...],
    max_turns: int,
    stream: bool,
    system: str | None,
) -> None:
    """Send PROMPT to the model on SESSION (default: the HEAD session) and print the answer.

    The session is continued if it exists, started if not; every event is recorded as it
    happens, so an interrupted run is picked up by the next one.
    """
    if len(args) > 2:
        raise click.UsageError("expected [SESSION] PROMPT (quote the prompt)")
    if not base_url:
        raise click.UsageError("no endpoint: give --base-url or set SESSTREE_BASE_URL")
    if not model:
        raise click.UsageError("no model: give --model or set SESSTREE_MODEL")
    tools: list[Tool] = []
    for spec in tool_specs:
        tools.extend(load_tools(spec))
    store = locator.open()
    try:
        if len(args) == 2:
            name, prompt = args
        else:
            (prompt,) = args
            current, _ = store.head()
            if current is None:
                raise click.UsageError("HEAD is not on a session: use sess run SESSION PROMPT")
            name = current
        if not prompt.strip():
            raise click.UsageError("the prompt is empty")
        session = store.session(name)
        provider = OpenAIProvider(base_url, model, api_key_env=api_key_env, stream=stream)
        agent = Agent(provider, session, tools, system=system, max_turns=max_turns)
        printed = False
        if stream:
            def show(node: Node) -> None:
                nonlocal printed
                if node.type == "assistant/chunk" and node.data.get("content"):
                    click.echo(node.data["content"], nl=False)
                    printed = True
                elif node.type == "assistant/message" and printed:
                    click.echo()  # end the streamed text of this step on its own line

            agent.subscribe(show)
        try:
            answer = agent.run(prompt)
        finally:
            provider.close()
        if not printed:
            click.echo(answer)
    finally:
        store.close()
