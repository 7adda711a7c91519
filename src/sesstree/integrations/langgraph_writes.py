"""The LangGraph adapter's writes: each one compare-and-set commit of the sessions it moves.

A ``put`` stores only what its parent checkpoint does not hold already: the new elements of a
list channel that grew by appending (the ``messages`` channel), the values of the channels
whose version changed, and the checkpoint node; then it moves the session that had the
parent at its tip, or starts a branch session from an older parent (a fork: time travel,
``update_state`` on an old checkpoint). The moves of one LangGraph run are one reflog entry
(folded, as an agent's turn is). Another writer that moved the session first makes the
commit fail (nothing written) and the put starts again from what that writer stored.

Deleting checkpoints in the middle of a history (``delete_for_runs``, ``prune``) rewrites
the paths after them without them; the channel values they held stay, as later checkpoints
may hold them too. ``delete_thread`` and ``prune(strategy="delete")`` remove the sessions;
the nodes stay until ``sess gc`` (the reflog keeps them, as it keeps a deleted session).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langgraph.checkpoint.base import WRITES_IDX_MAP

from ..errors import ConflictError
from ..node import Node, NodeId, make_node, session_name, session_ref
from ..repo.policy import LogGroup
from ..repo.session import Session
from ..repo.store import Store, raw_node
from ..store.base import RefUpdate
from .langgraph_history import (
    CHECKPOINT,
    ITEM,
    VALUE,
    WRITES,
    Ckpt,
    base_name,
    branch_prefix,
    cut_runs,
    joined_runs,
    leaves,
    node_data,
    read_history,
    spec_of,
    split_name,
    thread_refs,
    typed,
    write_entry,
)

__all__ = ["ATTEMPTS", "State", "Writer"]

#: Writes lost to other writers before one gives up (each loss means another one landed).
ATTEMPTS = 50
_T = TypeVar("_T")
_SCALARS = (str, int, float, bool, type(None))


@dataclass
class State:
    """What a checkpoint holds, as a put on it needs it: its id, its list channels' typed
    elements and the channels it holds as values."""

    ckpt: str
    lists: dict[str, list[list[str]]]
    valued: set[str]
    segs: dict[str, list[list[int]]]
    totals: dict[str, int]
    #: The list elements as this saver was given them (empty when read from the store).
    objs: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, ck: Ckpt) -> State:
        """What checkpoint ``ck`` holds."""
        return cls(ck.data["id"], ck.lists, set(ck.values), ck.segs, ck.totals)


class Writer:
    """The writes of one saver on one store (callers hold the saver's lock)."""

    def __init__(self, store: Store, serde: Any) -> None:
        self.store = store
        self.serde = serde
        # tip node -> what its checkpoint holds: a put on the tip it made needs no read.
        self._states: OrderedDict[NodeId, State] = OrderedDict()
        self._handles: dict[str, Session] = {}
        self._groups: dict[str, tuple[Any, LogGroup]] = {}
        # Writes that came before their checkpoint (LangGraph saves in background threads,
        # which need not run in order): they go in with it, by (session, checkpoint id).
        self._early: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # (session, checkpoint id) -> the ref and tip a write on it last left, and the node
        # it is: the next put finds its place with one ref read, a fork with none.
        self._tips: dict[tuple[str, str], tuple[str, NodeId]] = {}
        self._where: dict[tuple[str, str], NodeId] = {}

    def _retry(self, fn: Callable[[], _T]) -> _T:
        for _ in range(ATTEMPTS):
            try:
                return fn()
            except ConflictError:
                continue
        raise ConflictError(f"{ATTEMPTS} writes in a row lost to other writers")

    # -- where a write goes -------------------------------------------------------------------

    def _remember(self, tip: NodeId, state: State) -> None:
        self._states[tip] = state
        self._states.move_to_end(tip)
        while len(self._states) > 1024:
            self._states.popitem(last=False)

    def _tip_ckpt(self, tip: NodeId) -> str | None:
        state = self._states.get(tip)
        if state is not None:
            return state.ckpt
        kind, _, data = node_data(self.store, tip)
        if kind == CHECKPOINT:
            return str(data["id"])
        return str(data.get("on", data["at"])) if kind == WRITES else None

    def _state_at(self, tip: NodeId) -> State:
        state = self._states.get(tip)
        if state is None:
            history = read_history(self.store, [("", tip)])
            ck = history.ckpts[history.lines[""][-1]]
            state = State.of(ck)
            self._remember(tip, state)
        return state

    def _place(self, name: str, ckpt_id: str | None
               ) -> tuple[str, NodeId | None, NodeId | None, State | None]:
        """Where a write on checkpoint ``ckpt_id`` goes: the ref to move, where it is, the node
        to chain from and what that checkpoint holds (None for a new root)."""
        if ckpt_id is not None:
            hint = self._tips.get((name, ckpt_id))
            if hint is not None:
                found = self.store.ref(hint[0])
                if found is not None and found.target == hint[1]:
                    return hint[0], hint[1], hint[1], self._state_at(hint[1])
        tips = leaves(self.store, name)
        if ckpt_id is not None:
            for ref, tip in tips:
                if self._tip_ckpt(tip) == ckpt_id:
                    return ref, tip, tip, self._state_at(tip)
            node = self._where.get((name, ckpt_id))
            if node is not None:
                return self._new_branch(name, tips), None, node, self._state_at(node)
            ck = read_history(self.store, tips).ckpts.get(ckpt_id)
            if ck is not None:
                state = State.of(ck)
                return self._new_branch(name, tips), None, ck.node, state
        if not tips:
            return session_ref(name), None, None, None
        return self._new_branch(name, tips), None, None, None

    def _new_branch(self, name: str, tips: list[tuple[str, NodeId]]) -> str:
        taken = {ref for ref, _ in tips}
        if session_ref(name) not in taken:
            return session_ref(name)
        n = 2
        while session_ref(f"{branch_prefix(name)}{n}") in taken:
            n += 1
        return session_ref(f"{branch_prefix(name)}{n}")

    def _move(self, ref: str, old: NodeId | None, nodes: list[Node], run: Any) -> None:
        """Store ``nodes`` and move ``ref`` from ``old`` to the last of them, one commit; the
        moves of one run (or, without a run id, of this saver) fold into one reflog entry."""
        handle = self._handles.get(ref)
        if handle is None:
            handle = self._handles[ref] = self.store.session(str(session_name(ref)))
        group = self._groups.get(ref)
        if group is None or group[0] != run:
            reason = f"langgraph: run {run}" if run is not None else "langgraph: put"
            group = self._groups[ref] = (run, LogGroup(reason))
        handle.log_group_open = group[1]
        try:
            self.store.move_ref(ref, old, nodes[-1].id, group[1].reason,
                                nodes=[raw_node(n) for n in nodes], handle=handle)
        finally:
            handle.log_group_open = None

    # -- put ----------------------------------------------------------------------------------

    def put(self, thread: str, ns: str, parent_id: str | None, checkpoint: dict[str, Any],
            metadata: dict[str, Any], new_versions: dict[str, Any]) -> None:
        """Store one checkpoint on its parent (see the module)."""
        self._retry(lambda: self._put_once(thread, ns, parent_id, checkpoint, metadata,
                                           new_versions))

    def _put_once(self, thread: str, ns: str, parent_id: str | None,
                  checkpoint: dict[str, Any], metadata: dict[str, Any],
                  new_versions: dict[str, Any]) -> None:
        name = base_name(thread, ns)
        ref, old, at, state = self._place(name, parent_id)
        nodes: list[Node] = []
        lists: dict[str, list[list[str]]] = {}
        segs: dict[str, list[list[int]]] = {}
        totals: dict[str, int] = {}
        specs: dict[str, Any] = {}
        objs: dict[str, list[Any]] = {}
        valued: list[str] = []
        written = self._written_elems(at) if old is not None else {}
        for channel, value in checkpoint["channel_values"].items():
            kept = state is not None and channel not in new_versions
            if type(value) is list:
                before = state.lists.get(channel) if state is not None else None
                total = state.totals.get(channel, 0) if state is not None else 0
                if kept and state is not None and before is not None:
                    lists[channel], segs[channel] = before, state.segs[channel]
                    if channel in state.objs:
                        objs[channel] = state.objs[channel]
                    totals[channel], specs[channel] = total, spec_of(segs[channel], total)
                    continue
                # An element that is the very object the parent was given is not encoded
                # again: LangGraph's channels replace their values, they do not edit them.
                given = state.objs.get(channel, []) if state is not None else []
                elems = [before[i] if before is not None and i < len(given) and i < len(before)
                         and given[i] is e else typed(self.serde, e)
                         for i, e in enumerate(value)]
                objs[channel] = list(value)
                # What the list keeps of its parent's is named; only the rest is new.
                keep = 0
                for old_elem, new_elem in zip(before or (), elems, strict=False):
                    if old_elem != new_elem:
                        break
                    keep += 1
                for elem in elems[keep:]:
                    # An element a pending write just behind holds is named, not stored again.
                    where = written.get((elem[0], elem[1]))
                    item = {"c": channel, "r": where} if where else {"c": channel, "v": elem}
                    node = make_node(at, ITEM, item)
                    nodes.append(node)
                    at = node.id
                added = len(elems) - keep
                kept_runs = cut_runs(state.segs.get(channel, []) if state is not None else [], keep)
                lists[channel], totals[channel] = elems, total + added
                segs[channel] = joined_runs(kept_runs + ([[total + added, added]] if added else []))
                specs[channel] = spec_of(segs[channel], totals[channel])
            else:
                valued.append(channel)
                if kept and state is not None and channel in state.valued:
                    continue
                node = make_node(at, VALUE, {"c": channel, "v": typed(self.serde, value)})
                nodes.append(node)
                at = node.id
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        data: dict[str, Any] = {
            "id": checkpoint["id"], "parent": parent_id, "cp": typed(self.serde, rest),
            "md": typed(self.serde, metadata), "lists": specs,
            "values": sorted(valued),
        }
        # Plain copies of what a reader of ``sess log`` (and delete_for_runs) looks for.
        for key, name_in_node in (("step", "step"), ("source", "source"), ("run_id", "run")):
            if key in metadata and isinstance(metadata[key], _SCALARS):
                data[name_in_node] = metadata[key]
        node = make_node(at, CHECKPOINT, data)
        nodes.append(node)
        for early in self._early.get((name, checkpoint["id"]), []):
            nodes.append(make_node(nodes[-1].id, WRITES, early))
        self._move(ref, old, nodes, metadata.get("run_id"))
        self._early.pop((name, checkpoint["id"]), None)
        state = State(checkpoint["id"], lists, set(valued), segs, totals, objs)
        self._remember(node.id, state)
        self._remember(nodes[-1].id, state)
        self._placed(name, checkpoint["id"], ref, nodes[-1].id)
        self._where[(name, checkpoint["id"])] = node.id

    def _placed(self, name: str, ckpt_id: str, ref: str, tip: NodeId) -> None:
        if len(self._tips) > 8192:
            self._tips.clear()
            self._where.clear()
        self._tips[(name, ckpt_id)] = (ref, tip)

    def _forget(self) -> None:
        """After a delete or a copy: where checkpoints were is read from the store again."""
        self._tips.clear()
        self._where.clear()

    def _written_elems(self, tip: NodeId | None) -> dict[tuple[str, str], list[Any]]:
        """The list elements of the pending writes just behind ``tip``, each with where it is
        (the writes node, the write, the element)."""
        found: dict[tuple[str, str], list[Any]] = {}
        at = tip
        while at is not None:
            node_id = at
            kind, at, data = node_data(self.store, at)
            if kind != WRITES:
                break
            for i, entry in enumerate(data["w"]):
                for j, elem in enumerate(entry[3] if len(entry) > 3 else ()):
                    found.setdefault((elem[0], elem[1]), [node_id, i, j])
        return found

    # -- put_writes ---------------------------------------------------------------------------

    def put_writes(self, thread: str, ns: str, ckpt_id: str, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str) -> None:
        """Store a task's pending writes on checkpoint ``ckpt_id``: a write whose (task, index)
        is stored already is skipped, as LangGraph's savers do (a special one, an error or an
        interrupt, replaces it when read)."""
        self._retry(lambda: self._put_writes_once(thread, ns, ckpt_id, writes, task_id,
                                                  task_path))

    def _put_writes_once(self, thread: str, ns: str, ckpt_id: str,
                         writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> None:
        name = base_name(thread, ns)
        tips = leaves(self.store, name)
        # LangGraph saves in the background: a task's writes can come after the next
        # checkpoint. They go on the tip of the session whose path holds their checkpoint,
        # saying which checkpoint that tip is at ("on"), so no branch is made for them.
        place = next(((ref, tip) for ref, tip in tips if self._tip_ckpt(tip) == ckpt_id), None)
        if place is not None:
            ref, tip = place
            on, stored = ckpt_id, self._writes_behind(tip, ckpt_id)
        else:
            history = read_history(self.store, tips)
            holder = next((r for r, line in history.lines.items() if ckpt_id in line), None)
            if holder is None:
                self._hold_early(name, ckpt_id, writes, task_id, task_path)
                return
            ref, tip = holder, dict(tips)[holder]
            on = str(self._tip_ckpt(tip))
            stored = {(d["task"], w[0]) for d in history.writes.get(ckpt_id, []) for w in d["w"]}
        items = []
        for idx, (channel, value) in enumerate(writes):
            key = WRITES_IDX_MAP.get(channel, idx)
            if key >= 0 and (task_id, key) in stored:
                continue
            items.append(write_entry(self.serde, key, channel, value))
        if not items:
            return
        data: dict[str, Any] = {"at": ckpt_id, "task": task_id, "path": task_path, "w": items}
        if on != ckpt_id:
            data["on"] = on
        node = make_node(tip, WRITES, data)
        self._move(ref, tip, [node], None)
        state = self._states.get(tip)
        if state is not None:
            self._remember(node.id, state)
        self._placed(name, on, ref, node.id)

    def _hold_early(self, name: str, ckpt_id: str, writes: Sequence[tuple[str, Any]],
                    task_id: str, task_path: str) -> None:
        held = self._early.setdefault((name, ckpt_id), [])
        stored = {(d["task"], w[0]) for d in held for w in d["w"]}
        items = [write_entry(self.serde, key, channel, value)
                 for idx, (channel, value) in enumerate(writes)
                 if (key := WRITES_IDX_MAP.get(channel, idx)) < 0 or (task_id, key) not in stored]
        if items:
            held.append({"at": ckpt_id, "task": task_id, "path": task_path, "w": items})

    def _writes_behind(self, tip: NodeId, ckpt_id: str) -> set[tuple[str, int]]:
        """The (task, index) of the writes on ``ckpt_id`` just behind ``tip`` (a tip at a
        checkpoint holds that checkpoint's writes after it)."""
        keys: set[tuple[str, int]] = set()
        at: NodeId | None = tip
        while at is not None:
            kind, at, data = node_data(self.store, at)
            if kind != WRITES:
                break
            if data["at"] == ckpt_id:
                keys.update((data["task"], w[0]) for w in data["w"])
        return keys

    # -- threads ------------------------------------------------------------------------------

    def copy_thread(self, source: str, target: str) -> None:
        """Make ``target`` a copy of ``source``: a ref per session at the same node, O(1) in
        the history's length (the target's sessions before are replaced)."""
        self._forget()
        def once() -> None:
            src = base_name(source, "")
            dst = base_name(target, "")
            wanted: dict[str, NodeId] = {}
            for ref, tip in thread_refs(self.store, source):
                short = str(session_name(ref))
                wanted[session_ref(dst + short[len(src):])] = tip
            current: dict[str, NodeId] = dict(thread_refs(self.store, target))
            updates = [RefUpdate(r, current.get(r), wanted.get(r), f"langgraph: copy of {source}")
                       for r in sorted(set(wanted) | set(current))
                       if current.get(r) != wanted.get(r)]
            if updates:
                self.store.write([], updates)
        self._retry(once)

    def delete_thread(self, thread: str) -> None:
        """Delete every session of a thread."""
        self._forget()
        def once() -> None:
            updates = [RefUpdate(r, t, None, "langgraph: delete thread")
                       for r, t in thread_refs(self.store, thread)]
            if updates:
                self.store.write([], updates)
        self._retry(once)

    def drop(self, thread: str | None, which: Callable[[dict[str, dict[str, Any]]], set[str]]
             ) -> None:
        """Remove from each namespace of ``thread`` (of every thread: None) the checkpoints
        ``which`` picks (given the namespace's checkpoints' data by id), with their writes."""
        self._forget()
        def once() -> None:
            groups: dict[tuple[str, str], list[tuple[str, NodeId]]] = {}
            for ref, tip in thread_refs(self.store, thread):
                key = split_name(str(session_name(ref)))
                if key is not None:
                    groups.setdefault(key, []).append((ref, tip))
            nodes: list[Node] = []
            updates: list[RefUpdate] = []
            for tips in groups.values():
                history = read_history(self.store, tips)
                dropped = which({cid: ck.data for cid, ck in history.ckpts.items()})
                if dropped:
                    self._rewrite(tips, dropped, nodes, updates)
            if updates:
                self.store.write(nodes, updates)
        self._retry(once)

    def _rewrite(self, tips: list[tuple[str, NodeId]], dropped: set[str], nodes: list[Node],
                 updates: list[RefUpdate]) -> None:
        memo: dict[NodeId, tuple[NodeId | None, NodeId | None]] = {}
        made: set[NodeId] = set()
        targets: set[NodeId] = set()
        for ref, tip in tips:
            chain = self.store.chain_at(tip)
            parent: NodeId | None = None
            anchor: NodeId | None = None
            for id, kind, data in zip(chain.ids, chain.types, chain.datas, strict=True):
                if id in memo:
                    parent, anchor = memo[id]
                    continue
                gone = ((kind == CHECKPOINT and data["id"] in dropped)
                        or (kind == WRITES and data["at"] in dropped))
                if not gone:
                    node = make_node(parent, kind, data)
                    if node.id != id and node.id not in made:
                        made.add(node.id)
                        nodes.append(node)
                    parent = node.id
                    if kind in (CHECKPOINT, WRITES):
                        anchor = node.id
                memo[id] = (parent, anchor)
            # A session left with no checkpoint, or where another already is, goes.
            target = anchor if anchor not in targets else None
            if target is not None:
                targets.add(target)
            if target != tip:
                updates.append(RefUpdate(ref, tip, target, "langgraph: delete checkpoints"))
