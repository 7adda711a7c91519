"""A Claude Agent SDK transcript's lines as the Claude Code importer's tree, and the SDK's fork
transform as a compact overlay.

The lines of one store key are turned into :class:`~sesstree.interop.tree.Entry` records by
the same steps :func:`sesstree.interop.claude.import_claude` takes for a file (split replies
merged, the newest reply kept raw while it may still stream, compactions linked under the
entry they continue, records without a ``uuid`` spliced in), so the same lines give the same
nodes, node for node.

A fork made by ``fork_session_via_store`` copies the source's transcript entries with every
``uuid`` remapped, ``sessionId`` rewritten, ``forkedFrom`` stamped and the last ``timestamp``
renewed. :func:`fork_overlay` recognises such a copy and keeps only what the SDK changed (the
new uuids, packed; a field it could not predict): the copied entries are then the source's
own records, their nodes the source's nodes.
"""

from __future__ import annotations

import base64
import uuid as uuid_mod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

# The importer's own steps, so that the store and ``sess import`` cannot drift apart.
from ..interop.claude import _entry_events, _merge_split_replies, _reply_in_progress
from ..interop.jsonl import Record
from ..interop.tree import Entry, Tree, build_tree

__all__ = [
    "FORK_DROPPED",
    "Line",
    "Transcript",
    "apply_overlay",
    "build_lines_tree",
    "fork_of",
    "fork_overlay",
    "in_order",
    "key_order",
    "stored_raw",
]

#: Fields the SDK's fork transform removes from a copied entry.
FORK_DROPPED = ("teamName", "agentName", "slug", "sourceToolAssistantUUID")


class Line(msgspec.Struct):
    """One appended line: ``raw`` is the record its content node holds, ``final`` what
    ``load`` gives back, ``order`` the key order of its message content (:func:`key_order`)."""

    raw: dict[str, Any]
    final: dict[str, Any]
    order: Any = None
    #: Its place in the records the key's tree is built from (:class:`Transcript`).
    at: int = -1


class Transcript(msgspec.Struct):
    """A key's lines as ``load`` gives them, and the records its tree is built from.

    The two are one list but for a fork: its tree is built from its source's records up to
    the last line it copied (records without a uuid, sidechains and progress included, which
    the SDK leaves out of a fork) and then its own, so that the copied stretch is the source's
    nodes, node for node; its lines are the copies.
    """

    lines: list[Line] = msgspec.field(default_factory=list)
    tree: list[Line] = msgspec.field(default_factory=list)

    def add(self, line: Line) -> None:
        """Append a line of the key's own."""
        line.at = len(self.tree)
        self.lines.append(line)
        self.tree.append(line)


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
    entries: list[Entry] = []
    last_key: str | None = None
    last_main: str | None = None
    for r, raw in zip(records, raws, strict=True):
        rec = r.data
        uuid = rec.get("uuid")
        side = bool(rec.get("isSidechain"))
        events = _entry_events(rec, raw, merged.get(uuid) if isinstance(uuid, str) else None,
                               isinstance(uuid, str) and uuid in silent)
        if not isinstance(uuid, str):
            key = f"@{r.line}"
            entries.append(Entry(r.line, key, last_key, events, splice=last_key is not None,
                                 prelude=last_main is None))
            last_key = key
            continue
        parent = rec.get("parentUuid")
        parent = parent if isinstance(parent, str) else None
        compaction = rec.get("isCompactSummary") or rec.get("subtype") == "compact_boundary"
        if parent is None and compaction and not side and last_main is not None:
            logical = rec.get("logicalParentUuid")
            parent = logical if isinstance(logical, str) else last_main
        entries.append(Entry(r.line, uuid, parent, events, side=side))
        last_key = uuid
        if not side:
            last_main = uuid
    return build_tree(entries, Path(where))


def _linked(raw: dict[str, Any], links: dict[str, str]) -> dict[str, Any]:
    if not links:
        return raw
    moved = {f: links[v] for f in ("parentUuid", "logicalParentUuid")
             if isinstance(v := raw.get(f), str) and v in links}
    return {**raw, **moved} if moved else raw


# -- forks -----------------------------------------------------------------------------------


def _forked(orig: dict[str, Any], *, new_uuid: str, parent: str | None, logical: Any,
            session_id: str, source_id: str, timestamp: Any) -> dict[str, Any]:
    """The SDK's fork transform of one entry (``_build_fork_lines``), given what it chose."""
    out = {**orig, "uuid": new_uuid, "parentUuid": parent, "logicalParentUuid": logical,
           "sessionId": session_id, "timestamp": timestamp, "isSidechain": False,
           "forkedFrom": {"sessionId": source_id, "messageUuid": orig["uuid"]}}
    for key in FORK_DROPPED:
        out.pop(key, None)
    return out


def _pack(uuids: Sequence[str]) -> tuple[str, dict[int, str]]:
    """The uuids as 16 bytes each (base64); one not in canonical form is returned apart."""
    packed = bytearray()
    odd: dict[int, str] = {}
    for i, text in enumerate(uuids):
        try:
            value = uuid_mod.UUID(text)
        except ValueError:
            value = None
        if value is None or str(value) != text:
            odd[i] = text
            packed += bytes(16)
        else:
            packed += value.bytes
    return base64.b64encode(bytes(packed)).decode(), odd


