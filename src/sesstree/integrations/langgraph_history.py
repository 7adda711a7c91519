"""What the LangGraph adapter keeps in a sesstree store, and reading it back.

A thread's namespace (``checkpoint_ns``) is a session, ``langgraph/THREAD`` for the root
namespace and ``langgraph/THREAD/ns/NS`` for a subgraph's (each part percent-encoded, so any
thread id or namespace makes a valid name). Its history is one path of nodes, oldest first:

- ``langgraph/item``: one element of a list channel (``{"c": channel, "v": typed}``, or
  ``"r": [writes node, write, element]`` for an element a pending write on the path holds); a
  ``messages`` channel that grows by appending adds only its new elements, so each message
  is one node however many checkpoints (and forks, which share the path) hold it;
- ``langgraph/value``: a whole channel value, written only at the versions that changed it;
- ``langgraph/checkpoint``: the checkpoint without its values (``cp``), its metadata
  (``md``), its id and its parent's id, and which channels it holds: a list channel as the
  last ``n`` items of that channel on the path (``lists``; a list whose end was edited or
  removed as runs ``[end, count]`` of them: what it kept of its parent's, then its new ones),
  any other as the newest value node of the channel on the path (``values``);
- ``langgraph/writes``: the pending writes of one task on the checkpoint ``at``, each
  ``[index, channel, typed]`` or, for a list value, ``[index, channel, None, [typed, ...]]``
  (``on``: the checkpoint the path is at, when the writes came after the next one).

A checkpoint's parent node is the last node written before it, so the path from the root to
it passes through its parent checkpoint and everything that checkpoint held. ``typed`` is
``[type, base64]`` of the saver's serde (``dumps_typed``), so every value LangGraph can
checkpoint comes back as it was; ``sess log`` shows these as plain extension events.
A fork (a checkpoint put on a parent that is no longer a tip) is a branch session,
``NAME/branch-N``, sharing the path up to that parent.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from ..events import is_registered, register_event_type
from ..node import NodeId, decode_data, session_name, session_ref
from ..repo.store import Store

__all__ = [
    "CHECKPOINT",
    "ITEM",
    "PREFIX",
    "VALUE",
    "WRITES",
    "Ckpt",
    "History",
    "base_name",
    "branch_prefix",
    "cut_runs",
    "joined_runs",
    "leaves",
    "read_history",
    "runs",
    "spec_of",
    "split_name",
    "thread_refs",
    "typed",
    "untyped",
    "write_entry",
]

CHECKPOINT = "langgraph/checkpoint"
ITEM = "langgraph/item"
VALUE = "langgraph/value"
WRITES = "langgraph/writes"
#: Every session the adapter keeps is under this name.
PREFIX = "langgraph/"
for _kind in (CHECKPOINT, ITEM, VALUE, WRITES):
    if not is_registered(_kind):
        register_event_type(_kind)  # records of the run: kept in the history, never sent
_BRANCH = "/branch-"
_NS = "/ns/"


def _enc(part: str) -> str:
    # quote leaves "_.-~": '~' is refused in a name and a '.' could start a component.
    return quote(part, safe="").replace(".", "%2E").replace("~", "%7E") or "%"


def _dec(part: str) -> str:
    return "" if part == "%" else unquote(part)


def base_name(thread_id: str, ns: str) -> str:
    """The session of one thread's namespace."""
    name = PREFIX + _enc(thread_id)
    return name if not ns else name + _NS + _enc(ns)


def branch_prefix(name: str) -> str:
    """What the names of a session's fork branches begin with."""
    return name + _BRANCH


def split_name(name: str) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of one of the adapter's sessions (or its branches)."""
    if not name.startswith(PREFIX):
        return None
    parts = name[len(PREFIX):].split("/")
    if parts and parts[-1].startswith("branch-"):
        parts = parts[:-1]
    if len(parts) == 1:
        return _dec(parts[0]), ""
    if len(parts) == 3 and parts[1] == "ns":
        return _dec(parts[0]), _dec(parts[2])
    return None


def leaves(store: Store, name: str) -> list[tuple[str, NodeId]]:
    """The session ``name`` and its branches, as ``(full ref name, target)``."""
    out: list[tuple[str, NodeId]] = []
    main = store.ref(session_ref(name))
    if main is not None:
        out.append((main.name, main.target))
    out += [(r.name, r.target) for r in store.refs(session_ref(branch_prefix(name)))]
    return out


def thread_refs(store: Store, thread_id: str | None) -> list[tuple[str, NodeId]]:
    """Every ref of a thread (all its namespaces and branches), or of every thread."""
    if thread_id is None:
        found = store.refs(session_ref(PREFIX))
    else:
        name = base_name(thread_id, "")
        found = store.refs(session_ref(name + "/"))
        main = store.ref(session_ref(name))
        if main is not None:
            found.append(main)
    out = []
    for r in found:
        short = session_name(r.name)
        if short is not None and split_name(short) is not None:
            out.append((r.name, r.target))
    return out


