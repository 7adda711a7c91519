"""``sess show`` and ``sess messages``: one node in full, or a conversation as a person reads
it (every line break kept, tool calls and results indented under the message that made them).
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from ..fmt import printable, short, summary, to_jsonable
from ..node import Node, NodeId, short_name
from ..repo.store import Store
from .conversation import render_messages
from .core import StoreLocator, cli, complete_rev, emit_json, events, page, pass_store, usage
from .reading import _ref_labels, decorate
from .term import terminal
from .titles import session_title

__all__ = ["messages", "show"]

_SUFFIX = re.compile(r"[~^]|@\{")


def _bare_session(store: Store, rev: str) -> str | None:
    """The session ``rev`` names by itself (``quest-1``, ``sessions/quest-1``), else None: a
    revision with steps, an id, a tag or HEAD shows a node."""
    if _SUFFIX.search(rev) or rev in ("HEAD", "@"):
        return None
    name = short_name(rev)
    return name if store.has_session(name) else None


@cli.command()
@click.argument("revs", nargs=-1, metavar="[REV]...", shell_complete=complete_rev)
@click.option("--node", "as_node", is_flag=True,
              help="Show a session's head node, not its conversation.")
@click.option("--json", "as_json", is_flag=True, help="Machine output (the node).")
@pass_store
def show(locator: StoreLocator, revs: tuple[str, ...], as_node: bool, as_json: bool) -> None:
    """Show each REV: a session by name as its conversation, any other revision (an id, a
    tag, HEAD, name~2) as one node in full. With no REV, HEAD's session (its head node when
    HEAD is detached)."""
    store = locator.open()
    if not revs:
        name, _node = store.head()
        # The session HEAD is on, as `sess show NAME` shows it; detached, the node.
        revs = (name,) if name is not None and store.has_session(name) else ("HEAD",)
    if as_json:
        shown = [{**to_jsonable(node), "depth": store.depth(node.id)}
                 for node in (store.show(rev) for rev in revs)]
        emit_json(shown[0] if len(shown) == 1 else shown)
        return
    resolved = [(rev, None if as_node else _bare_session(store, rev), store.show(rev))
                for rev in revs]  # every revision checked before anything is printed
    page()
    for i, (_rev, name, node) in enumerate(resolved):
        if i:
            click.echo("")
        if name is not None:
            _show_conversation(store, name, node)
        else:
            _show_node(store, node)


def _show_node(store: Store, node: Node) -> None:
    term = terminal()
    labels = _ref_labels(store, [node.id]).get(node.id)
    click.echo(f"node    {term.paint(node.id, 'id')}")
    click.echo(f"parent  {node.parent or '(root)'}")
    click.echo(f"type    {node.type}")
    click.echo(f"depth   {store.depth(node.id)}")
    if labels:
        click.echo(f"refs    {', '.join(labels)}")
    click.echo("")
    click.echo(json.dumps(node.data, indent=2, ensure_ascii=False))


def _show_conversation(store: Store, name: str, node: Node) -> None:
    term = terminal()
    labels = _ref_labels(store, [node.id]).get(node.id)
    title = session_title(store, name)
    click.echo(f"session {term.paint(name, 'ref')}  {term.paint(short(node.id), 'id')} "
               f"{decorate(labels, term)}".rstrip())
    if title.title:
        click.echo(f"title   {printable(title.title)}")
    if title.source:
        click.echo(f"source  {printable(title.source)}")
    click.echo(f"length  {events(store.depth(node.id))}")
    click.echo("")
    derived = store.derive(node.id)
    _notes(derived.problems)
    for line in render_messages(derived.messages, term):
        click.echo(line)


def _notes(problems: Any) -> None:
    for p in problems:
        if p.kind == "pending-call":
            click.echo(f"note: tool call {p.tool_call_id} has no result yet (pending)", err=True)
        elif p.kind == "merged-user":
            click.echo(f"note: {p.detail}", err=True)
        else:
            click.echo(f"warning: {p.kind} {p.tool_call_id}: {p.detail}", err=True)


@cli.command()
@click.argument("rev", default="HEAD", required=False, shell_complete=complete_rev)
@click.option("--pretty", is_flag=True, help="The conversation in full, for reading (the default).")
@click.option("--oneline", is_flag=True, help="One line per message, fitted to the terminal.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One message per line.")
@click.option("--sending", is_flag=True,
              help="What a model API is sent: every tool call answered, no result without a "
                   "call, no two user messages in a row (the stored messages are unchanged).")
@pass_store
def messages(locator: StoreLocator, rev: str, pretty: bool, oneline: bool, as_json: bool,
             as_jsonl: bool, sending: bool) -> None:
    """Print the chat messages of REV as they were stored (--sending: as sent): in full for
    reading, one line each with --oneline, or JSON."""
    given = [flag for flag, on in (("--pretty", pretty), ("--oneline", oneline),
                                   ("--json", as_json), ("--jsonl", as_jsonl)) if on]
    if len(given) > 1:
        usage(f"{' and '.join(given)} cannot be used together: each is a way to print the "
              "messages, choose one")
    fmt = given[0].lstrip("-") if given else "pretty"
    store = locator.open()
    derived = store.derive(rev, sending=sending)
    _notes(derived.problems)
    if fmt == "json":
        emit_json(derived.messages)
    elif fmt == "jsonl":
        for m in derived.messages:
            emit_json(m)
    elif fmt == "oneline":
        page()
        width = terminal().width
        for m in derived.messages:
            click.echo(summary(Node(NodeId(""), None, "", m), width))
    else:
        page()
        for line in render_messages(derived.messages, terminal()):
            click.echo(line)
