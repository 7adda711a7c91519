"""``sess`` commands that read history: log (and its graph) and diff.

``sess log`` shows the conversation by default: messages, and one line per agent turn that
folds in its bookkeeping (steps, tokens, duration, finish reason); ``--all-events`` shows every
event. Ranges (``A..B``, ``A...B``) and filters pick what is shown; ``--json`` lists events.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

from ..fmt import cells, fit, short, summary, to_jsonable
from ..node import Node, NodeId, session_name, tag_name
from ..repo.folding import PathFolder, fold_or_every
from ..repo.store import Store
from ..store.base import Ref
from .conversation import CONVERSATION_TYPES, Row, fold_turns, node_text
from .core import CountCommand, StoreLocator, cli, complete_rev, emit_json, events, page, pass_store, usage
from .select import Filters, Range, node_times, parse_range, parse_time
from .term import Terminal, terminal

__all__ = ["decorate", "diff", "log", "reversed_graph"]


def _ref_labels(store: Store, ids: Sequence[NodeId] | None = None,
                refs: Sequence[Ref] | None = None) -> dict[NodeId, list[str]]:
    """The ref names to show beside nodes: at ``ids`` only (a few index lookups), or at
    every node when ``ids`` is None (``refs``: every ref, when the caller has them)."""
    labels: dict[NodeId, list[str]] = {}
    head_name, head = store.head()
    if refs is None:
        refs = store.refs() if ids is None else store.refs_at(ids)
    for ref in refs:
        name = ref.name
        if (session := session_name(name)) is not None:
            name = "HEAD -> " + session if session == head_name else session
        elif (tag := tag_name(name)) is not None:
            name = "tag: " + tag
        labels.setdefault(ref.target, []).append(name)
    if head_name is None and head is not None:
        labels.setdefault(head, []).insert(0, "HEAD")
    return labels


def decorate(refs: Sequence[str] | None, term: Terminal) -> str:
    """``(HEAD -> main, tag: v1)`` in colour, or "" for no refs."""
    if not refs:
        return ""
    painted = []
    for ref in refs:
        if ref.startswith("HEAD"):
            rest = ref[len("HEAD"):]
            painted.append(term.paint("HEAD", "head") + (
                term.paint(" -> ", "head") + term.paint(rest[4:], "ref") if rest else ""))
        elif ref.startswith("tag: "):
            painted.append(term.paint(ref, "tag"))
        else:
            painted.append(term.paint(ref, "ref"))
    return term.paint("(", "id") + term.paint(", ", "id").join(painted) + term.paint(")", "id")


def _plain_width(refs: Sequence[str] | None) -> int:
    return cells(f"({', '.join(refs)})") if refs else 0


#: The graph's type column: as wide as the widest conversation type (a longer type pushes its
#: summary one space on). The drawing streams, so the column cannot wait for every type.
TYPE_COLUMN = max(len(t) for t in CONVERSATION_TYPES)


def _row_text(row: Row, width: int, *, with_type: bool) -> str:
    if row.turn is not None:
        return _fit(row.turn.line(), width)
    return summary(row.node, width, with_type=with_type)


def _label(row: Row, labels: dict[NodeId, list[str]]) -> str:
    """The one-line label of a row in the graph: short id, refs, summary."""
    term = terminal()
    node = row.node
    refs = labels.get(node.id)
    # The lanes drawn left of the label are not known here: leave room for a few.
    width = max(30, term.width - 12 - _plain_width(refs) - 1 - 16)
    names = f"{decorate(refs, term)} " if refs else ""
    body = _paint_body(_row_text(row, width, with_type=True), row, term)
    return f"{term.paint(short(node.id), 'id')} {names}{body}"


def _long_label(row: Row, labels: dict[NodeId, list[str]]) -> str:
    """The graph label without --oneline: id, type and summary, as ``sess log`` lines are
    (the type in a column of its own, which the summary does not repeat)."""
    term = terminal()
    node = row.node
    refs = labels.get(node.id)
    kind = f"{node.type:<{TYPE_COLUMN}}"
    width = max(30, term.width - 12 - len(kind) - 2 - _plain_width(refs) - 1 - 16)
    names = f" {decorate(refs, term)}" if refs else ""
    body = _paint_body(_row_text(row, width, with_type=False), row, term)
    return (f"{term.paint(short(node.id), 'id')}  {term.paint(kind, 'dim') if row.turn else kind}"
            f"  {body}{names}")


def reversed_graph(lines: Sequence[str]) -> list[str]:
    """A drawing upside down, oldest first: the lines in reverse order, each join (``|/``)
    turned into a fork (``|\\``)."""
    out = []
    for line in reversed(lines):
        if line and "*" not in line:  # a join line: only lanes and slashes
            line = line.replace("/", "\\")
        out.append(line)
    return out


@cli.command(cls=CountCommand)
@click.argument("rev", required=False, default="HEAD", shell_complete=complete_rev)
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=1),
              help="Show at most N lines (-N works too).")
@click.option("--oneline", is_flag=True, help="One short line per event.")
@click.option("--reverse", is_flag=True, help="Oldest first.")
@click.option("--graph", is_flag=True, help="Draw the tree of sessions and where they fork "
              "(folded as the log is: --all-events draws every event).")
@click.option("--all", "all_refs", is_flag=True, help="With --graph: every session and tag "
              "(refused without --graph).")
@click.option("--all-events", is_flag=True,
              help="Every event, not only the conversation (turn/step/usage/chunk/tool-call "
                   "records, an importer's raw records); with --graph too.")
@click.option("--type", "types", multiple=True, metavar="TYPE",
              help="Only events of TYPE (a glob: 'tool/*'); repeatable. Implies --all-events.")
@click.option("--role", "roles", multiple=True, metavar="ROLE",
              help="Only events of ROLE (user, assistant, tool, system); repeatable.")
@click.option("--grep", metavar="REGEX", help="Only events whose text matches REGEX.")
@click.option("-i", "--regexp-ignore-case", "ignore_case", is_flag=True,
              help="--grep ignores case.")
@click.option("--since", "--after", "since", metavar="TIME",
              help="Only events recorded after TIME ('2 hours ago', 'yesterday', '2026-11-30').")
@click.option("--until", "--before", "until", metavar="TIME",
              help="Only events recorded before TIME.")
@click.option("--json", "as_json", is_flag=True,
              help="Machine output: the events (every event unless filtered).")
@pass_store
def log(locator: StoreLocator, rev: str, limit: int | None, oneline: bool, reverse: bool,
        graph: bool, all_refs: bool, all_events: bool, types: tuple[str, ...],
        roles: tuple[str, ...], grep: str | None, ignore_case: bool, since: str | None,
        until: str | None, as_json: bool) -> None:
    """The conversation at REV (default HEAD), newest first: its messages, and one line per
    agent turn with what its bookkeeping says (steps, tokens, duration, how it ended).

    REV may be a range: A..B is what B added since A (where they parted), A...B what
    either added since they parted (marked < for A's side, > for B's).
    """
    store = locator.open()
    filters = Filters(types, grep, ignore_case, roles,
                      parse_time(since, "--since") if since else None,
                      parse_time(until, "--until") if until else None)
    if graph and as_json:
        usage("--graph draws for people; use --json without it (nodes carry their parent)")
    if oneline and as_json:
        usage("--oneline and --json cannot be used together: --oneline is a short line for "
              "people, --json the events for programs")
    if all_refs and not graph:
        usage("--all draws every session and needs --graph ('sess log --graph --all'); "
             "'sess branch' lists the sessions")
    span = parse_range(rev)
    if graph:
        if span is not None or filters.active:
            usage("--graph draws whole sessions: ranges and filters (--type, --role, --grep, "
                 "--since, --until) work without it")
        page()
        _log_graph(store, rev, all_refs, limit, oneline=oneline, reverse=reverse,
                   folded=not all_events)
        return
    everything = all_events or bool(types)
    sides: dict[NodeId, str] = {}
    if span is not None:
        nodes = _range_nodes(store, span, sides)
    elif (everything or as_json) and not filters.active:
        nodes = store.log(rev, limit)  # bounded: only what is shown is read
    elif limit is not None and not filters.active:
        nodes = _recent(store, rev, limit)
    else:
        nodes = store.log(rev)
    oldest_first = nodes[::-1]
    times: dict[NodeId, float] = {}
    if filters.timed and span is not None:  # each side is a path of its own
        times = {**node_times(store, span.left, store.log(span.left)),
                 **node_times(store, span.right, store.log(span.right))}
    elif filters.timed:
        times = node_times(store, rev, nodes)
    elif not (everything or as_json):  # a turn's duration: when it started and ended
        turns = [n.id for n in nodes if n.type in ("turn/start", "turn/end")]
        times = node_times(store, rev, nodes, turns) if turns and span is None else {}
    if as_json:
        kept = [n for n in nodes if filters.keep(n, times)][:limit]
        emit_json([to_jsonable(n) for n in (kept[::-1] if reverse else kept)])
        return
    if everything:
        rows = [Row(n) for n in oldest_first]
    elif filters.active:
        rows = [Row(n) for n in oldest_first if n.type in CONVERSATION_TYPES]
    elif span is not None:
        rows = _range_rows(store, span, oldest_first)
    else:
        rows = fold_or_every(oldest_first, times)
    rows = [r for r in rows if r.turn is not None or filters.keep(r.node, times)]
    rows.reverse()  # newest first
    rows = rows[:limit]
    if reverse:
        rows.reverse()
    page()
    _print_rows(store, rows, oneline, sides)


def _recent(store: Store, rev: str, limit: int) -> list[Node]:
    """The newest events of ``rev`` (newest first) that give the conversation view's newest
    ``limit`` lines whole: a window that grows until it holds that many lines from turns that
    start inside it, so a long session is not read to its root for ``sess log -n 10``."""
    window = max(256, 16 * limit)
    while True:
        nodes = store.log(rev, window)
        if len(nodes) < window:
            return nodes  # the whole session
        oldest_first = nodes[::-1]
        starts = [i for i, n in enumerate(oldest_first) if n.type == "turn/start"]
        if starts:
            # What comes before the first turn/start may be part of a turn that began
            # further back: only the turns that start in the window are known whole.
            whole = oldest_first[starts[0]:]
        elif not any(n.type == "turn/end" for n in oldest_first):
            whole = oldest_first  # no turn here at all: every message stands alone
        else:
            whole = []  # inside one long turn: its start is further back
        if len(fold_turns(whole, {})) >= limit:
            return whole[::-1]
        window *= 4


def _range_nodes(store: Store, span: Range, sides: dict[NodeId, str]) -> list[Node]:
    """The nodes of a range, newest first (for A...B: B's side, then A's)."""
    d = store.diff(span.left, span.right)
    if not span.symmetric:
        return d.only_b[::-1]
    for n in d.only_a:
        sides[n.id] = "<"
    for n in d.only_b:
        sides[n.id] = ">"
    both = d.only_a + d.only_b
    order = {n.id: i for i, n in enumerate(both)}
    # Oldest first within each side, B's side after A's: reversed, B's newest is on top.
    return sorted(both, key=lambda n: (sides[n.id] == ">", order[n.id]), reverse=True)


def _range_rows(store: Store, span: Range, oldest_first: Sequence[Node]) -> list[Row]:
    """The conversation rows of a range's nodes, each turn summed over the whole turn.

    A range may start inside a turn (where the two sides parted mid-turn, or after a turn's
    shared first event), so each side's whole path is folded, with its reflog times, and the
    rows that fall in the range are kept: ``log A..B`` shows the turn line ``log B`` shows.
    """
    wanted = {n.id: i for i, n in enumerate(oldest_first)}
    kept: dict[NodeId, Row] = {}
    for rev in (span.right, span.left) if span.symmetric else (span.right,):
        path = store.log(rev)
        turns = [n.id for n in path if n.type in ("turn/start", "turn/end")]
        times = node_times(store, rev, path, turns) if turns else {}
        for row in fold_turns(path[::-1], times):
            if row.node.id in wanted:
                kept.setdefault(row.node.id, row)
    if not kept:  # all of it inside one turn that goes on: every event, as fold_or_every
        return [Row(n) for n in oldest_first]
    return sorted(kept.values(), key=lambda r: wanted[r.node.id])


def _print_rows(store: Store, rows: Sequence[Row], oneline: bool, sides: dict[NodeId, str]) -> None:
    term = terminal()
    labels = _ref_labels(store, [r.node.id for r in rows])
    width = max((len(r.node.type) for r in rows), default=0)
    for r in rows:
        n = r.node
        refs = labels.get(n.id)
        mark = sides.get(n.id)
        lead = (mark + " ") if mark else ""
        text = r.turn.line() if r.turn is not None else None
        ident = term.paint(short(n.id), "id")
        if oneline:
            names = f"{decorate(refs, term)} " if refs else ""
            room = term.width - len(lead) - 11 - (_plain_width(refs) + 1 if refs else 0)
            body = _fit(text, room) if text is not None else summary(
                n, max(1, room), with_type=True)
            click.echo(f"{lead}{ident} {names}{_paint_body(body, r, term)}")
        else:
            names = f" {decorate(refs, term)}" if refs else ""
            room = term.width - len(lead) - 10 - 2 - width - 2 - (
                _plain_width(refs) + 1 if refs else 0)
            body = _fit(text, room) if text is not None else summary(n, max(1, room))
            kind = f"{n.type:<{width}}"
            click.echo(f"{lead}{ident}  {term.paint(kind, 'dim') if r.turn else kind}  "
                       f"{_paint_body(body, r, term)}{names}")


def _fit(text: str, width: int) -> str:
    return fit(text, max(1, width))


def _paint_body(body: str, row: Row, term: Terminal) -> str:
    if row.turn is not None:
        return term.paint(body, "turn")
    role, sep, rest = body.partition(": ")
    what = role.split(" ")[0]
    if sep and what in ("user", "assistant", "tool", "system"):
        return term.paint(role, what) + sep + rest
    return body


def _log_graph(store: Store, rev: str, all_refs: bool, limit: int | None, *,
               oneline: bool = True, reverse: bool = False, folded: bool = True) -> None:
    # Streamed: the drawing is printed as the store is read, in bounded memory, and stops
    # reading at the -n limit (upside down, --reverse needs the whole drawing first).
    from .graph import Label, stream_graph

    label = _label if oneline else _long_label
    labels: dict[NodeId, list[str]] | None = None
    if all_refs:
        refs = store.refs()  # (read once: every ref is a tip and a label)
        labels = _ref_labels(store, refs=refs)
        tips = [r.target for r in refs]
        _, head = store.head()
        if head is not None:
            tips.append(head)
    else:
        tips = [store.resolve(rev)]
    keep = frozenset(tips)  # where a ref points is drawn, folded or not

    def texts(rows: Sequence[Row | None]) -> list[str | None]:
        at = labels if labels is not None else _ref_labels(
            store, [r.node.id for r in rows if r is not None])
        return [None if r is None else label(r, at) for r in rows]

    def path_label(top: NodeId) -> Label:
        if not folded:
            return lambda nodes: texts([Row(n) for n in nodes])
        folder = PathFolder(top in keep, keep, store.log)
        return lambda nodes: texts(folder.rows(nodes))

    lines = stream_graph(store, tips, path_label=path_label, lines=limit)
    if limit is not None:
        lines = itertools.islice(lines, limit)
    if reverse:
        for line in reversed_graph(list(lines)):
            click.echo(line)
        return
    shown: list[str] = []  # written a few hundred lines at a time: one echo per line is slow
    for line in lines:
        shown.append(line)
        if len(shown) == 256:
            click.echo("\n".join(shown))
            shown.clear()
    if shown:
        click.echo("\n".join(shown))


# -- diff ------------------------------------------------------------------------------------


@cli.command()
@click.argument("a", shell_complete=complete_rev)
@click.argument("b", required=False, shell_complete=complete_rev)
@click.option("--stat", is_flag=True, help="Only how many events of each kind each side added.")
@click.option("--all-events", is_flag=True,
              help="Every event each side added, not only the conversation (as log's).")
@click.option("--json", "as_json", is_flag=True, help="Machine output (every event).")
@pass_store
def diff(locator: StoreLocator, a: str, b: str | None, stat: bool, all_events: bool,
         as_json: bool) -> None:
    """Show the common ancestor of A and B (default HEAD) and what each added after it.

    Each turn's bookkeeping is folded as ``sess log`` folds it (``--all-events``: every event).

    `sess diff A..B` is `sess diff A B`; `sess diff A...B` shows only what B added since it
    parted from A.
    """
    store = locator.open()
    only_right = False
    span = parse_range(a)
    if span is not None:
        if b is not None:
            usage(f"give a range or two revisions, not both ('sess diff {a}' or "
                 f"'sess diff {span.left} {b}')")
        a, b, only_right = span.left, span.right, span.symmetric
    b = b or "HEAD"
    d = store.diff(a, b)
    sides = [(b, d.only_b)] if only_right else [(a, d.only_a), (b, d.only_b)]
    if as_json:
        out: dict[str, Any] = {"base": d.base, "a": [] if only_right else [to_jsonable(n) for n in d.only_a],
               "b": [to_jsonable(n) for n in d.only_b]}
        if stat:
            out = {"base": d.base, **{k: _stat(nodes) for k, nodes in
                                      (("a", [] if only_right else d.only_a), ("b", d.only_b))}}
        emit_json(out)
        return
    page()
    term = terminal()
    if d.base is None:
        click.echo("no common ancestor")
    elif not d.only_a and not d.only_b:
        # One node on both sides: nothing to list for either.
        click.echo(f"no difference: {a} and {b} are both at {term.paint(short(d.base), 'id')} "
                   f"({events(store.depth(d.base))})")
        return
    else:
        click.echo(f"common ancestor {term.paint(short(d.base), 'id')} "
                   f"({events(store.depth(d.base))})")
    if stat:
        namew = max(len(rev) for rev, _ in sides)
        for rev, nodes in sides:
            counts = _stat(nodes)
            kinds = ", ".join(f"{v} {k}" for k, v in counts["types"].items())
            click.echo(f" {rev:<{namew}} | {term.paint('+' + events(len(nodes)), 'added')}"
                       f"{': ' + kinds if kinds else ''}; {counts['chars']} characters of text")
        return
    shown = [(rev, nodes, [Row(n) for n in nodes] if all_events else fold_or_every(nodes, {}))
             for rev, nodes in sides]
    typew = max((len(r.node.type) for _, _, rows in shown for r in rows), default=0)
    typew = max(typew, 18)  # the column as it always was, wider only for long types
    for rev, nodes, rows in shown:
        click.echo(f"only in {rev} ({len(nodes)}):")
        for r in rows:
            room = max(1, term.width - 2 - 10 - 2 - typew - 1)
            kind = f"{r.node.type:<{typew}}"
            click.echo(f"  {term.paint(short(r.node.id), 'id')}  "
                       f"{term.paint(kind, 'dim') if r.turn else kind} "
                       f"{_paint_body(_row_text(r, room, with_type=False), r, term)}")


def _stat(nodes: Sequence[Node]) -> dict[str, Any]:
    """How many events of each type (most first), and characters of message text."""
    types = Counter(n.type for n in nodes)
    chars = sum(len(node_text(n)) for n in nodes if n.type in CONVERSATION_TYPES)
    return {"events": len(nodes), "types": dict(types.most_common()), "chars": chars}