def typed(serde: Any, value: Any) -> list[str]:
    """A value as the serde writes it, in a form a node can hold (JSON)."""
    kind, raw = serde.dumps_typed(value)
    return [kind, base64.b64encode(raw).decode("ascii")]


def untyped(serde: Any, stored: list[str]) -> Any:
    """Inverse of :func:`typed`."""
    return serde.loads_typed((stored[0], base64.b64decode(stored[1])))


def write_entry(serde: Any, key: int, channel: str, value: Any) -> list[Any]:
    """One pending write as a writes node keeps it: a list value element by element (so that
    the checkpoint that takes its elements in can name them instead of storing them again)."""
    if type(value) is list:
        return [key, channel, None, [typed(serde, e) for e in value]]
    return [key, channel, typed(serde, value)]


@dataclass
class Ckpt:
    """One checkpoint as read from a path: its node and data, and the typed channel values
    it holds (a list channel as its elements)."""

    node: NodeId
    data: dict[str, Any]
    lists: dict[str, list[list[str]]]
    values: dict[str, list[str]]
    #: Where each list is on the path: runs ``[end, count]`` of the channel's items (by their
    #: place among the channel's items on the path), and how many items the path had then.
    segs: dict[str, list[list[int]]] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)


@dataclass
class History:
    """The checkpoints and pending writes found on one or more paths."""

    ckpts: dict[str, Ckpt] = field(default_factory=dict)
    #: checkpoint id -> the writes nodes' data on it, in the order written.
    writes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: ref name -> the checkpoint ids on its path, oldest first.
    lines: dict[str, list[str]] = field(default_factory=dict)
    _seen: set[NodeId] = field(default_factory=set)

    def add_path(self, ref: str, ids: list[NodeId], types: list[str], datas: list[Any]) -> None:
        """Take in one path, root first."""
        items: dict[str, list[list[str]]] = {}
        values: dict[str, list[str]] = {}
        line: list[str] = []
        written: dict[str, Any] = {}
        for id, kind, data in zip(ids, types, datas, strict=True):
            if kind == ITEM:
                if "v" in data:
                    elem = data["v"]
                else:  # an element a pending write on the path holds
                    node, entry, at = data["r"]
                    elem = written[node]["w"][entry][3][at]
                items.setdefault(data["c"], []).append(elem)
            elif kind == VALUE:
                values[data["c"]] = data["v"]
            elif kind == CHECKPOINT:
                line.append(data["id"])
                if data["id"] not in self.ckpts:
                    totals = {c: len(items.get(c, ())) for c in data["lists"]}
                    segs = {c: runs(spec, totals[c]) for c, spec in data["lists"].items()}
                    lists = {c: [e for end, n in segs[c] for e in items[c][end - n:end]]
                             for c in segs}
                    self.ckpts[data["id"]] = Ckpt(id, data, lists,
                                                  {c: values[c] for c in data["values"]},
                                                  segs, totals)
            elif kind == WRITES:
                written[id] = data
                if id not in self._seen:
                    self._seen.add(id)
                    self.writes.setdefault(data["at"], []).append(data)
        self.lines[ref] = line


def runs(spec: int | list[list[int]], total: int) -> list[list[int]]:
    """A checkpoint's list as runs ``[end, count]``: ``spec`` is the runs, or ``n`` for the
    last ``n`` items on the path (``total`` of them then), as a list that grew is kept."""
    if isinstance(spec, int):
        return [[total, spec]] if spec else []
    return spec


def cut_runs(segs: list[list[int]], keep: int) -> list[list[int]]:
    """The runs of a list's first ``keep`` elements."""
    out = []
    for end, n in segs:
        if keep <= 0:
            break
        take = min(n, keep)
        out.append([end - n + take, take])
        keep -= take
    return out


def joined_runs(segs: list[list[int]]) -> list[list[int]]:
    """Runs with each that ends where the next begins made one."""
    out: list[list[int]] = []
    for end, n in segs:
        if out and out[-1][0] == end - n:
            out[-1] = [end, out[-1][1] + n]
        else:
            out.append([end, n])
    return out


def spec_of(segs: list[list[int]], total: int) -> int | list[list[int]]:
    """How a checkpoint names its list: ``n`` for the last ``n`` items (a list that grew)."""
    if not segs:
        return 0
    if len(segs) == 1 and segs[0][0] == total:
        return segs[0][1]
    return segs


def read_history(store: Store, tips: Iterable[tuple[str, NodeId]]) -> History:
    """The history on the paths to ``tips`` (``(ref, node)`` pairs)."""
    history = History()
    for ref, tip in tips:
        chain = store.chain_at(tip)
        history.add_path(ref, chain.ids, chain.types, chain.datas)
    return history


def node_data(store: Store, id: NodeId) -> tuple[str, NodeId | None, Any]:
    """A stored node's type, parent and decoded data."""
    stored = store.node(id)
    return stored.type, stored.parent, decode_data(stored.encoded)
