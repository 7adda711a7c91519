"""Where a session forked: the session it came from and the last node they share, for the mark
on its page.

The session's first reflog entry says what it was created from (``branch: created from
quest-1~3``); the node it parted at is the last one the two share, as :mod:`sesstree.related`
reads it. A session created any other way (the proxy's forks, an import) is compared with the
sessions listed first (bounded, as the node page is): the one created before it that shares the
most of its history is where it came from.
"""

from __future__ import annotations

import msgspec

from ..node import NodeId
from ..related import shared_depth
from ..repo import Store
from ..revisions import session_name_of
from .catalog import Filter, list_sessions
from .diffing import bounded_diff
from .paths import ID_BYTES, PathCache, depth_of, id_at, node_of

__all__ = ["CHECKED", "READ", "Fork", "fork_of"]

#: Sessions compared at most when the reflog does not name the source, and the events read
#: at most to do so (paths already cached cost nothing).
CHECKED = 100
READ = 20_000
_CREATED = "branch: created from "


class Fork(msgspec.Struct, frozen=True):
    """Session ``session`` and this one part after node ``id`` (``depth`` events in)."""

    session: str
    id: NodeId
    depth: int
    exists: bool = True  # False: the source session has since been deleted or renamed


def fork_of(store: Store, paths: PathCache, name: str, head: NodeId) -> Fork | None:
    """Where session ``name`` (at ``head``) forked from another session, if it did."""
    _, total = store.reflog_page(name, 1, 0)
    if not total:
        return None
    oldest, _ = store.reflog_page(name, 1, total - 1)
    created = oldest[0] if oldest else None
    if created is not None and created.old is None and created.reason.startswith(_CREATED):
        rev = created.reason[len(_CREATED):]
        source = session_name_of(store, rev) if rev not in ("HEAD", "@") else name
        other = store.session_head(source) if source != name else None
        if other is not None:
            # A bounded read, whatever the two sessions' lengths (as the diff page reads).
            d = bounded_diff(store, head, other, shown=0)
            if d.base is not None:
                return Fork(source, d.base.id, depth_of(store, d.base.id))
        elif source != name and created.new is not None and store.reflog_page(source, 1, 0)[1]:
            # Deleted (its reflog remains): the node it was created at, if still on the path.
            depth = depth_of(store, created.new)
            back = depth_of(store, head) - depth
            if back >= 0 and store.backend.chain(head, back + 1).ids[0] == created.new:
                return Fork(source, created.new, depth, exists=False)
    return _nearest(store, paths, name, paths.path(head, name),
                    created.time if created else None)


def _nearest(store: Store, paths: PathCache, name: str, mine: bytes,
             born: float | None) -> Fork | None:
    """The session created before ``name`` that shares the most of its history."""
    best: tuple[int, float, str] | None = None
    read = 0  # events read for paths that were not cached
    for s in list_sessions(store, Filter(), 0, CHECKED).sessions:
        if s.name == name:
            continue
        if read >= READ and not paths.cached(s.head):
            break
        if not paths.cached(s.head):
            read += store.depth(s.head)
        depth = _shared(store, mine, paths.path(s.head, s.name))
        if not depth or (best is not None and depth < best[0]):
            continue
        _, total = store.reflog_page(s.name, 1, 0)
        first, _ = store.reflog_page(s.name, 1, total - 1) if total else ([], 0)
        since = first[0].time if first else 0.0
        if born is not None and since >= born:
            continue  # created after this one: it forked from here, not this from it
        if best is None or (depth, -since) > (best[0], -best[1]):
            best = (depth, since, s.name)
    if best is None:
        return None
    return Fork(best[2], id_at(mine, best[0] - 1), best[0])


def _shared(store: Store, a: bytes, b: bytes) -> int:
    """How many events paths ``a`` and ``b`` share (see :mod:`sesstree.related`). Equal ids at
    one depth mean equal paths up to it, so the common prefix is found by bisection."""
    na, nb = len(a) // ID_BYTES, len(b) // ID_BYTES
    lo, hi = 0, min(na, nb)  # the common prefix is lo events long, at most hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[(mid - 1) * ID_BYTES: mid * ID_BYTES] == b[(mid - 1) * ID_BYTES: mid * ID_BYTES]:
            lo = mid
        else:
            hi = mid - 1
    return shared_depth(lo, na, nb, lambda depth: node_of(store, id_at(a, depth - 1)).type)
