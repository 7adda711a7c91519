"""What every importer shares: landing a history on a session without ever losing one."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError, InvalidEventError
from ..events import message_type
from ..node import Node, NodeId, make_node, session_ref
from ..repo.store import Store
from .provenance import Origin, Provenance, without_provenance

__all__ = ["ImportResult", "free_name", "land", "message_chain", "write_new"]


class ImportResult(msgspec.Struct):
    """What importing one history did."""

    source: str
    session: str
    #: created, fast-forward, up to date, ahead (the session already has more), rewritten
    #: (the file was edited), moved (it went on from an earlier point), replaced (``--force``),
    #: empty, failed, skipped (in a folder: an empty file or one of no known format)
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
    """Write exported files, each atomically; unless ``force``, refuse (before writing any) to
    replace one. Never writes through a symbolic link.

    An export's default name is the session's, which is often the very file it was imported
    from: overwriting it silently could replace a tool's transcript with another format. Each
    file is written to a temporary file in its folder, synced, then renamed over the target,
    so a failed export (a full disk) leaves the old file whole. A link at the target, even a
    dangling one, is refused rather than followed: writing through it would create or replace
    a file the user never named.

    Raises:
        InputError: a target exists (without ``force``), is a link, a folder or not a regular
            file.
        OSError: writing failed (``filename`` is the target); nothing was replaced.
    """
    for path, _ in files:
        _check_target(path, force)
    temps: list[str] = []
    try:
        for path, data in files:
            temps.append(_write_temp(path, data))
        for (path, _), temp in zip(files, temps, strict=True):
            try:
                os.replace(temp, path)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        for temp in temps:
            if os.path.lexists(temp):
                os.unlink(temp)
    return [path for path, _ in files]


def _check_target(path: Path, force: bool) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    if stat.S_ISLNK(mode):
        raise InputError("is a symbolic link; export never writes through one (remove it or "
                         "give another path)", path=str(path))
    if stat.S_ISDIR(mode):
        raise InputError("is a folder", path=str(path))
    if not stat.S_ISREG(mode):
        raise InputError("is not a regular file (use -o - for standard output)", path=str(path))
    if not force:
        raise InputError("already exists; pass --force to overwrite it", path=str(path))


def _write_temp(path: Path, data: bytes) -> str:
    """Write ``data`` to a new temporary file beside ``path``; its name."""
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp makes it private; an export gets the mode a new file would get (or the
            # mode of the file it replaces).
            try:
                keep = os.stat(path).st_mode & 0o7777
            except OSError:
                keep = 0o666 & ~_umask()
            os.fchmod(f.fileno(), keep)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        os.unlink(temp)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    return temp


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def land(
    store: Store,
    base: str,
    nodes: Sequence[Node],
    *,
    origin: Origin,
    owners: Provenance,
    explicit_name: bool = False,
    force: bool = False,
    meta: dict[str, Any] | None = None,
    file_nodes: Collection[NodeId] | None = None,
    exclude: Collection[str] = (),
) -> ImportResult:
    """Store ``nodes`` (parents first, the last one the head) on the session that holds
    ``origin``, or else on ``base``.

    The session: the one that holds this file's import (``owners``), wherever it landed (a
    renamed session, ``NAME-2``); else ``base``. With ``explicit_name`` (``--as``), ``base``.

    - a new session is created;
    - a session the history extends is fast-forwarded (only the new nodes are written);
    - a session that already contains the history is left alone ("ahead" or "up to date");
    - a session whose history differs: if it holds this import, it moves to the new path
      ("rewritten" when the file was edited, "moved" when it only grew from an earlier point),
      the old head kept in the reflog. Any other session is never taken over: the history
      lands on a fresh name (``base-2``, ...), or with ``explicit_name`` the import is refused
      unless ``force`` ("replaced").

    ``meta`` (the rest of the session metadata) is stored with the provenance when the session
    is, or becomes, this import's. Everything happens in one transaction.

    Raises:
        InputError: ``explicit_name`` names a session of another history, without ``force``.
    """
    source = origin.source
    if not nodes:
        return ImportResult(source, base, "empty", 0, 0)
    target = nodes[-1].id
    name = base
    found = None
    if not explicit_name:
        found = owners.find(origin, [n.id for n in nodes], exclude=exclude)
        name = found or base
    with store.batch():
        stored = store.has([n.id for n in nodes])
        new = len(nodes) - len(stored)
        # Only what is not stored yet is encoded and sent: a re-import, and a watch that lands
        # a growing file again at each look, write only the new records' nodes.
        store.write([n for n in nodes if n.id not in stored])
        path = [n.id for n in nodes]
        holder = owners.origin_of(name)
        # A file's other branches all share one origin: one of them is this leaf's only if
        # it was matched by content, or a renumbered branch would move another one's session.
        ours = holder == origin and (origin.main or name == found)
        head = store.session_head(name)
        outcome = _relation(store, head, target, path)
        if (head is not None and not ours and holder is not None and not explicit_name
                and outcome not in ("up to date", "ahead")):
            # Another import holds the name: never move it. (One that already holds this
            # history is reported as it is: a copy of a file lands nowhere new.)
            name, head, outcome = free_name(store, base), None, "created"
        if outcome == "differs":
            if ours:
                outcome = "moved" if file_nodes is not None and head in file_nodes else "rewritten"
            elif explicit_name and force:
                outcome = "replaced"
            elif explicit_name:
                what = (f"holds the import of {holder.source}" if holder is not None
                        else "was not imported from this file")
                raise InputError(
                    f"session {name!r} {what} and its history differs; pass --force to replace "
                    "it (its head stays in the reflog) or --as another name", path=source)
            else:
                name, head, outcome = free_name(store, base), None, "created"
        claim = ours or outcome in ("created", "replaced") or (
            explicit_name and (holder is None or force))
        reason = {
            "created": f"import: {source}",
            "fast-forward": f"import: {source} grew" if ours else
                            f"import: {source} extends this session",
            "rewritten": f"import: {source} was edited since its last import; "
                         "previous head kept in this reflog",
            "moved": f"import: {source} went on from an earlier point; "
                     "previous head kept in this reflog",
            "replaced": f"import: {source} replaced this session's history (--force); "
                        "previous head kept in this reflog",
        }.get(outcome)
        if reason is not None:
            store.move_ref(session_ref(name), head, target, reason)
        if claim:
            owners.claim(name, origin, meta)
        elif reason is not None and holder is None and meta is not None:
            store.set_session_meta(name, without_provenance(meta))
    return ImportResult(source, name, outcome, len(path), new, target)


def _relation(store: Store, head: NodeId | None, target: NodeId, path: Sequence[NodeId]) -> str:
    """created, up to date, fast-forward, ahead (the session has more) or differs."""
    if head is None:
        return "created"
    if head == target:
        return "up to date"
    if head in set(path):
        return "fast-forward"
    if target in set(store.chain_at(head).ids):
        return "ahead"
    return "differs"


def free_name(store: Store, name: str) -> str:
    """The first free ``NAME-N`` (N from 2); for ``X/branch-K``, the next free ``X/branch-N``."""
    stem, n = f"{name}-", 2
    if (m := _BRANCH_NAME.fullmatch(name)) is not None:
        stem, n = m.group(1), int(m.group(2)) + 1
    while store.has_session(f"{stem}{n}"):
        n += 1
    return f"{stem}{n}"


_BRANCH_NAME = re.compile(r"(.*/branch-)(\d+)")
