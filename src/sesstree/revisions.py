"""Revisions, as git reads them: what ``quest-1~2``, ``HEAD^``, ``quest-1@{1}``,
``origin/quest-1``, a tag or an id prefix names.

- ``NAME~N`` and ``NAME^`` (any mix, read from the right) go back N events along the path;
- ``NAME@{N}`` is where a ref was N moves ago, from its reflog (deleted refs included);
- a session wins over a tag, and both over a remote-tracking ref of the same spelling (a
  session may be called ``origin/x``), as git's refs/heads come before refs/remotes;
- an id prefix needs 4 hex characters and must name one node.

Hostile input stays cheap: a revision longer than :data:`MAX_REVISION` is refused before any
parsing, step counts take at most 9 digits, and the steps are split in one scan.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .errors import AmbiguousPrefixError, UnknownRevisionError
from .fmt import plural
from .node import NodeId

if TYPE_CHECKING:
    from .repo import Store

__all__ = ["MAX_REVISION", "REMOTES", "SESSIONS", "TAGS", "resolve", "session_name_of",
           "split_steps", "steps_suffix"]

SESSIONS = "sessions/"
TAGS = "tags/"
#: Remote-tracking refs: ``remotes/REMOTE/NAME``, read as the revision ``REMOTE/NAME``.
REMOTES = "remotes/"
# \Z, not $: `$` also matches before a final line break, which a hostile revision may hold.
_HEX = re.compile(r"^[0-9a-f]{4,64}\Z")
_SUFFIX = re.compile(r"(~[0-9]*|\^+)\Z")
_REFLOG_REV = re.compile(r"^(.*)@\{([0-9]+)\}\Z", re.DOTALL)
#: Longer revisions are refused before any parsing: no real one comes near (an id is 64
#: characters, a name at most 200 bytes), and a bound keeps hostile input cheap.
MAX_REVISION = 1024
#: ``~N`` and ``@{N}`` take at most this many digits (a billion events or moves back).
_MAX_DIGITS = 9


def resolve(store: Store, rev: str | NodeId) -> NodeId:
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
    base, back = split_steps(rev)
    node = _resolve_base(store, base, rev)
    if back == 0:
        return node
    chain = store.backend.chain(node, back + 1)
    if len(chain.ids) <= back:
        raise UnknownRevisionError(
            f"{_shown(rev)}: {_shown(base)} has only {plural(len(chain.ids), 'event')}, "
            f"cannot go back {back}"
        )
    return chain.ids[0]


def session_name_of(store: Store, rev: str) -> str:
    """The session a revision is about: ``quest-1~2``, ``quest-1@{1}`` and ``quest-1^`` name
    ``quest-1``; ``HEAD`` names the current session."""
    if rev in ("HEAD", "@"):
        head_name, _ = store.head()
        return head_name or rev
    base, _ = split_steps(rev)
    if (m := _REFLOG_REV.match(base)) is not None:
        base = m.group(1)
    if base in ("HEAD", "@", ""):
        head_name, _ = store.head()
        return head_name or rev
    return base[len(SESSIONS):] if base.startswith(SESSIONS) else base


def steps_suffix(rev: str) -> bool:
    """True if ``rev`` ends in steps back (``~N``, ``^``): it names a node, not a session."""
    return _SUFFIX.search(rev) is not None


def _resolve_base(store: Store, base: str, rev: str) -> NodeId:
    if (m := _REFLOG_REV.match(base)) is not None:
        if len(m.group(2)) > _MAX_DIGITS:
            raise UnknownRevisionError(f"{_shown(rev)}: no reflog goes back that far")
        return _from_reflog(store, m.group(1), int(m.group(2)), rev)
    if base == "HEAD" or base == "@":
        name, node = store.head()
        if node is None:
            raise UnknownRevisionError(f"HEAD ({name}) has no events yet")
        return node
    for ref in (base, SESSIONS + base, TAGS + base, REMOTES + base):
        found = store.backend.get_ref(ref)
        if found is not None:
            return found.target
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


def _from_reflog(store: Store, name: str, n: int, rev: str) -> NodeId:
    """``NAME@{N}``: where the ref pointed N moves ago (0 = now), deleted refs included."""
    if name in ("HEAD", "@", ""):
        head_name, _ = store.head()
        if head_name is None:
            raise UnknownRevisionError(f"{rev}: HEAD is detached and has no reflog")
        name = head_name
    entries = store.reflog(name)
    if not entries and not name.startswith((SESSIONS, TAGS, REMOTES)):
        entries = store.backend.reflog(TAGS + name)  # a tag by its short name
        if not entries and "/" in name:
            entries = store.backend.reflog(REMOTES + name)  # REMOTE/NAME
    if n >= len(entries):
        raise UnknownRevisionError(f"{rev}: the reflog of {name} has only {len(entries)} entries")
    target = entries[-1 - n].new
    if target is None:
        raise UnknownRevisionError(f"{rev} is the deletion of {name}; try {name}@{{{n + 1}}}")
    return target


def split_steps(rev: str) -> tuple[str, int]:
    """``quest-1@{2}~3^`` -> ``("quest-1@{2}", 4)``: the base and how many events back.

    One scan from the end, so a long run of steps costs linear time.
    """
    back = 0
    end = len(rev)
    while end > 1:
        start = end
        if rev[end - 1] == "^":
            while start > 0 and rev[start - 1] == "^":
                start -= 1
            if start == 0:
                break  # a base is never empty
            back += end - start
        else:
            while start > 0 and "0" <= rev[start - 1] <= "9":
                start -= 1
            if start < 2 or rev[start - 1] != "~":
                break
            digits = rev[start:end]
            if len(digits) > _MAX_DIGITS:
                raise UnknownRevisionError(f"{_shown(rev)}: ~{_shown(digits, 12)} is too far back")
            back += int(digits) if digits else 1
            start -= 1
        end = start
    return rev[:end], back


def _shown(text: str, width: int = 80) -> str:
    """A user's text, clipped for an error message."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _check_utf8(text: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise UnknownRevisionError(f"revision {text!a} is not valid UTF-8") from None
