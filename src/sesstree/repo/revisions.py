"""Revisions, as git reads them: what ``quest-1~2``, ``HEAD^``, ``quest-1@{1}``,
``origin/quest-1``, a tag or an id prefix names.

- ``NAME~N`` and ``NAME^`` (any mix, read from the right) go back N events along the path;
- ``NAME~Nm`` is the message N messages back from the newest one at ``NAME`` (a line of
  ``sess log``, never a record of the run), ``NAME~Nt`` where the session ended N turns ago
  (before its last N turns started); steps of different kinds apply left to right;
- ``NAME@{N}`` is where a ref was N moves ago, from its reflog (deleted refs included);
- a session wins over a tag, and both over a remote-tracking ref of the same spelling (a
  session may be called ``origin/x``), as git's refs/heads come before refs/remotes;
- an id prefix needs 4 hex characters and must name one node.

Hostile input stays cheap: a revision longer than :data:`MAX_REVISION` is refused before any
parsing, step counts take at most 9 digits, and the steps are split in one scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Protocol

from ..errors import AmbiguousPrefixError, UnknownRevisionError
from ..fmt import plural
from ..node import (
    REMOTES,
    SESSIONS,
    TAGS,
    NodeId,
    RefName,
    remote_ref,
    session_ref,
    short_name,
    tag_ref,
)
from ..store.base import Backend, Chain, ReflogEntry

__all__ = ["MAX_REVISION", "MESSAGE_STEP_TYPES", "REMOTES", "SESSIONS", "TAGS", "Revisable",
           "logged_refs", "named_for_log", "parse_steps", "resolve", "session_name_of",
           "split_steps", "steps_suffix"]

# SESSIONS, TAGS and REMOTES (remote-tracking refs ``remotes/REMOTE/NAME``, read as the revision
# ``REMOTE/NAME``) are defined in node.py and re-exported here, where they have been importable.
# \Z, not $: `$` also matches before a final line break, which a hostile revision may hold.
_HEX = re.compile(r"^[0-9a-f]{4,64}\Z")
_SUFFIX = re.compile(r"(~[0-9]*[mt]?|\^+)\Z")
_REFLOG_REV = re.compile(r"^(.*)@\{([0-9]+)\}\Z", re.DOTALL)
#: Longer revisions are refused before any parsing: no real one comes near (an id is 64
#: characters, a name at most 200 bytes), and a bound keeps hostile input cheap.
MAX_REVISION = 1024
#: ``~N`` and ``@{N}`` take at most this many digits (a billion events or moves back).
_MAX_DIGITS = 9
#: What ``~Nm`` counts: the events that are messages of the conversation (``sess log`` shows
#: them on lines of their own), not the records of the run around them.
MESSAGE_STEP_TYPES = frozenset({
    "system/message", "user/message", "assistant/message", "tool/result", "message",
    "context/message", "steering/message", "compaction/marker",
})
#: Events read back per window while counting messages or turns (it doubles each time).
_STEP_WINDOW = 64


class Revisable(Protocol):
    """What reading a revision needs of a store. A :class:`~sesstree.repo.store.Store` is one;
    this module does not import it, as Store calls down into this one."""

    @property
    def backend(self) -> Backend:
        """The store's backend (for id prefixes)."""
        ...

    def head(self) -> tuple[str | None, NodeId | None]:
        """``(session name, node)`` of HEAD."""
        ...

    def target(self, name: str) -> NodeId | None:
        """Where the ref ``name`` (a full name) points, or None."""
        ...

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        """The moves of session ``name`` (or of the full ref name given)."""
        ...

    def chain_at(self, node: NodeId, limit: int | None = None) -> Chain:
        """The newest ``limit`` events up to ``node``; StoreCorruptError if one is lost."""
        ...


def resolve(store: Revisable, rev: str | NodeId) -> NodeId:
    """The node ``rev`` names in ``store`` (see the module docstring).

    Raises:
        UnknownRevisionError: nothing matches, or ``~N`` goes past the root.
        AmbiguousPrefixError: the id prefix matches several nodes.
    """
    rev = str(rev).strip()
    if len(rev) > MAX_REVISION:
        raise UnknownRevisionError(
            f"a revision of {len(rev)} characters is not one (at most {MAX_REVISION})")
    if not rev.isascii():
        _check_utf8(rev)
    base, steps = parse_steps(rev)
    node = _resolve_base(store, base, rev)
    for i, (count, unit) in enumerate(steps):
        if unit == "m":
            node = _messages_back(store, node, count, rev)
        elif unit == "t":
            node = _turns_back(store, node, count, rev)
        elif count:
            chain = store.chain_at(node, count + 1)
            if len(chain.ids) <= count:
                start = _shown(base) if i == 0 else f"its step to {node[:10]}"
                raise UnknownRevisionError(
                    f"{_shown(rev)}: {start} has only {plural(len(chain.ids), 'event')}, "
                    f"cannot go back {count}")
            node = chain.ids[0]
    return node


