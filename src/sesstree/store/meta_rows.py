"""How the SQLite and PostgreSQL backends lay what is kept beside refs into their ``meta``
table of text keys and values. Only these backends see the keys: the seam is typed
(:class:`~sesstree.store.base.SessionMeta`, HEAD, :class:`~sesstree.store.base.StoreFormat`).

- ``session:NAME``: a session's metadata (:func:`~sesstree.store.base.encode_session_meta`);
- ``import-source:NAME``: ``FORMAT:PATH``, the provenance stores kept before it moved into
  the session's metadata; read, and dropped when the session's metadata is next written;
- ``HEAD``: a local store's HEAD; ``format`` and ``ids``: the store's format and id scheme.
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import SessionMeta, decode_session_meta

__all__ = ["HEAD", "LEGACY", "SESSION", "session_meta_of"]

SESSION = "session:"
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
