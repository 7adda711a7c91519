"""The writes the web view allows (rename, delete, tag, untag), shared by the JSON API and the
pages' forms, so both check the same things and say the same one line."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidRefNameError
from ..repo.store import Store

__all__ = ["ACTIONS", "perform"]

ACTIONS = ("rename", "delete", "tag", "untag")


def _field(fields: Mapping[str, object], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRefNameError(f"missing field {key!r}")
    return value.strip()


def perform(store: Store, action: str, fields: Mapping[str, object]) -> tuple[str, str]:
    """Do ``action`` with ``fields``; returns ``(what was done, where to look next)``.

    Raises the store's errors (unknown session, name taken, bad name) unchanged.
    """
    if action == "rename":
        old, new = _field(fields, "session"), _field(fields, "new")
        store.rename_session(old, new)
        return f"renamed session {old} to {new}", f"/session/{new}"
    if action == "delete":
        name = _field(fields, "session")
        head = store.delete_session(name)
        return f"deleted session {name} (was at {head[:12]})", f"/reflog/{name}"
    if action == "tag":
        name, rev = _field(fields, "name"), _field(fields, "rev")
        target = store.tag(name, rev)
        return f"tagged {target[:12]} as {name}", f"/node/{target}"
    if action == "untag":
        name = _field(fields, "name")
        target = store.delete_tag(name)
        return f"deleted tag {name} (was at {target[:12]})", f"/node/{target}"
    raise InvalidRefNameError(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
