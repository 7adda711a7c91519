"""Which events a reading command shows: revision ranges (``A..B``, ``A...B``), when each
event was recorded, and the filters of ``sess log`` (``--type``, ``--grep``, ``--role``,
``--since``, ``--until``)."""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import click

from ..errors import InputError
from ..node import Node, NodeId, session_ref
from ..repo.recorded import reflog_dates, stored_dates
from ..repo.store import Store
from ..store.base import ReflogEntry
from .conversation import node_text, role_of

__all__ = ["Filters", "Range", "node_times", "parse_range", "parse_time"]


class Range(NamedTuple):
    """``A..B`` (``symmetric`` False) or ``A...B``: the two ends, each defaulting to HEAD."""

    left: str
    right: str
    symmetric: bool


def parse_range(rev: str) -> Range | None:
    """The range ``rev`` writes, or None for a single revision. Names cannot hold ``..``, so
    the dots are always the range's."""
    for dots, symmetric in (("...", True), ("..", False)):
        if dots in rev:
            left, _, right = rev.partition(dots)
            if ".." in right or ".." in left:
                raise InputError(f"{rev!r} is not a range: write A..B or A...B")
            return Range(left or "HEAD", right or "HEAD", symmetric)
    return None


def node_times(store: Store, rev: str, chain: Sequence[Node],
               wanted: Collection[NodeId] | None = None) -> dict[NodeId, float]:
    """When each node of ``chain`` (a path, newest first) was recorded: the time the store
    keeps with each node; for nodes written before it kept one, as far as the reflog says: an
    entry that moved a ref from ``old`` to ``new`` recorded every node after ``old`` up to
    ``new`` (an append one, a run of appends, a batch, an import or a whole agent turn
    several) at its time. The session ``rev`` is about is read first, then (for ``wanted``
    nodes it leaves without a time, as those a fork shares with its source) the whole store's
    reflog."""
    order = chain[::-1]
    index = {n.id: i for i, n in enumerate(order)}
    wanted = set(index) if wanted is None else set(wanted)
    times: dict[NodeId, float] = {}
    stored_dates(store.recorded, [n for n in order if n.id in wanted], times)
    if wanted <= times.keys():
        return times

    def take(entries: Sequence[ReflogEntry]) -> None:
        reflog_dates(order, entries, times)

    name = store.session_name_of(rev) if rev else None
    if name and store.has_session(name):
        take(store.reflog(session_ref(name)))
    if not wanted <= times.keys():
        take(store.reflog())
    return times


_AGO = re.compile(r"^(\d+)\s*(second|sec|minute|min|hour|day|week|month|year)s?(\s+ago)?$")
_UNIT = {"second": 1, "sec": 1, "minute": 60, "min": 60, "hour": 3600, "day": 86400,
         "week": 7 * 86400, "month": 30 * 86400, "year": 365 * 86400}


def parse_time(text: str, option: str, now: float | None = None) -> float:
    """A point in time as git's ``--since`` takes it: ``2 hours ago``, ``yesterday``,
    ``2026-11-30``, ``2026-11-30 14:05``, an ISO 8601 time, or Unix seconds (``@1764511200``).

    Raises:
        click.BadParameter: none of those.
    """
    now = time.time() if now is None else now
    raw = text.strip().lower().replace(".", " ").replace("_", " ")
    raw = " ".join(raw.split())
    if raw in ("now", "today", "yesterday"):
        if raw == "now":
            return now
        midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        return (midnight - timedelta(days=1 if raw == "yesterday" else 0)).timestamp()
    if (m := _AGO.match(raw)) is not None:
        return now - int(m.group(1)) * _UNIT[m.group(2)]
    digits = raw.removeprefix("@")
    if digits.isdigit():
        return float(digits)
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        pass
    raise click.BadParameter(
        f"{text!r} is no time (try '2 hours ago', 'yesterday', '2026-11-30 14:05' or "
        "'@UNIXSECONDS')", param_hint=option)


class Filters:
    """The filters of ``sess log``; ``active`` if any was given."""

    def __init__(self, types: Sequence[str], grep: str | None, ignore_case: bool,
                 roles: Sequence[str], since: float | None, until: float | None) -> None:
        self.types = list(types)
        self.roles = {r.lower() for r in roles}
        self.since, self.until = since, until
        self.grep: re.Pattern[str] | None = None
        if grep is not None:
            try:
                self.grep = re.compile(grep, re.IGNORECASE if ignore_case else 0)
            except re.error as exc:
                raise click.BadParameter(f"{grep!r} is no regular expression: {exc}",
                                         param_hint="--grep") from None

    @property
    def active(self) -> bool:
        """True if any filter was given."""
        return bool(self.types or self.roles or self.grep or self.timed)

    @property
    def timed(self) -> bool:
        """True if ``--since`` or ``--until`` was given (the reflog must be read)."""
        return self.since is not None or self.until is not None

    def keep(self, node: Node, times: dict[NodeId, float]) -> bool:
        """True if ``node`` passes every filter given."""
        if self.types and not any(fnmatch.fnmatchcase(node.type, t) for t in self.types):
            return False
        if self.roles and role_of(node) not in self.roles:
            return False
        if self.timed:
            at = times.get(node.id)
            if at is None:
                return False
            if self.since is not None and at < self.since:
                return False
            if self.until is not None and at > self.until:
                return False
        return self.grep is None or self.grep.search(node_text(node)) is not None
