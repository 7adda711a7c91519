"""Where the Claude Agent SDK adapter keeps each store key: the sessions a user reads, and the
index that gives ``load`` back the lines exactly as they were appended.

A key ``(project_key, session_id[, subpath])`` is:

- the transcript's tree, as ``sess import`` makes it of the same lines: session
  ``PROJECT/claude-XXXXXXXX`` (the project key made safe, then the name the importer gives
  the session id) for the main line, ``.../branch-N`` for the other leaves; a subagent
  transcript is ``MAIN/SUBPATH`` (``.../subagents/agent-ID``), its metadata naming ``MAIN``;
- its index, a chain of ``claude-sdk/lines`` nodes, session ``claude-sdk-index/NAME``: one node
  per append that added lines, holding the key, the node id of each new line's record, the
  SDK's folded summary, the key's first uuid and the write time. A fork's first index node
  is a child of its source's index node and holds only what the fork changed
  (:mod:`.claude_agent_sdk_forks`).

Both live in the DAG, so ``sess push``/``pull`` carry them and ``load`` works on the copy.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from pathlib import Path
from typing import Any

import msgspec

from ..events import is_registered, register_event_type
from ..interop.jsonl import ref_safe, session_base
from ..node import NodeId, decode_data, make_node, session_name, session_ref
from ..repo.store import Store
from .claude_agent_sdk_forks import fork_of, from_copy
from .claude_agent_sdk_tree import Line, Transcript

__all__ = ["INDEX", "INDEX_TYPE", "Keyed", "base_name", "clean_key", "find", "index_data",
           "index_node", "indexed", "now_ms", "project_prefix", "read_lines"]

INDEX_TYPE = "claude-sdk/lines"
#: Session ``claude-sdk-index/NAME`` is the index of session ``NAME``: a session, so that
#: push and pull carry it as they carry the transcript (it only ever fast-forwards).
INDEX = "claude-sdk-index/"
if not is_registered(INDEX_TYPE):
    register_event_type(INDEX_TYPE)

Key = dict[str, str]


def clean_key(key: Any) -> Key:
    """The key as stored: ``project_key``, ``session_id`` and a ``subpath`` only when set."""
    out = {"project_key": str(key["project_key"]), "session_id": str(key["session_id"])}
    if key.get("subpath"):
        out["subpath"] = str(key["subpath"])
    return out


def base_name(project_key: str, session_id: str) -> str:
    """The session name of a main key before any clash: ``PROJECT/claude-XXXXXXXX``."""
    # As ``sess import`` names the file ``SESSION_ID.jsonl``, under the project's own folder.
    imported = session_base("claude", session_id, Path(session_id + ".jsonl"), by_id=False)
    return project_prefix(project_key) + imported


class Keyed(msgspec.Struct):
    """A key as the store holds it: its session name and the head of its index (None: new)."""

    name: str
    head: NodeId | None
    data: dict[str, Any] | None


def index_data(store: Store, head: NodeId) -> dict[str, Any]:
    """The data of index node ``head``."""
    data: dict[str, Any] = decode_data(store.node(head).encoded)
    return data


def find(store: Store, key: Key) -> Keyed:
    """Where ``key`` is kept, or the name it would take: the first of ``BASE``, ``BASE-2``, ...
    whose index holds this key, or that neither an index nor a session holds."""
    main = {"project_key": key["project_key"], "session_id": key["session_id"]}
    base = base_name(key["project_key"], key["session_id"])
    if "subpath" in key:
        base = f"{find(store, main).name}/{_short(key['subpath'])}"
    for n in itertools.count(1):
        name = base if n == 1 else f"{base}-{n}"
        head = store.target(session_ref(INDEX + name))
        if head is None:
            if store.target(session_ref(name)) is None:
                return Keyed(name, None, None)
            continue
        data = index_data(store, head)
        if data.get("key") == key:
            return Keyed(name, head, data)
    raise AssertionError("unreachable")


def index_node(parent: NodeId | None, data: dict[str, Any]) -> Any:
    """The next node of an index chain."""
    return make_node(parent, INDEX_TYPE, data)


def read_lines(store: Store, name: str, head: NodeId) -> Transcript:
    """The lines of session ``name``'s index chain ending at ``head``, oldest first, exactly
    as appended."""
    chain = store.chain_at(head)
    lines = Transcript()
    cache = _records(store, name)
    moved = _moved(chain.datas)
    for i, data in enumerate(chain.datas):
        sid = data["key"]["session_id"]
        if "fork" in data:
            lines = fork_of(lines, data["fork"], sid)
        orders = data.get("order", {})
        for n, ref in enumerate(data.get("add", ())):
            if isinstance(ref, dict) and "copy" in ref:  # a fork's copy of a source line
                lines.add_copy(from_copy(lines, ref, sid))
                continue
            if isinstance(ref, dict):  # a record no node could hold, kept in the index
                raw = ref["raw"]
                own = bool(ref.get("own"))
            else:
                own = ref.endswith("+")
                hex_id = moved[i].get(len(lines.tree), ref.rstrip("+"))
                if hex_id not in cache:
                    cache[hex_id] = decode_data(store.node(NodeId(hex_id)).encoded)
                raw = cache[hex_id]
            lines.add(Line(raw, {**raw, "sessionId": sid} if own else raw, orders.get(str(n)),
                           ref=hex_id if not isinstance(ref, dict) else None))
    return lines


def _records(store: Store, name: str) -> dict[str, dict[str, Any]]:
    """The records on the paths of session ``name`` and its branches, by node id: one read of
    each path, where reading the records one by one would be a round trip each."""
    heads = [r.target for r in store.refs(session_ref(name + "/branch-"))]
    main = store.session_head(name)
    out: dict[str, dict[str, Any]] = {}
    for head in ([main] if main is not None else []) + heads:
        chain = store.chain_at(head)
        for node, type, data in zip(chain.ids, chain.types, chain.datas, strict=True):
            if type.startswith("claude/"):
                out[node] = data
    return out


def _moved(datas: list[Any]) -> list[dict[int, str]]:
    """For the lines each index node adds: the record nodes that later appends moved them to,
    by place in the tree's records.

    A later line can relink the tree (a reply continued by a later entry is no longer a
    message of its own), so that a record already stored gets another node; that append
    names the new node (``fix``), since gc may remove the old one. A place counts in the
    index node that made it and after; a fork's first node keeps its source's places below
    ``upto`` only (above them the source's records are not the fork's).
    """
    out: list[dict[int, str]] = [{} for _ in datas]
    later: dict[int, str] = {}
    for i in reversed(range(len(datas))):
        for place, node in datas[i].get("fix", {}).items():
            later.setdefault(int(place), node)
        out[i] = dict(later)
        fork = datas[i].get("fork")
        if fork is not None:
            later = {p: n for p, n in later.items() if p < fork["upto"]}
    return out


def now_ms(previous: Any) -> int:
    """This write's time in epoch milliseconds, after the key's previous one."""
    now = int(time.time() * 1000)
    return max(now, int(previous) + 1) if isinstance(previous, int) else now


def indexed(store: Store, under: str = "") -> list[tuple[str, NodeId]]:
    """The session name and index head of every key whose name begins with ``under``."""
    return [(str(session_name(r.name))[len(INDEX):], r.target)
            for r in store.refs(session_ref(INDEX + under))]


def project_prefix(project_key: str) -> str:
    """What the names of a project's keys begin with (other projects' may too: a name is
    made safe, so read the key to be sure)."""
    return _short(project_key) + "/"


#: A part of a name longer than this is cut, with a hash of the whole: a ref name holds at
#: most 200 bytes, and an index's is ``claude-sdk-index/PROJECT/claude-XXXXXXXX/SUBPATH``.
PART = 64


def _short(text: str) -> str:
    safe = ref_safe(text)
    if len(safe) <= PART:
        return safe
    return f"{safe[:PART - 9].rstrip('-./')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"