def _back_from(store: Revisable, node: NodeId) -> Iterator[tuple[NodeId, str, NodeId | None]]:
    """The events from ``node`` back to the root, newest first: id, type and parent; read in
    growing windows, so a step that lands near ``node`` reads little."""
    window = _STEP_WINDOW
    head: NodeId | None = node
    while head is not None:
        chain = store.chain_at(head, window)
        parents = [chain.base, *chain.ids[:-1]]
        for i in range(len(chain.ids) - 1, -1, -1):
            yield chain.ids[i], chain.types[i], parents[i]
        head = chain.base
        window *= 2


def _messages_back(store: Revisable, node: NodeId, count: int, rev: str) -> NodeId:
    """``~Nm``: the message ``count`` messages before the newest one at or before ``node``."""
    seen = 0
    for id, type, _ in _back_from(store, node):
        if type in MESSAGE_STEP_TYPES:
            if seen == count:
                return id
            seen += 1
    most = f" (at most {seen - 1})" if seen else ""
    raise UnknownRevisionError(
        f"{_shown(rev)}: only {plural(seen, 'message')} lead there, cannot go back "
        f"{count}{most}")


def _turns_back(store: Revisable, node: NodeId, count: int, rev: str) -> NodeId:
    """``~Nt``: the session before its last ``count`` turns (those that start at or before
    ``node``) started: the end of the turn ``count`` turns back."""
    if count == 0:
        return node
    seen = 0
    for _, type, parent in _back_from(store, node):
        if type == "turn/start":
            seen += 1
            if seen == count:
                if parent is None:
                    raise UnknownRevisionError(
                        f"{_shown(rev)}: the history starts with its first turn, so nothing "
                        f"is {plural(count, 'turn')} back (at most {count - 1})")
                return parent
    raise UnknownRevisionError(
        f"{_shown(rev)}: only {plural(seen, 'turn')} lead there, cannot go back {count}")


def session_name_of(store: Revisable, rev: str) -> str:
    """The session a revision is about: ``quest-1~2``, ``quest-1@{1}`` and ``quest-1^`` name
    ``quest-1``; ``HEAD`` names the current session."""
    if rev in ("HEAD", "@"):
        head_name, _ = store.head()
        return head_name or rev
    base, _ = parse_steps(rev)
    if (m := _REFLOG_REV.match(base)) is not None:
        base = m.group(1)
    if base in ("HEAD", "@", ""):
        head_name, _ = store.head()
        return head_name or rev
    return short_name(base)


def logged_refs(name: str) -> tuple[RefName, RefName | None]:
    """The ref whose reflog ``sess reflog NAME`` reads, and the one to read if that has none:
    a full ref name (``tags/v1``) is itself; a short one is a session, else (``REMOTE/NAME``)
    a remote session."""
    if name.startswith((SESSIONS, TAGS, REMOTES)):
        return RefName(name), None
    return session_ref(name), remote_ref(name) if "/" in name else None


def named_for_log(rev: str | None, head_name: Callable[[], str | None]) -> str:
    """``rev`` (default HEAD) as a reflog entry keeps it: a revision that starts at an
    attached HEAD names HEAD's session instead (``HEAD~2`` on ``quest-1`` is
    ``quest-1~2``), so the entry still says where it came from once HEAD has moved."""
    rev = rev or "HEAD"
    if rev.startswith("HEAD"):
        rest = rev[4:]
    elif rev.startswith("@"):
        rest = rev if rev.startswith("@{") else rev[1:]
    else:
        return rev
    if rest and not rest.startswith(("~", "^", "@{")):
        return rev
    name = head_name()
    return name + rest if name is not None else rev


def steps_suffix(rev: str) -> bool:
    """True if ``rev`` ends in steps back (``~N``, ``^``): it names a node, not a session."""
    return _SUFFIX.search(rev) is not None


