"""``sess grep``: find text in every session at once, through the store's text index.

One line per matching node, newest first, as ``git grep`` prints (``SESSION~N: ...text with
the match...``); a node shared by many sessions is one line that says how many others hold
it. Exit 1 when nothing matched, as grep does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
import msgspec

from .core import CountCommand, StoreLocator, cli, complete_rev, emit_json, page, pass_store
from .select import parse_time
from .term import terminal

if TYPE_CHECKING:
    from ..repo.search import SearchHit

__all__ = ["grep"]

#: Hits asked for per page of the search.
_PAGE = 100


@cli.command(cls=CountCommand)
@click.argument("pattern")
@click.argument("revs", nargs=-1, metavar="[REV]...", shell_complete=complete_rev)
@click.option("-F", "--fixed-strings", "fixed", is_flag=True,
              help="PATTERN is a literal string, found anywhere (inside words too).")
@click.option("--phrase", is_flag=True, help="PATTERN's words one after another.")
@click.option("-i", "--ignore-case", "ignore_case", is_flag=True,
              help="Ignore case (and accents: 'cafe' finds 'Café').")
@click.option("--role", "roles", multiple=True, metavar="ROLE",
              help="Only events of ROLE (user, assistant, tool, system, error...); repeatable.")
@click.option("--type", "types", multiple=True, metavar="TYPE",
              help="Only events of TYPE (user/message, tool/result...); repeatable.")
@click.option("--since", "--after", "since", metavar="TIME",
              help="Only events recorded after TIME ('2 hours ago', 'yesterday', '2026-11-30').")
@click.option("--until", "--before", "until", metavar="TIME", help="Only events recorded before TIME.")
@click.option("--all", "everything", is_flag=True,
              help="Also nodes no session reaches any more (rewound away, kept by the reflog).")
@click.option("-l", "--files-with-matches", "names_only", is_flag=True,
              help="Only the names of the sessions that hold a match.")
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=1),
              help="Show at most N hits (-N works too).")
@click.option("--json", "as_json", is_flag=True, help="Machine output: the hits as a JSON list.")
@pass_store
def grep(locator: StoreLocator, pattern: str, revs: tuple[str, ...], fixed: bool, phrase: bool,
         ignore_case: bool, roles: tuple[str, ...], types: tuple[str, ...], since: str | None,
         until: str | None, everything: bool, names_only: bool, limit: int | None,
         as_json: bool) -> None:
    """Find PATTERN in every session (or in each REV), newest first: one line per matching
    event, shown once however many sessions share it. PATTERN is words (each a whole word),
    --phrase, or -F a literal string. Exit 1 when nothing matched."""
    if fixed and phrase:
        raise click.UsageError("-F and --phrase cannot be used together: -F finds the string "
                               "as it is, --phrase the words in order")
    store = locator.open()
    mode = "substring" if fixed else "phrase" if phrase else "words"
    options: dict[str, Any] = {
        "mode": mode, "ignore_case": ignore_case, "roles": roles, "types": types,
        "since": parse_time(since, "--since") if since else None,
        "until": parse_time(until, "--until") if until else None,
        "revs": revs, "everything": everything, "shown": 1_000_000 if names_only else 1,
    }
    hits: list[SearchHit] = []
    cursor: str | None = None
    names: dict[str, None] = {}
    term = terminal()
    if not as_json:
        page()
    while True:
        want = _PAGE if limit is None else min(_PAGE, limit - len(hits))
        result = store.search(pattern, limit=want, cursor=cursor, **options)
        for hit in result.hits:
            hits.append(hit)
            if names_only:
                for place in hit.sessions:
                    if place.name not in names:
                        names[place.name] = None
                        if not as_json:
                            click.echo(term.paint(place.name, "ref"))
            elif not as_json:
                click.echo(_line(hit, term))
        cursor = result.cursor
        if cursor is None or (limit is not None and len(hits) >= limit):
            break
    if as_json:
        emit_json(list(names) if names_only else [msgspec.to_builtins(h) for h in hits])
    if not hits:
        raise SystemExit(1)


def _line(hit: SearchHit, term: Any) -> str:
    """``SESSION~N: before<match>after (and K other sessions)``."""
    if hit.sessions:
        first = hit.sessions[0]
        where = term.paint(f"{first.name}~{first.back}" if first.back else first.name, "ref")
    else:
        where = term.paint(hit.id[:12], "id")
    match = click.style(hit.match, fg="red", bold=True) if term.color else hit.match
    others = hit.session_count - min(1, len(hit.sessions))
    tail = ""
    if others > 0:
        more = "" if hit.complete else "at least "
        tail = term.paint(f"  (and {more}{others} other session{'s' if others != 1 else ''})", "dim")
    return f"{where}: {hit.before}{match}{hit.after}{tail}"
