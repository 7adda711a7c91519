"""A Claude Agent SDK transcript's lines as the Claude Code importer's tree.

The lines of one store key are turned into :class:`~sesstree.interop.tree.Entry` records by
the same steps :func:`sesstree.interop.claude.import_claude` takes for a file (split replies
merged, the newest reply kept raw while it may still stream, compactions linked under the
entry they continue, records without a ``uuid`` spliced in), so the same lines give the same
nodes, node for node.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

# The importer's own steps, so that the store and ``sess import`` cannot drift apart.
from ..interop.claude import _merge_split_replies, _reply_in_progress, claude_entries
from ..interop.jsonl import Record
from ..interop.tree import Tree, build_tree

__all__ = ["Line", "Transcript", "build_lines_tree", "in_order", "key_order", "stored_raw"]

class Line(msgspec.Struct):
    """One appended line: ``raw`` is the record its content node holds, ``final`` what
    ``load`` gives back, ``order`` the key order of its message content (:func:`key_order`)."""

    raw: dict[str, Any]
    final: dict[str, Any]
    order: Any = None
    #: Its place in the records the key's tree is built from (:class:`Transcript`).
    at: int = -1
    #: The node that holds its record (None: the index holds it).
    ref: str | None = None


class Transcript(msgspec.Struct):
    """A key's lines as ``load`` gives them, and the records its tree is built from.

    The two are one list but for a fork: its tree is built from its source's records up to
    the last line it copied (records without a uuid, sidechains and progress included, which
    the SDK leaves out of a fork) and then its own, so that the copied stretch is the source's
    nodes, node for node; its lines are the copies.
    """

    lines: list[Line] = msgspec.field(default_factory=list)
    tree: list[Line] = msgspec.field(default_factory=list)
    #: A fork's source, whose lines its copies name by position, and the source's session id.
    source: Transcript | None = None
    source_id: str | None = None
    _positions: dict[str, int] | None = None

    def add(self, line: Line) -> None:
        """Append a line of the key's own."""
        line.at = len(self.tree)
        self.lines.append(line)
        self.tree.append(line)
        self._positions = None

    def add_copy(self, line: Line) -> None:
        """Append a line whose record is one of the source's, already in :attr:`tree`."""
        self.lines.append(line)
        self._positions = None

    def position(self, uuid: str) -> int | None:
        """Where the line with this uuid is in :attr:`lines` (the first such), or None."""
        if self._positions is None:
            self._positions = {}
            for i, ln in enumerate(self.lines):
                u = ln.final.get("uuid")
                if isinstance(u, str):
                    self._positions.setdefault(u, i)
        return self._positions.get(uuid)


def key_order(line: dict[str, Any]) -> Any:
    """The order of the keys in the line's ``message.content`` where it is not sorted, or None.

    A node keeps its data with sorted keys; the importer derives a tool call's ``arguments``
    (and the text of an odd block) as JSON in the file's key order. To derive the same events
    from a stored line when the tree is rebuilt, the order is kept beside it: for each dict
    ``[keys, {key: order of its value}]``, for a list ``[None, {index: order}]``.
    """
    message = line.get("message")
    return _skeleton(message.get("content")) if isinstance(message, dict) else None


def _skeleton(value: Any) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        subs = {k: sk for k in keys if (sk := _skeleton(value[k])) is not None}
        return [keys, subs] if keys != sorted(keys) or subs else None
    if isinstance(value, list):
        subs = {str(i): sk for i, x in enumerate(value) if (sk := _skeleton(x)) is not None}
        return [None, subs] if subs else None
    return None


def in_order(line: Line) -> dict[str, Any]:
    """The line's record with its message content in the key order it was appended in."""
    message = line.raw.get("message")
    if line.order is None or not isinstance(message, dict):
        return line.raw
    return {**line.raw, "message": {**message, "content": _ordered(message.get("content"),
                                                                   line.order)}}


def _ordered(value: Any, skeleton: Any) -> Any:
    if skeleton is None:
        return value
    keys, subs = skeleton
    if isinstance(value, dict) and keys is not None and set(keys) == set(value):
        return {k: _ordered(value[k], subs.get(k)) for k in keys}
    if isinstance(value, list):
        return [_ordered(x, subs.get(str(i))) for i, x in enumerate(value)]
    return value


def stored_raw(line: dict[str, Any], session_id: str) -> tuple[dict[str, Any], bool]:
    """The record a line's node holds, as the importer keeps it: without ``sessionId`` when
    the line has a uuid and is the key's own session's (a resumed copy then dedupes onto the
    original). The flag says it was taken out."""
    if isinstance(line.get("uuid"), str) and line.get("sessionId") == session_id:
        return {k: v for k, v in line.items() if k != "sessionId"}, True
    return line, False


def build_lines_tree(raws: Sequence[dict[str, Any]], links: dict[str, str], where: str) -> Tree:
    """The importer's tree of these records (file order); ``links`` translates a remapped
    ``parentUuid``/``logicalParentUuid`` into the uuid of the record it names."""
    records = [Record(i + 1, _linked(r, links)) for i, r in enumerate(raws)]
    merged, silent = _merge_split_replies(records)
    # A store key is always live: the session may go on, so its newest reply stays raw while
    # it has no stop_reason, as the importer does for a file written in the last minutes.
    pending = _reply_in_progress(records)
    if pending is not None:
        silent.add(pending[0])
    entries = claude_entries(records, raws, merged, silent)
    return build_tree(entries, Path(where))


def _linked(raw: dict[str, Any], links: dict[str, str]) -> dict[str, Any]:
    if not links:
        return raw
    moved = {f: links[v] for f in ("parentUuid", "logicalParentUuid")
             if isinstance(v := raw.get(f), str) and v in links}
    return {**raw, **moved} if moved else raw
