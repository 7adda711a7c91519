"""Which file each imported session came from, kept in the session's own metadata.

A session an import created (or was told to take with ``--as``) carries, in its metadata, the
key ``sesstree.import``: ``{"format": F, "source": ABSOLUTE PATH, "main": true|false}``
(``main``: the file's main line, not one of its other branches). Session metadata moves with
``sess branch -m`` and goes with ``sess branch -d``, so provenance follows the session: a
re-import finds its earlier import wherever it landed (``NAME-2``, a renamed session), and a
later unrelated session that happens to take a deleted one's name belongs to nobody.

Stores written by earlier versions kept ``import-source:NAME`` = ``F:PATH`` beside the
metadata, keyed by name. Those are still read, but trusted only while the session's reflog
shows that import since the session was last created (so a name deleted and reused by hand
does not inherit it); the key is replaced by the new one the next time the import lands there.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import msgspec

from ..repo import SESSIONS, Store

__all__ = ["LEGACY_PREFIX", "PROVENANCE_KEY", "Origin", "Provenance"]

#: The key of the session metadata that holds an import's provenance.
PROVENANCE_KEY = "sesstree.import"
#: Where earlier versions kept provenance: ``import-source:NAME`` = ``FORMAT:PATH``.
LEGACY_PREFIX = "import-source:"
_META_PREFIX = "session:"
_BRANCH = re.compile(r"/branch-\d+$")


class Origin(msgspec.Struct, frozen=True):
    """What a session was imported from: a file read as a format, its main line or not."""

    format: str
    source: str
    main: bool = True


def _origin_in(raw: str) -> Origin | None:
    try:
        meta = msgspec.json.decode(raw)
        found = meta.get(PROVENANCE_KEY) if isinstance(meta, dict) else None
        return msgspec.convert(found, Origin) if isinstance(found, dict) else None
    except (msgspec.DecodeError, RecursionError):  # metadata someone else wrote: not ours
        return None


class Provenance:
    """The provenance of every session of a store, read once (two reads) per import run.

    Kept up to date by :meth:`claim` as the run lands sessions, so the files of one run see
    each other's landings.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._of: dict[str, Origin] = {}
        backend = store.backend
        names = {ref.name[len(SESSIONS):] for ref in backend.list_refs(SESSIONS)}
        for key, raw in backend.list_meta(_META_PREFIX).items():
            name = key[len(_META_PREFIX):]
            origin = _origin_in(raw) if name in names else None
            if origin is not None:
                self._of[name] = origin
        for key, owner in backend.list_meta(LEGACY_PREFIX).items():
            name = key[len(LEGACY_PREFIX):]
            if name in names and name not in self._of:
                origin = self._legacy(name, owner)
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
            if head is not None and path[-1] in set(self.store.backend.chain(head).ids):
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
                    rest = store.get_session_meta(other) or {}
                    if rest.pop(PROVENANCE_KEY, None) is not None:
                        store.set_session_meta(other, rest or None)
                    store.backend.set_meta(LEGACY_PREFIX + other, None)
                    del self._of[other]
        base = dict(meta) if meta is not None else (store.get_session_meta(name) or {})
        base[PROVENANCE_KEY] = msgspec.to_builtins(origin)
        store.set_session_meta(name, base)
        store.backend.set_meta(LEGACY_PREFIX + name, None)
        self._of[name] = origin