def _unpack(packed: str, count: int) -> list[str]:
    raw = base64.b64decode(packed)
    return [str(uuid_mod.UUID(bytes=raw[i * 16:(i + 1) * 16])) for i in range(count)]


def _runs(positions: Sequence[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for p in positions:
        if runs and runs[-1][0] + runs[-1][1] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    return runs


def _positions(runs: Sequence[Sequence[int]]) -> list[int]:
    return [start + i for start, count in runs for i in range(count)]


def fork_overlay(source: Sequence[Line], source_id: str, session_id: str,
                 copied: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """What ``copied`` (the first lines of a fork of ``source``) differ in from the source's
    lines, if each is the SDK's fork transform of one of them; else None.

    The overlay names the source lines by position (as runs), the new uuids packed, and per
    line only the fields the transform did not predict (``apply_overlay`` rebuilds them).
    """
    by_uuid = {ln.final["uuid"]: (i, ln.final) for i, ln in enumerate(source)
               if isinstance(ln.final.get("uuid"), str)}
    positions: list[int] = []
    mapping: dict[str, str] = {}
    for line in copied:
        origin = line.get("forkedFrom")
        if not isinstance(origin, dict) or origin.get("sessionId") != source_id:
            return None
        found = by_uuid.get(origin.get("messageUuid"))
        if found is None or not isinstance(line.get("uuid"), str):
            return None
        positions.append(found[0])
        mapping[found[1]["uuid"]] = line["uuid"]
    packed, odd = _pack([line["uuid"] for line in copied])
    finals = _finals(source)
    overlay: dict[str, Any] = {"from": source_id, "take": _runs(positions), "uuids": packed}
    overrides: dict[str, dict[str, Any]] = {}
    for n, (line, pos) in enumerate(zip(copied, positions, strict=True)):
        guess = _predict(source, finals, pos, line["uuid"], mapping, session_id, source_id)
        extra = {k: v for k, v in line.items() if guess.get(k, _MISSING) != v}
        gone = [k for k in guess if k not in line]
        if n in odd:
            extra["uuid"] = odd[n]
        if gone:
            extra["-"] = gone
        if extra:
            overrides[str(n)] = extra
    if overrides:
        overlay["set"] = overrides
    rebuilt = apply_overlay(source, overlay, session_id)
    if [ln.final for ln in rebuilt] != list(copied):
        return None  # cannot happen unless a field is named "-"; then the fork is a copy
    return overlay


_MISSING = object()


def _finals(source: Sequence[Line]) -> dict[Any, dict[str, Any]]:
    return {ln.final.get("uuid"): ln.final for ln in source}


def _predict(source: Sequence[Line], by_uuid: dict[Any, dict[str, Any]], pos: int, new_uuid: str,
             mapping: dict[str, str], session_id: str, source_id: str) -> dict[str, Any]:
    orig = source[pos].final
    parent: str | None = None
    parent_id = orig.get("parentUuid")
    while isinstance(parent_id, str):  # progress entries are skipped, as the SDK does
        entry = by_uuid.get(parent_id)
        if entry is None:
            break
        if parent_id in mapping:
            parent = mapping[parent_id]
            break
        parent_id = entry.get("parentUuid")
    logical = orig.get("logicalParentUuid")
    logical = mapping.get(logical) if isinstance(logical, str) else logical
    return _forked(orig, new_uuid=new_uuid, parent=parent, logical=logical,
                   session_id=session_id, source_id=source_id,
                   timestamp=orig.get("timestamp"))


def fork_of(source: Transcript, overlay: dict[str, Any], session_id: str) -> Transcript:
    """The transcript of a fork of ``source``: the copied lines, and the source's records up
    to the last of them for its tree."""
    lines = apply_overlay(source.lines, overlay, session_id)
    return Transcript(lines, source.tree[:max(ln.at for ln in lines) + 1])


def apply_overlay(source: Sequence[Line], overlay: dict[str, Any], session_id: str) -> list[Line]:
    """The fork's copied lines, rebuilt from the source's lines and the overlay: each keeps
    the source's record (its node) and gets back exactly the line the SDK appended."""
    positions = _positions(overlay["take"])
    uuids = _unpack(overlay["uuids"], len(positions))
    sets: dict[str, dict[str, Any]] = overlay.get("set", {})
    for index, extra in sets.items():
        if "uuid" in extra:
            uuids[int(index)] = extra["uuid"]
    mapping = {source[p].final["uuid"]: u for p, u in zip(positions, uuids, strict=True)}
    out: list[Line] = []
    finals = _finals(source)
    for n, (pos, new_uuid) in enumerate(zip(positions, uuids, strict=True)):
        final = _predict(source, finals, pos, new_uuid, mapping, session_id, overlay["from"])
        extra = sets.get(str(n), {})
        for key in extra.get("-", []):
            final.pop(key, None)
        final.update({k: v for k, v in extra.items() if k != "-"})
        out.append(Line(source[pos].raw, final, source[pos].order, source[pos].at))
    return out
