"""Where a session forked: the session it came from and the last node they share, for the mark
on its page.

The session's first reflog entry says where it came from: ``branch: created from quest-1~3``
(``sess branch``, ``Store.fork``), ``proxy: ... history diverged from q0`` and ``proxy: kept
the path q0 left`` (the proxy's forks). The node they part at is the last one the two share, as
:mod:`sesstree.repo.related` reads it, found in a bounded read of both (as the diff page reads), so
the page costs two reflog reads and that diff whatever the store holds.
"""

from __future__ import annotations

import re

import msgspec

from ..node import NodeId
from ..repo.revisions import parse_steps, session_name_of
from ..repo.store import Store
from .diffing import DIFF_READ, bounded_diff
from .paths import depth_of

__all__ = ["Fork", "fork_of", "source_in"]

_BRANCH = "branch: created from "
_PROXY = re.compile(r"^proxy: .*, history diverged from (\S+)\Z|^proxy: kept the path (\S+) left\Z")


class Fork(msgspec.Struct, frozen=True):
    """Session ``session`` and this one part after node ``id`` (``depth`` events in)."""

    session: str
    id: NodeId
    depth: int
    exists: bool = True  # False: the source session has since been deleted (its reflog remains)


def source_in(store: Store, reason: str) -> str | None:
    """The session a creating reflog entry's reason names as its source, if any."""
    if reason.startswith(_BRANCH):
        rev = reason[len(_BRANCH):]
        # An entry written at a detached HEAD (or by an older version) says HEAD: which
        # session that was is not known now, and HEAD's session today may be any other.
        base, _ = parse_steps(rev)
        return None if base in ("HEAD", "@") or base.startswith(("HEAD@{", "@{")) \
            else session_name_of(store, rev)
    m = _PROXY.match(reason)
    return (m.group(1) or m.group(2)) if m is not None else None


def fork_of(store: Store, name: str, head: NodeId) -> Fork | None:
    """Where session ``name`` (at ``head``) forked from another session, if its reflog says
    it did and the two still share history."""
    _, total = store.reflog_page(name, 1, 0)
    if not total:
        return None
    oldest, _ = store.reflog_page(name, 1, total - 1)
    created = oldest[0] if oldest else None
    if created is None or created.old is not None:
        return None
    source = source_in(store, created.reason)
    if source is None or source == name:
        return None
    other = store.session_head(source)
    if other is not None:
        d = bounded_diff(store, head, other, shown=0)
        if d.base is not None:
            return Fork(source, d.base.id, depth_of(store, d.base.id))
        # Nothing shared that a reader knows, by the rule; but the entry says the user forked
        # here, at a node both still hold (after a shared system prompt, before any message).
        if created.new is not None and _on_path(store, other, created.new) \
                and _on_path(store, head, created.new):
            return Fork(source, created.new, depth_of(store, created.new))
        return None
    if created.new is None or not store.reflog_page(source, 1, 0)[1]:
        return None  # a tag, an id: no session to name
    # Deleted (its reflog remains): the node it was created at, if still on this path.
    if _on_path(store, head, created.new):
        return Fork(source, created.new, depth_of(store, created.new), exists=False)
    return None


def _on_path(store: Store, head: NodeId, node: NodeId) -> bool:
    """True if ``node`` is on the path to ``head`` and at most ``DIFF_READ`` events back (so
    the page reads no more than the diff does; a node further back is not looked for)."""
    back = depth_of(store, head) - depth_of(store, node)
    return 0 <= back < DIFF_READ and store.chain_at(head, back + 1).ids[0] == node