def _resolve_base(store: Revisable, base: str, rev: str) -> NodeId:
    if (m := _REFLOG_REV.match(base)) is not None:
        if len(m.group(2)) > _MAX_DIGITS:
            raise UnknownRevisionError(f"{_shown(rev)}: no reflog goes back that far")
        return _from_reflog(store, m.group(1), int(m.group(2)), rev)
    if base == "HEAD" or base == "@":
        name, node = store.head()
        if node is None:
            raise UnknownRevisionError(f"HEAD ({name}) has no events yet")
        return node
    for ref in (base, session_ref(base), tag_ref(base), remote_ref(base)):
        found = store.target(ref)
        if found is not None:
            return found
    prefix = base.lower()
    if _HEX.match(prefix):
        matches = store.backend.resolve_prefix(prefix, limit=6)
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(m[:12] for m in matches[:5])
            raise AmbiguousPrefixError(f"id prefix {base!r} is ambiguous: {shown}...")
    hint = ""
    if re.fullmatch(r"[0-9a-fA-F]{1,3}", base):
        hint = " (an id prefix needs at least 4 hex characters)"
    raise UnknownRevisionError(
        f"unknown revision {_shown(rev)!r}: no session, tag or node id matches{hint}"
    )


def _from_reflog(store: Revisable, name: str, n: int, rev: str) -> NodeId:
    """``NAME@{N}``: where the ref pointed N moves ago (0 = now), deleted refs included."""
    if name in ("HEAD", "@", ""):
        head_name, _ = store.head()
        if head_name is None:
            raise UnknownRevisionError(f"{rev}: HEAD is detached and has no reflog")
        name = head_name
    entries = store.reflog(name)
    if not entries and not name.startswith((SESSIONS, TAGS, REMOTES)):
        entries = store.reflog(tag_ref(name))  # a tag by its short name
        if not entries and "/" in name:
            entries = store.reflog(remote_ref(name))  # REMOTE/NAME
    if n >= len(entries):
        raise UnknownRevisionError(f"{rev}: the reflog of {name} has only {len(entries)} entries")
    target = entries[-1 - n].new
    if target is None:
        raise UnknownRevisionError(f"{rev} is the deletion of {name}; try {name}@{{{n + 1}}}")
    return target


def split_steps(rev: str) -> tuple[str, int]:
    """``quest-1@{2}~3^`` -> ``("quest-1@{2}", 4)``: the base and how many events back.

    For a revision with message or turn steps (``~2t``), use :func:`parse_steps`: they are not
    a number of events.
    """
    base, steps = parse_steps(rev)
    if any(unit for _, unit in steps):
        raise UnknownRevisionError(f"{_shown(rev)} steps back by messages or turns, not events")
    return base, sum(count for count, _ in steps)


def parse_steps(rev: str) -> tuple[str, list[tuple[int, str]]]:
    """``quest-1@{2}~2t^`` -> ``("quest-1@{2}", [(2, "t"), (1, "")])``: the base and its
    steps back, in the order they apply (left to right); the unit is ``""`` for events,
    ``"m"`` for messages and ``"t"`` for turns. Runs of event steps are added up.

    One scan from the end, so a long run of steps costs linear time.
    """
    steps: list[tuple[int, str]] = []  # newest step first while scanning
    end = len(rev)
    while end > 1:
        start = end
        unit = ""
        if rev[end - 1] == "^":
            while start > 0 and rev[start - 1] == "^":
                start -= 1
            if start == 0:
                break  # a base is never empty
            count = end - start
        else:
            if rev[end - 1] in "mt":
                unit = rev[end - 1]
                start -= 1
            digits_end = start
            while start > 0 and "0" <= rev[start - 1] <= "9":
                start -= 1
            if start < 2 or rev[start - 1] != "~":
                break
            digits = rev[start:digits_end]
            if len(digits) > _MAX_DIGITS:
                raise UnknownRevisionError(f"{_shown(rev)}: ~{_shown(digits, 12)} is too far back")
            count = int(digits) if digits else 1
            start -= 1
        if steps and not unit and not steps[-1][1]:
            steps[-1] = (steps[-1][0] + count, "")
        else:
            steps.append((count, unit))
        end = start
    steps.reverse()
    return rev[:end], steps


def _shown(text: str, width: int = 80) -> str:
    """A user's text, clipped for an error message."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _check_utf8(text: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise UnknownRevisionError(f"revision {text!a} is not valid UTF-8") from None
