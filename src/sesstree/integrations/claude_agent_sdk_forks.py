"""Forks of a stored session, kept as what they changed.

Two ways the SDK forks a session, both copying its lines into a new session id:

- ``fork_session_via_store`` remaps every ``uuid``, rewrites ``sessionId``, stamps
  ``forkedFrom`` and renews the last ``timestamp``: :func:`fork_overlay` recognises the copy
  and keeps the new uuids packed (16 bytes each) and what the transform did not predict;
- resuming with ``fork_session=True`` makes the CLI write the lines again under the new
  session id with their uuids kept and a field or two renewed (``promptId``): each copy is
  kept as the position of the line it copies and the fields that differ (:func:`copy_of`).

Either way the fork's records are its source's (its tree is built from the source's records
up to the fork point: :func:`fork_of`), so its nodes are the source's, node for node.
"""

from __future__ import annotations

import base64
import uuid as uuid_mod
from collections.abc import Sequence
from typing import Any

import msgspec

from .claude_agent_sdk_tree import Line, Transcript

__all__ = ["FORK_DROPPED", "apply_overlay", "copy_of", "fork_of", "fork_overlay", "from_copy"]

#: Fields the SDK's fork transform removes from a copied entry.
FORK_DROPPED = ("teamName", "agentName", "slug", "sourceToolAssistantUUID")
_enc = msgspec.json.Encoder()


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


def fork_of(source: Transcript, fork: dict[str, Any], session_id: str) -> Transcript:
    """The transcript of a fork of ``source`` as its index begins it: the lines copied by the
    overlay (if any), the source's first ``upto`` records for its tree, and the source kept
    for the copies that follow (:func:`from_copy`)."""
    lines = apply_overlay(source.lines, fork, session_id) if "take" in fork else []
    return Transcript(lines, source.tree[:fork["upto"]], source=source, source_id=fork["from"])


def _copy_guess(original: dict[str, Any], source_id: str, session_id: str) -> dict[str, Any]:
    """A line as the CLI copies it into a fork: the source's session id, wherever a top-level
    field holds it (``sessionId``, ``requestSessionId``), becomes the fork's."""
    return {k: session_id if v == source_id else v for k, v in original.items()}


def copy_of(fork: Transcript, line: dict[str, Any], session_id: str) -> dict[str, Any] | None:
    """The index item of ``line`` if it copies a line of the fork's source (the same uuid,
    a few fields renewed): the source line's position and the fields that differ. None when
    it copies nothing, or differs in so much that it is a line of its own."""
    source, uuid = fork.source, line.get("uuid")
    if source is None or fork.source_id is None or not isinstance(uuid, str):
        return None
    pos = source.position(uuid)
    if pos is None:
        return None
    guess = _copy_guess(source.lines[pos].final, fork.source_id, session_id)
    item: dict[str, Any] = {"copy": pos}
    changed = {k: v for k, v in line.items() if guess.get(k, _MISSING) != v}
    if changed:
        item["set"] = changed
    gone = [k for k in guess if k not in line]
    if gone:
        item["-"] = gone
    if len(_enc.encode(item)) * 4 > len(_enc.encode(line)):
        return None  # more new than copied: kept as a record of its own
    return item


def from_copy(fork: Transcript, item: dict[str, Any], session_id: str) -> Line:
    """The line an index item made by :func:`copy_of` stands for: the source's record, and
    the line exactly as the CLI wrote it."""
    assert fork.source is not None and fork.source_id is not None
    original = fork.source.lines[item["copy"]]
    final = _copy_guess(original.final, fork.source_id, session_id)
    for key in item.get("-", ()):
        final.pop(key, None)
    final.update(item.get("set", {}))
    return Line(original.raw, final, original.order, original.at)


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
