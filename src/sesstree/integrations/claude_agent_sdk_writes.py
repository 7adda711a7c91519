"""The writes of the Claude Agent SDK adapter: an append and a delete, each one transaction
whose every ref move is a compare-and-set.

An append reads the key's index, drops the entries whose ``uuid`` it already holds (a retried
batch adds nothing), keeps a fork's copies as what they changed (:mod:`.claude_agent_sdk_forks`),
rebuilds the transcript's tree from every line (the importer's steps, so
existing nodes dedupe and only the new ones are written), folds the SDK's session summary and
moves the sessions and the index in one commit. Another process that appended in between
moved the index first: the commit is refused (``ConflictError``, nothing written) and the
append starts again from what that process stored, so no summary fold and no line is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..errors import ConflictError
from ..interop.tree import Tree
from ..node import NodeId, session_name, session_ref
from ..repo.store import Store
from ..store.base import RefUpdate
from .claude_agent_sdk_forks import apply_overlay, copy_of, fork_of, fork_overlay, from_copy
from .claude_agent_sdk_keys import (
    INDEX,
    Key,
    Keyed,
    find,
    index_data,
    index_node,
    indexed,
    now_ms,
    project_prefix,
    read_lines,
)
from .claude_agent_sdk_tree import Line, Transcript, build_lines_tree, in_order, key_order, stored_raw

__all__ = ["ATTEMPTS", "append_entries", "delete_key", "key_refs"]

#: Appends lost to other writers before one gives up (each loss means another one landed).
ATTEMPTS = 50

Folder = Callable[[Any, Key, list[dict[str, Any]]], dict[str, Any]]
_enc = msgspec.msgpack.Encoder()


def append_entries(store: Store, key: Key, entries: list[dict[str, Any]], fold: Folder) -> None:
    """Append ``entries`` to ``key``, retrying a lost compare-and-set."""
    for _ in range(ATTEMPTS):
        try:
            _append_once(store, key, entries, fold)
            return
        except ConflictError:
            continue
    raise ConflictError(f"{key}: {ATTEMPTS} appends in a row lost to other writers")


def _append_once(store: Store, key: Key, entries: list[dict[str, Any]], fold: Folder) -> None:
    with store.batch():
        keyed = find(store, key)
        kept = read_lines(store, keyed.name, keyed.head) if keyed.head is not None else Transcript()
        new = _unseen(kept, entries)
        if not new:
            return
        sid = key["session_id"]
        delta: dict[str, Any] = {"key": key}
        parent = keyed.head
        folded_lines = new
        if keyed.head is None and "subpath" not in key:
            forked = _as_fork(store, key, new)
            if forked is not None:
                parent, delta["fork"], kept, count = forked
                folded_lines = [ln.final for ln in kept.lines] + new[count:]
                new = new[count:]
        items, added = _items(kept, new, sid)
        # A line that names a copied line by its new uuid is linked to the record it copies.
        links = {ln.final["uuid"]: ln.raw["uuid"] for ln in kept.lines
                 if isinstance(ln.final.get("uuid"), str) and ln.raw.get("uuid") != ln.final["uuid"]
                 and isinstance(ln.raw.get("uuid"), str)}
        tree = build_lines_tree([in_order(ln) for ln in kept.tree], links, _where(keyed.name))
        fixes = _place(tree, kept, items, added)
        if items:
            delta["add"] = items
        if fixes:
            delta["fix"] = fixes
        orders = {str(n): line.order for n, (line, _) in added.items() if line.order is not None}
        if orders:
            delta["order"] = orders
        previous = keyed.data or {}
        first = previous.get("first") or next(
            (ln.final["uuid"] for ln in kept.lines if isinstance(ln.final.get("uuid"), str)), None)
        if first is not None:
            delta["first"] = first
        delta["mtime"] = now_ms(previous.get("mtime"))
        if "subpath" not in key:
            summary = previous.get("summary") if "fork" not in delta else None
            delta["summary"] = {**fold(summary, key, folded_lines), "mtime": delta["mtime"]}
        index = index_node(parent, delta)
        updates = _session_updates(store, keyed, tree.leaves, tree.has_main)
        updates.append(RefUpdate(session_ref(INDEX + keyed.name), keyed.head, index.id,
                                 "claude-agent-sdk: append"))
        # Most of the tree is stored already: only what is not goes to the engine.
        stored = store.has(list(tree.nodes))
        store.write([*(n for i, n in tree.nodes.items() if i not in stored), index], updates)
        _describe(store, key, updates)


def _place(tree: Tree, kept: Transcript, items: list[Any],
           added: dict[int, tuple[Line, bool]]) -> dict[str, str]:
    """Fill in the index items of the new lines with the nodes of their records (``+``: the
    key's session id was taken out of it), and return the records a new line relinked, by
    place, with the node that holds each now."""
    holders: dict[bytes, NodeId] = {}
    for node in tree.nodes.values():
        if node.type.startswith("claude/"):
            holders.setdefault(_enc.encode(node.data), node.id)
    for n, (line, own) in added.items():
        held = holders.get(_enc.encode(line.raw))
        line.ref = held
        items[n] = (held + ("+" if own else "") if held is not None
                    else {"raw": line.raw, "own": own})  # no node can hold it
    # A later line can relink the tree (a reply continued by a later entry is no longer a
    # message of its own): a record stored before then has another node, which gc keeps.
    fixes: dict[str, str] = {}
    for line in kept.tree:
        if line.ref is not None and line.ref not in tree.nodes:
            moved = holders.get(_enc.encode(line.raw))
            if moved is not None:
                fixes[str(line.at)] = line.ref = moved
    return fixes


def _unseen(kept: Transcript, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries to append: not those whose uuid is stored, nor a repeat in the batch."""
    seen = {ln.final["uuid"] for ln in kept.lines if isinstance(ln.final.get("uuid"), str)}
    new: list[dict[str, Any]] = []
    for entry in entries:
        uuid = entry.get("uuid")
        if isinstance(uuid, str):
            if uuid in seen:
                continue
            seen.add(uuid)
        new.append(entry)
    return new


def _items(kept: Transcript, new: list[dict[str, Any]], sid: str
           ) -> tuple[list[Any], dict[int, tuple[Line, bool]]]:
    """Add ``new`` to ``kept``: the index items (a fork's copies made already), and the lines
    with records of their own by item, whose node ids are known once the tree is built."""
    items: list[Any] = []
    added: dict[int, tuple[Line, bool]] = {}
    for entry in new:
        copy = copy_of(kept, entry, sid)
        if copy is not None:
            kept.add_copy(from_copy(kept, copy, sid))
            items.append(copy)
            continue
        raw, own = stored_raw(entry, sid)
        line = Line(raw, entry, key_order(entry))
        kept.add(line)
        added[len(items)] = (line, own)
        items.append(None)
    return items, added


def _describe(store: Store, key: Key, updates: list[RefUpdate]) -> None:
    """Give each session the append created what it is, as the importer says it (format,
    session id, source), and for a subagent's transcript whose session it belongs to; an
    index says whose it is."""
    born = [name for u in updates if u.old is None and u.new is not None
            and (name := session_name(u.name)) is not None]
    if not born:
        return
    meta = {"format": "claude", "sessionId": key["session_id"],
            "source": "claude-agent-sdk:" + "/".join(key.values())}
    if "subpath" in key:
        main = {"project_key": key["project_key"], "session_id": key["session_id"]}
        meta["subagentOf"] = find(store, main).name
        meta["subpath"] = key["subpath"]
    for name in born:
        if name.startswith(INDEX):
            store.set_session_meta(name, {"format": "claude-agent-sdk-index",
                                          "indexOf": name[len(INDEX):]})
        else:
            store.set_session_meta(name, meta)


def _where(name: str) -> str:
    return f"claude-agent-sdk:{name}"


def _as_fork(store: Store, key: Key, new: list[dict[str, Any]]
             ) -> tuple[NodeId, dict[str, Any], Transcript, int] | None:
    """A first append that is a fork of a stored session: the source's index head, the fork
    item, the fork's transcript so far and how many of ``new`` the fork item holds.

    ``fork_session_via_store`` begins with lines stamped ``forkedFrom``; the CLI's fork (resume
    with ``fork_session=True``) with the source's lines under their own uuids: its source is
    the session of the project whose first uuid is the batch's first.
    """
    count = 0
    while count < len(new) and isinstance(new[count].get("forkedFrom"), dict):
        count += 1
    if count == 0:
        return _as_cli_fork(store, key, new)
    source_id = new[0]["forkedFrom"].get("sessionId")
    if not isinstance(source_id, str):
        return None
    source = find(store, {"project_key": key["project_key"], "session_id": source_id})
    if source.head is None:
        return None
    source_lines = read_lines(store, source.name, source.head)
    overlay = fork_overlay(source_lines.lines, source_id, key["session_id"], new[:count])
    if overlay is None:
        return None
    copies = apply_overlay(source_lines.lines, overlay, key["session_id"])
    fork = {**overlay, "upto": max(ln.at for ln in copies) + 1}
    return source.head, fork, fork_of(source_lines, fork, key["session_id"]), count


def _as_cli_fork(store: Store, key: Key, new: list[dict[str, Any]]
                 ) -> tuple[NodeId, dict[str, Any], Transcript, int] | None:
    first = next((e["uuid"] for e in new if isinstance(e.get("uuid"), str)), None)
    if first is None:
        return None
    for name, head in indexed(store, project_prefix(key["project_key"])):
        data = index_data(store, head)
        other = data["key"]
        if (data.get("first") == first and "subpath" not in other
                and other["project_key"] == key["project_key"]
                and other["session_id"] != key["session_id"]):
            source_lines = read_lines(store, name, head)
            fork = {"from": other["session_id"], "upto": len(source_lines.tree)}
            return head, fork, fork_of(source_lines, fork, key["session_id"]), 0
    return None


def _names(name: str, leaves: int, has_main: bool) -> list[str]:
    first = 1 if has_main else 2  # only prelude records so far: no main line yet, as imported
    return [name if n == 1 else f"{name}/branch-{n}" for n in range(first, first + leaves)]


def _session_updates(store: Store, keyed: Keyed, leaves: list[NodeId], has_main: bool
                     ) -> list[RefUpdate]:
    """Move the main session and its branches to the tree's leaves (main first), named as
    ``sess import`` names them; a branch the tree no longer has goes (the reflog keeps it)."""
    wanted = dict(zip(_names(keyed.name, len(leaves), has_main), leaves, strict=True))
    current = {str(session_name(r.name)): r.target
               for r in store.refs(session_ref(keyed.name + "/branch-"))}
    head = store.session_head(keyed.name)
    if head is not None:
        current[keyed.name] = head
    updates = []
    for name in sorted(set(wanted) | set(current)):
        old, new = current.get(name), wanted.get(name)
        if old != new:
            updates.append(RefUpdate(session_ref(name), old, new, "claude-agent-sdk: append"))
    return updates


def key_refs(store: Store, keyed: Keyed) -> list[tuple[str, NodeId]]:
    """The refs of one key: its sessions and its index (not its subagents')."""
    out: list[tuple[str, NodeId]] = []
    if keyed.head is not None:
        out.append((session_ref(INDEX + keyed.name), keyed.head))
    head = store.session_head(keyed.name)
    if head is not None:
        out.append((session_ref(keyed.name), head))
    out += [(r.name, r.target) for r in store.refs(session_ref(keyed.name + "/branch-"))]
    return out


def delete_key(store: Store, key: Key) -> None:
    """Delete a key's sessions and index; a main key's subagents with it. Nodes stay (``sess
    gc`` removes them) and each ref's reflog keeps where it was."""
    with store.batch():
        keyed = find(store, key)
        if keyed.head is None:
            return
        doomed = key_refs(store, keyed)
        if "subpath" not in key:
            for name, head in indexed(store, keyed.name + "/"):
                sub = index_data(store, head)["key"]
                if sub.get("subpath") and sub["session_id"] == key["session_id"] \
                        and sub["project_key"] == key["project_key"]:
                    doomed += key_refs(store, Keyed(name, head, None))
        store.write([], [RefUpdate(ref, old, None, "claude-agent-sdk: delete")
                         for ref, old in doomed])

