"""How the SQLite and PostgreSQL backends lay what is kept beside refs into their ``meta``
table of text keys and values. Only these backends see the keys: the seam is typed
(:class:`~sesstree.store.base.SessionMeta`, HEAD, :class:`~sesstree.store.base.StoreFormat`).

- ``session:NAME``: a session's metadata (:func:`~sesstree.store.base.encode_session_meta`);
- ``import-source:NAME``: ``FORMAT:PATH``, the provenance stores kept before it moved into
  the session's metadata; read, and dropped when the session's metadata is next written;
- ``watch:PATH``: how far ``sess watch`` read the file at PATH
  (:func:`~sesstree.store.base.encode_watch_mark`);
- ``HEAD``: a local store's HEAD; ``format`` and ``ids``: the store's format and id scheme.
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import SessionMeta, WatchMark, decode_session_meta, decode_watch_mark

__all__ = ["HEAD", "LEGACY", "SESSION", "WATCH", "session_meta_of", "watch_marks_of"]

SESSION = "session:"
WATCH = "watch:"
LEGACY = "import-source:"
HEAD = "HEAD"


def session_meta_of(rows: Iterable[tuple[str, str]]) -> dict[str, SessionMeta]:
    """The sessions' metadata held by ``rows`` of ``session:`` and ``import-source:`` keys."""
    docs: dict[str, str] = {}
    legacy: dict[str, str] = {}
    for key, value in rows:
        if key.startswith(SESSION):
            docs[key[len(SESSION):]] = value
        elif key.startswith(LEGACY):
            legacy[key[len(LEGACY):]] = value
    out: dict[str, SessionMeta] = {}
    for name in docs.keys() | legacy.keys():
        meta = decode_session_meta(docs.get(name), legacy.get(name))
        if meta is not None:
            out[name] = meta
    return out


def watch_marks_of(rows: Iterable[tuple[str, str]]) -> dict[str, WatchMark]:
    """The watch marks held by ``rows`` of ``watch:`` keys, by path (unreadable rows left out)."""
    out: dict[str, WatchMark] = {}
    for key, value in rows:
        if key.startswith(WATCH) and (mark := decode_watch_mark(value)) is not None:
            out[key[len(WATCH):]] = mark
    return out
