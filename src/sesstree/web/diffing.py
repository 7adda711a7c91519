"""A diff of two revisions that reads a bounded number of events, however long they are.

Both paths are read backwards from their ends in growing windows (``Store.chain(head, n)``
reads only the newest ``n`` events) until the windows overlap at a node both hold: the last
common node. A side that added more than ``most`` events since then stops the search: the diff
is then *cut*, says how many events each side added at least, and shows the newest of each;
so is a diff whose parting follows a run of openers (see :mod:`sesstree.repo.related`) that goes
back further than that.
"""

from __future__ import annotations

from ..node import Node
from ..repo.related import is_mark
from ..repo.store import Store
from ..store.base import Chain

__all__ = ["DIFF_READ", "FIRST_WINDOW", "BoundedDiff", "bounded_diff"]

#: Events one side of a diff reads at most.
DIFF_READ = 20_000
#: Events read past the shorter side's end in the first window (it grows 4x each round).
FIRST_WINDOW = 256


class BoundedDiff:
    """The last common node (when found), how many events each side added (at least, when
    ``cut``), and the events shown of each side (oldest first)."""

    __slots__ = ("base", "cut", "most", "only_a", "only_b", "shown_a", "shown_b")

    def __init__(self, base: Node | None, only_a: int, only_b: int, shown_a: list[Node],
                 shown_b: list[Node], cut: bool, most: int) -> None:
        self.most = most  # the bound each side was read to
        self.base = base
        self.only_a = only_a
        self.only_b = only_b
        self.shown_a = shown_a
        self.shown_b = shown_b
        self.cut = cut


def _nodes(chain: Chain, start: int, stop: int) -> list[Node]:
    """Nodes ``start`` to ``stop`` (indexes into ``chain``) with their parents."""
    ids = chain.ids
    return [Node(ids[i], ids[i - 1] if i else chain.base, chain.types[i], chain.datas[i])
            for i in range(max(0, start), min(stop, len(ids)))]


def _shared(store: Store, ca: Chain, cb: Chain, common: int,
            most: int) -> tuple[int, Chain, Chain] | None:
    """The depth of the last node two histories that part after depth ``common`` share (see
    :mod:`sesstree.repo.related`), and both windows grown back far enough to hold the node after
    it (rarely needed: only a long run of records of the run before the parting does).
    None when that needs more than ``most`` events of a side (a run of openers that long)."""
    depth = common
    wa: Chain | None = ca
    while depth and wa is not None:
        at = depth - wa.start_depth
        if at < 0:
            wa = _grown(store, wa, most)
            continue
        if is_mark(wa.types[at]):
            break
        depth -= 1
    while wa is not None and max(depth, 1) < wa.start_depth:
        wa = _grown(store, wa, most)
    wb: Chain | None = cb
    while wb is not None and depth + 1 < wb.start_depth:
        wb = _grown(store, wb, most)
    return (depth, wa, wb) if wa is not None and wb is not None else None


def _grown(store: Store, chain: Chain, most: int) -> Chain | None:
    """The window read further back, within ``most`` events (None: it holds that many)."""
    if len(chain.ids) >= most:
        return None
    return store.chain(chain.ids[-1], min(2 * len(chain.ids) + FIRST_WINDOW, most))


def bounded_diff(store: Store, a: str, b: str, *, shown: int,
                 most: int | None = None) -> BoundedDiff:
    """The diff of revisions ``a`` and ``b``, reading at most ``most`` (default ``DIFF_READ``)
    events of each side.

    When the last common node is found, each side shows the first ``shown`` events it added
    after it; when the diff is cut, the newest ``shown`` of each side.
    """
    most = DIFF_READ if most is None else max(1, most)
    with store.snapshot():
        ha, hb = store.resolve(a), store.resolve(b)
        da, db = store.depth(ha), store.depth(hb)
        low = min(da, db)  # the last common node is at most this deep
        window = FIRST_WINDOW
        while True:
            want_a, want_b = da - low + window, db - low + window
            clamped = want_a > most or want_b > most
            ca = store.chain(ha, min(want_a, most, da))
            cb = store.chain(hb, min(want_b, most, db))
            # Depths both windows hold: compare from the deepest down; on one path, nodes
            # equal at one depth are equal at every smaller one.
            lo = max(ca.start_depth, cb.start_depth)
            ids_a, ids_b = ca.ids, cb.ids
            common = 0
            for depth in range(low, lo - 1, -1):
                if ids_a[depth - ca.start_depth] == ids_b[depth - cb.start_depth]:
                    common = depth
                    break
            if common or lo == 1:  # found, or both windows reach the roots: none in common
                if common < da and common < db:
                    shared = _shared(store, ca, cb, common, most)
                    if shared is None:  # openers back past the bound: each added as many
                        return BoundedDiff(None, da - common, db - common,
                                           _nodes(ca, len(ca.ids) - shown, len(ca.ids)),
                                           _nodes(cb, len(cb.ids) - shown, len(cb.ids)),
                                           cut=True, most=most)
                    common, ca, cb = shared
                base = _nodes(ca, common - ca.start_depth, common - ca.start_depth + 1)
                first_a, first_b = common + 1 - ca.start_depth, common + 1 - cb.start_depth
                return BoundedDiff(base[0] if base else None, da - common, db - common,
                                   _nodes(ca, first_a, first_a + shown),
                                   _nodes(cb, first_b, first_b + shown), cut=False, most=most)
            if clamped:
                break
            window *= 4
        # Cut: the last common node is older than both windows reach together.
        deepest = min(low, lo - 1)
        return BoundedDiff(None, da - deepest, db - deepest,
                           _nodes(ca, len(ca.ids) - shown, len(ca.ids)),
                           _nodes(cb, len(cb.ids) - shown, len(cb.ids)), cut=True, most=most)

