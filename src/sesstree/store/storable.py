"""What text a store can hold: checked at the storage seam, the same way on every engine.

Every string that crosses :mod:`sesstree.store.base` as text (ref names, reflog reasons, HEAD,
event types, a session's metadata and import origin) must come back exactly as it went in,
on every engine. Two kinds of text cannot:

- a lone surrogate (``"\\udc80"``, what Python makes of bytes that are not UTF-8): no engine
  can encode it, so it is refused everywhere, in every field;
- a NUL (U+0000): a PostgreSQL text value cannot hold it, so it is refused in every plain
  text field on every engine, SQLite and memory included. A session's metadata is JSON, which
  writes a NUL as ``\\u0000``: there it is kept, as in event data.

Each refusal is raised before anything is written, naming the field: an
:class:`~sesstree.errors.InvalidRefNameError` for a ref name or HEAD, an
:class:`~sesstree.errors.InvalidEventError` for the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import InvalidEventError, InvalidRefNameError
from .base import RawNode, RefUpdate, SessionMeta, encode_session_meta

__all__ = ["check_commit", "check_head", "check_ref", "check_session_meta", "check_text",
           "meta_field_problem", "storable", "text_problem"]


def text_problem(value: str, *, nul: bool = False) -> str | None:
    """Why ``value`` cannot be stored as text (None: it can). ``nul``: a NUL is fine."""
    if value.isascii():
        return None if nul or "\x00" not in value else (
            f"contains a NUL character (U+0000) at character {value.index(chr(0))}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        return (f"is not valid Unicode: a lone surrogate U+{ord(value[exc.start]):04X} at "
                f"character {exc.start}")
    if not nul and "\x00" in value:
        return f"contains a NUL character (U+0000) at character {value.index(chr(0))}"
    return None


def storable(value: str) -> bool:
    """True if every store can hold ``value`` as text (so a read by it can find something)."""
    return (value.isascii() and "\x00" not in value) or text_problem(value) is None


def check_text(value: str, field: str) -> str:
    """``value``, or InvalidEventError naming ``field`` if no store can hold it as text."""
    problem = text_problem(value)
    if problem is not None:
        raise InvalidEventError(f"{field} {problem}")
    return value


def check_ref(name: str) -> str:
    """``name``, or InvalidRefNameError if no store can hold it as a ref name."""
    problem = text_problem(name)
    if problem is not None:
        raise InvalidRefNameError(f"invalid ref name {name!a}: it {problem}")
    return name


def check_head(value: str) -> str:
    """``value`` (``ref: sessions/NAME`` or an id), or InvalidRefNameError."""
    problem = text_problem(value)
    if problem is not None:
        raise InvalidRefNameError(f"invalid HEAD {value!a}: it {problem}")
    return value


def check_commit(nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
    """Refuse a commit whose event types, ref names or reflog reasons cannot be stored."""
    # Inline fast path (every append comes here): ASCII text with no NUL is always fine.
    for node in nodes:
        type = node.type
        if not type.isascii() or "\x00" in type:
            check_text(type, "event type")
    for u in updates:
        name, reason = u.name, u.reason
        if not name.isascii() or "\x00" in name:
            check_ref(name)
        if not reason.isascii() or "\x00" in reason:
            check_text(reason, f"reflog reason of {name}")


def check_session_meta(name: str, meta: SessionMeta | None) -> str | None:
    """The text a store keeps for ``meta`` of session ``name`` (None: nothing), or
    InvalidEventError naming the field that cannot be stored."""
    check_ref(name)
    if not meta:
        return None
    if meta.origin is not None:
        check_text(meta.origin.format, f"import format of session {name!r}")
        check_text(meta.origin.source, f"import source of session {name!r}")
    try:
        return encode_session_meta(meta)
    except UnicodeEncodeError:
        raise InvalidEventError(f"session metadata of {name!r}: {_bad_field(meta.fields)}"
                                ) from None


def meta_field_problem(fields: dict[str, Any]) -> str | None:
    """Where a metadata document has text no store can hold (None: nowhere)."""
    try:
        msgspec.json.encode(fields)
    except UnicodeEncodeError:
        return _bad_field(fields)
    return None


def _bad_field(fields: dict[str, Any]) -> str:
    """The first string in ``fields`` that is not valid Unicode, with its path. Iterative:
    a document nested deeply cannot exhaust the stack."""
    stack: list[tuple[str, Any]] = [("", fields)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value, nul=True)
            if problem is not None:
                return f"field {path or 'value'} {problem}"
        elif isinstance(value, dict):
            items = [(f"{path}[{key!a}]" if path else ascii(key), key, item)
                     for key, item in value.items()]
            for where, key, _ in items:
                problem = text_problem(key, nul=True) if isinstance(key, str) else None
                if problem is not None:
                    return f"key {where} {problem}"
            stack.extend((where, item) for where, _, item in reversed(items))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return "it holds text that is not valid Unicode"
