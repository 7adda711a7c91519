"""A session's metadata beside its ref: a JSON object (``NAME.meta.json`` on import/export)
and, apart from it, where the session was imported from. Neither is hashed nor part of a node.

The functions take the backend; :class:`~sesstree.repo.store.Store` runs the writes in one of
its batches, so that the read of the other half and the write are one transaction.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import InvalidEventError
from ..store.base import PROVENANCE_KEY, Backend, ImportOrigin, SessionMeta
from ..store.storable import meta_field_problem

__all__ = ["checked_meta", "meta_fields", "write_fields", "write_origin"]


def checked_meta(name: str, meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``meta`` as it will be stored (a JSON object through a JSON round trip), or None.

    Raises:
        InvalidEventError: ``meta`` is not a JSON object, is not valid Unicode, or holds the
            key sesstree keeps for import provenance.
    """
    if meta is None:
        return None
    try:
        meta = msgspec.json.decode(msgspec.json.encode(meta))
    except UnicodeEncodeError:  # a lone surrogate: say where (see store.storable)
        where = meta_field_problem(meta) if isinstance(meta, dict) else None
        raise InvalidEventError(f"session metadata of {name!r}: "
                                f"{where or 'it is not valid Unicode'}") from None
    except (TypeError, msgspec.EncodeError, OverflowError) as exc:
        raise InvalidEventError(f"session metadata must be JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise InvalidEventError("session metadata must be a JSON object")
    if PROVENANCE_KEY in meta:
        raise InvalidEventError(f"session metadata key {PROVENANCE_KEY!r} is sesstree's "
                                "own: set_session_origin() records an import")
    return meta


def meta_fields(backend: Backend, name: str) -> dict[str, Any] | None:
    """The metadata fields of session ``name`` (a copy), or None when it has none."""
    meta = backend.get_session_meta(name)
    return dict(meta.fields) if meta is not None and meta.fields else None


def write_fields(backend: Backend, name: str, fields: dict[str, Any] | None) -> None:
    """Replace the fields of session ``name`` (checked: :func:`checked_meta`), keeping its
    import origin."""
    old = backend.get_session_meta(name)
    origin = old.origin if old is not None else None
    backend.set_session_meta(name, SessionMeta(fields or {}, origin))


def write_origin(backend: Backend, name: str, origin: ImportOrigin | None) -> None:
    """Replace the import origin of session ``name``, keeping its fields."""
    old = backend.get_session_meta(name)
    fields = old.fields if old is not None else {}
    backend.set_session_meta(name, SessionMeta(fields, origin))
