"""Which file each imported session came from, kept in the session's own metadata.

A session an import created (or was told to take with ``--as``) carries, beside its ref, an
:class:`~sesstree.store.base.ImportOrigin`: ``format``, ``source`` (an absolute path) and
``main`` (the file's main line, not one of its other branches); ``Store.session_origin(NAME)``
reads it. Session metadata moves with ``sess branch -m`` and goes with ``sess branch -d``, so
provenance follows the session: a re-import finds its earlier import wherever it landed
(``NAME-2``, a renamed session), and a later unrelated session that happens to take a deleted
one's name belongs to nobody.

Stores written by earlier versions kept ``FORMAT:PATH`` apart, keyed by name (the seam gives
it as ``SessionMeta.legacy_origin``). It is still read, but trusted only while the session's
reflog shows that import since the session was last created (so a name deleted and reused by
hand does not inherit it); it is replaced the next time the import lands there.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from ..node import SESSIONS, short_name
from ..repo.store import Store
from ..store.base import PROVENANCE_KEY, ImportOrigin

__all__ = ["PROVENANCE_KEY", "Origin", "Provenance", "without_provenance"]
_BRANCH = re.compile(r"/branch-\d+$")


#: What a session was imported from (the seam's type, under the name importers use).
Origin = ImportOrigin


class Provenance:
    """The provenance of every session of a store, read once (two reads) per import run.

    Kept up to date by :meth:`claim` as the run lands sessions, so the files of one run see
    each other's landings.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._of: dict[str, Origin] = {}
        names = {short_name(ref.name) for ref in store.refs(SESSIONS)}
        for name, meta in store.session_metas().items():
            if name not in names:
                continue
            origin = meta.origin
            if origin is None and meta.legacy_origin is not None:
                origin = self._legacy(name, meta.legacy_origin)
            if origin is not None:
                self._of[name] = origin

    def _legacy(self, name: str, owner: str) -> Origin | None:
        fmt, sep, source = owner.partition(":")
        if not sep:
            return None
        entries = self.store.reflog(name)
        born = max((i for i, e in enumerate(entries) if e.new is None), default=-1)
        if not any(e.reason == f"import: {source}" or e.reason.startswith(f"import: {source} ")
                   for e in entries[born + 1:]):
            return None  # the name was deleted and made again since that import
        return Origin(fmt, source, main=_BRANCH.search(name) is None)

    def origin_of(self, name: str) -> Origin | None:
        """Where session ``name`` was imported from, or None (made by hand, or unknown)."""
        return self._of.get(name)

    def sessions_of(self, origin: Origin) -> list[str]:
        """The sessions holding ``origin`` (its file, format and role), sorted by name."""
        return sorted(name for name, o in self._of.items() if o == origin)

    def find(self, origin: Origin, path: list[str], *, exclude: Collection[str] = ()) -> str | None:
        """The session that holds ``origin`` for the history ``path`` (node ids, root first).

        A file's main line is one session. Its other branches are matched by content, since a
        file that grows can number them differently: a session of this file whose head is on
        ``path`` (it fast-forwards) or that already holds all of ``path``.
        """
        held = [n for n in self.sessions_of(origin) if n not in exclude]
        if origin.main or not held:
            return held[0] if held else None
        on_path = set(path)
        heads = {n: self.store.session_head(n) for n in held}
        for name in held:
            if heads[name] in on_path:
                return name
        for name in held:
            head = heads[name]
            if head is not None and path[-1] in set(self.store.chain_at(head).ids):
                return name
        return None

    def claim(self, name: str, origin: Origin, meta: dict[str, Any] | None) -> None:
        """Record that session ``name`` holds ``origin``, with ``meta`` (default: the session's
        current metadata) as the rest of its metadata.

        A file's main line is held by one session: any other holding it loses its provenance
        (it keeps its history and the rest of its metadata, and belongs to nobody after).
        """
        store = self.store
        if origin.main:
            for other in self.sessions_of(origin):
                if other != name:
                    store.set_session_origin(other, None)
                    del self._of[other]
        if meta is not None:
            store.set_session_meta(name, without_provenance(meta))
        store.set_session_origin(name, origin)
        self._of[name] = origin


def without_provenance(meta: dict[str, Any]) -> dict[str, Any] | None:
    """An import's metadata without the provenance key a file exported by an earlier sesstree
    may carry (provenance is the store's own, about this machine's files)."""
    rest = {k: v for k, v in meta.items() if k != PROVENANCE_KEY}
    return rest or None
