"""``sess`` commands that read: log (and its graph), show, messages, diff."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from ..fmt import short, summary, to_jsonable
from ..graph import stream_graph
from ..node import Node, NodeId
from ..repo import SESSIONS, TAGS, Store
from ..scan import refs_at
from .core import StoreLocator, cli, emit_json, events, fail, pass_store


def _ref_labels(store: Store, ids: Sequence[NodeId] | None = None) -> dict[NodeId, list[str]]:
    """The ref names to show beside nodes: at ``ids`` only (a few index lookups), or at
    every node when ``ids`` is None."""
    labels: dict[NodeId, list[str]] = {}
    head_name, head = store.head()
    refs = store.backend.list_refs("") if ids is None else refs_at(store.backend, ids)
    for ref in refs:
        name = ref.name
        if name.startswith(SESSIONS):
            name = name[len(SESSIONS):]
            if name == head_name:
                name = "HEAD -> " + name
        elif name.startswith(TAGS):
            name = "tag: " + name[len(TAGS):]
        labels.setdefault(ref.target, []).append(name)
    if head_name is None and head is not None:
        labels.setdefault(head, []).insert(0, "HEAD")
    return labels


def _label(node: Node, labels: dict[NodeId, list[str]]) -> str:
    refs = labels.get(node.id)
    names = f"({', '.join(refs)}) " if refs else ""
    return f"{short(node.id)} {names}{summary(node, 64, with_type=True)}"


@cli.command()
@click.argument("rev", required=False, default="HEAD")
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N events.")
@click.option("--oneline", is_flag=True, help="One short line per event.")
@click.option("--reverse", is_flag=True, help="Oldest first.")
@click.option("--graph", is_flag=True, help="Draw the tree of sessions and where they fork.")
@click.option("--all", "all_refs", is_flag=True, help="With --graph: every session and tag "
              "(refused without --graph).")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def log(locator: StoreLocator, rev: str, limit: int | None, oneline: bool, reverse: bool,
        graph: bool, all_refs: bool, as_json: bool) -> None:
    """Walk back from REV (default HEAD): id, type and a one-line summary, newest first."""
    store = locator.open()
    if graph and as_json:
        fail("--graph draws for people; use --json without it (nodes carry their parent)")
    if all_refs and not graph:
        fail("--all draws every session and needs --graph ('sess log --graph --all'); "
              "'sess branch' lists the sessions")
    if graph:
        _log_graph(store, rev, all_refs, limit)
        return
    nodes = store.log(rev, limit)
    if reverse:
        nodes.reverse()
    if as_json:
        emit_json([to_jsonable(n) for n in nodes])
        return
    labels = _ref_labels(store, [n.id for n in nodes])
    width = max((len(n.type) for n in nodes), default=0)
    for n in nodes:
        if oneline:
            click.echo(_label(n, labels))
        else:
            refs = labels.get(n.id)
            names = f" ({', '.join(refs)})" if refs else ""
            click.echo(f"{short(n.id)}  {n.type:<{width}}  {summary(n)}{names}")


def _log_graph(store: Store, rev: str, all_refs: bool, limit: int | None) -> None:
    # Streamed: the drawing is printed as the store is read, in bounded memory, and stops
    # reading at the -n limit.
    if all_refs:
        refs = store.backend.list_refs("")
        labels = _ref_labels(store)  # every ref is a tip anyway
        tips = [r.target for r in refs]
        _, head = store.head()
        if head is not None:
            tips.append(head)
        lines = stream_graph(store, tips, lambda nodes: [_label(n, labels) for n in nodes])
    else:
        def label(nodes: Sequence[Node]) -> list[str]:
            at = _ref_labels(store, [n.id for n in nodes])
            return [_label(n, at) for n in nodes]

        lines = stream_graph(store, [store.resolve(rev)], label)
    shown: list[str] = []  # written a few hundred lines at a time: one echo per line is slow
    for count, line in enumerate(lines, 1):
        shown.append(line)
        if limit is not None and count >= limit:
            break
        if len(shown) == 256:
            click.echo("\n".join(shown))
            shown.clear()
    if shown:
        click.echo("\n".join(shown))


@cli.command()
@click.argument("rev", default="HEAD", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def show(locator: StoreLocator, rev: str, as_json: bool) -> None:
    """Show one node in full."""
    store = locator.open()
    node = store.show(rev)
    if as_json:
        emit_json({**to_jsonable(node), "depth": store.depth(node.id)})
        return
    labels = _ref_labels(store, [node.id]).get(node.id)
    click.echo(f"node    {node.id}")
    click.echo(f"parent  {node.parent or '(root)'}")
    click.echo(f"type    {node.type}")
    click.echo(f"depth   {store.depth(node.id)}")
    if labels:
        click.echo(f"refs    {', '.join(labels)}")
    click.echo("")
    click.echo(json.dumps(node.data, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("rev", default="HEAD", required=False)
@click.option("--json", "fmt", flag_value="json", help="One JSON array.")
@click.option("--jsonl", "fmt", flag_value="jsonl", help="One message per line.")
@click.option("--sending", is_flag=True,
              help="What a model API is sent: every tool call answered, no result without a "
                   "call, no two user messages in a row (the stored messages are unchanged).")
@pass_store
def messages(locator: StoreLocator, rev: str, fmt: str | None, sending: bool) -> None:
    """Print the chat messages of REV exactly as they were stored (--sending: as sent)."""
    store = locator.open()
    derived = store.derive(rev, sending=sending)
    for p in derived.problems:
        if p.kind == "pending-call":
            click.echo(f"note: tool call {p.tool_call_id} has no result yet (pending)", err=True)
        elif p.kind == "merged-user":
            click.echo(f"note: {p.detail}", err=True)
        else:
            click.echo(f"warning: {p.kind} {p.tool_call_id}: {p.detail}", err=True)
    if fmt == "json":
        emit_json(derived.messages)
    elif fmt == "jsonl":
        for m in derived.messages:
            emit_json(m)
    else:
        for m in derived.messages:
            click.echo(summary(Node(NodeId(""), None, "", m), 200))



@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def diff(locator: StoreLocator, a: str, b: str, as_json: bool) -> None:
    """Show the common ancestor of A and B and what each added after it."""
    store = locator.open()
    d = store.diff(a, b)
    if as_json:
        emit_json({"base": d.base, "a": [to_jsonable(n) for n in d.only_a],
                    "b": [to_jsonable(n) for n in d.only_b]})
        return
    if d.base is None:
        click.echo("no common ancestor")
    else:
        click.echo(f"common ancestor {short(d.base)} ({events(store.depth(d.base))})")
    for rev, nodes in ((a, d.only_a), (b, d.only_b)):
        click.echo(f"only in {rev} ({len(nodes)}):")
        for n in nodes:
            click.echo(f"  {short(n.id)}  {n.type:<18} {summary(n, 60)}")
