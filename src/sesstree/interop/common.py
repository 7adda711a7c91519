"""What every importer shares: landing a history on a session without ever losing one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError, InvalidEventError
from ..events import message_type
from ..node import Node, NodeId, make_node
from ..repo import Store
from ..store.base import RefUpdate

__all__ = ["ImportResult", "land", "message_chain", "write_new"]


class ImportResult(msgspec.Struct):
    """What importing one history did."""

    source: str
    session: str
    #: created, fast-forward, up to date, ahead (the session already has more), rewritten
    outcome: str
    events: int
    new_nodes: int
    head: NodeId | None = None
    problems: list[str] = msgspec.field(default_factory=list)


def message_chain(messages: Sequence[dict[str, Any]], path: Path | None = None,
                  lines: Sequence[int] | None = None) -> list[Node]:
    """One node per chat message, each the child of the one before: a plain history.

    Raises:
        InputError: a message the store cannot hold (nested too deep, an integer past 64
            bits), naming ``path`` and the message's line (or its index when no ``lines``).
    """
    nodes: list[Node] = []
    parent = None
    for i, message in enumerate(messages):
        try:
            node = make_node(parent, message_type(message), message)
        except InvalidEventError as exc:
            where = str(path) if path is not None else None
            if lines is not None:
                raise InputError(str(exc), path=where, line=lines[i]) from None
            raise InputError(f"message {i}: {exc}", path=where) from None
        nodes.append(node)
        parent = node.id
    return nodes


def write_new(files: Sequence[tuple[Path, bytes]], *, force: bool = False) -> list[Path]:
    """Write exported files; unless ``force``, refuse (before writing any) to replace one.

    An export's default name is the session's, which is often the very file it was imported
    from: overwriting it silently could replace a tool's transcript with another format.
    """
    if not force:
        for path, _ in files:
            if path.exists():
                raise InputError("already exists; pass --force to overwrite it", path=str(path))
    for path, data in files:
        path.write_bytes(data)
    return [path for path, _ in files]


def _source_key(name: str) -> str:
    return "import-source:" + name


def land(
    store: Store,
    name: str,
    nodes: Sequence[Node],
    *,
    source: str,
    explicit_name: bool,
    leaf: NodeId | None = None,
    format: str = "seed",
) -> ImportResult:
    """Store ``nodes`` (parents first) and point session ``name`` at ``leaf`` (default: the last).

    - a new session is created;
    - a session the history extends is fast-forwarded (only the new nodes are written);
    - a session that already contains the history is left alone ("ahead" or "up to date");
    - a session whose history differs is moved to the new path, the old head kept in the
      reflog, but only if it came from the same source read as the same ``format``, or the
      name was given explicitly;
      otherwise the history lands on a fresh name (``name-2``, ...): an import never takes
      over a session that belongs to something else.

    Everything happens in one transaction.
    """
    if not nodes:
        return ImportResult(source, name, "empty", 0, 0)
    target = leaf if leaf is not None else nodes[-1].id
    # What a session belongs to: the file and the format it was read as, so reading the same
    # file as another format lands beside the first import instead of replacing it.
    owner = f"{format}:{source}"
    backend = store.backend
    with store.batch():
        new = len(nodes) - len(backend.has([n.id for n in nodes]))
        store.write(nodes)
        path = store.backend.chain(target).ids
        head = store.session_head(name)
        outcome = "created"
        if head is not None:
            if head == target:
                outcome = "up to date"
            elif head in set(path):
                outcome = "fast-forward"
            elif target in set(backend.chain(head).ids):
                outcome = "ahead"
            elif explicit_name or backend.get_meta(_source_key(name)) == owner:
                outcome = "rewritten"
            else:
                name = _free_name(store, name)
                head = None
        if outcome in ("created", "fast-forward", "rewritten"):
            reason = {
                "created": f"import: {source}",
                "fast-forward": f"import: {source} grew",
                "rewritten": f"import: {source} was edited; previous head kept in this reflog",
            }[outcome]
            backend.commit([], [RefUpdate("sessions/" + name, head, target, reason)])
            backend.set_meta(_source_key(name), owner)
    return ImportResult(source, name, outcome, len(path), new, target)


def _free_name(store: Store, name: str) -> str:
    n = 2
    while store.has_session(f"{name}-{n}"):
        n += 1
    return f"{name}-{n}"
