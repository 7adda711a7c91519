"""An in-memory backend: the reference implementation the conformance suite also runs on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import NamedTuple

import msgspec

from ..errors import ConflictError, MissingNodeError
from ..node import ID_VERSION, NodeId, parse_symbolic
from .base import (
    Chain,
    IndexCounts,
    IndexHit,
    Progress,
    RawNode,
    Ref,
    ReflogEntry,
    RefUpdate,
    SearchQuery,
    SessionMeta,
    StoredNode,
    StoreFormat,
    WatchMark,
    describe,
)
from .storable import check_commit, check_head, check_session_meta, check_text
from .textmatch import check_query, matches, node_role, node_text

__all__ = ["MemoryBackend"]

_decode = msgspec.msgpack.Decoder().decode


class _Entry(NamedTuple):
    """A node's entry in the memory engine's text index."""

    key: int
    role: str
    text: str


class MemoryBackend:
    """Nodes, refs and reflog in dicts. Thread-safe; gone when the process ends."""

    def __init__(self) -> None:
        self._nodes: dict[NodeId, StoredNode] = {}
        # When each node was first recorded (see ObjectStore.recorded).
        self._times: dict[NodeId, float] = {}
        # The text index: each stored node's key (write order), role and search text, written
        # with the node in the same step (so it is never behind, and a search is a scan).
        self._index: dict[NodeId, _Entry] = {}
        self._next_key = 1
        self._refs: dict[str, Ref] = {}
        self._reflog: list[ReflogEntry] = []
        # Where each ref's newest reflog entry is in the list (what a fold rewrites).
        self._newest: dict[str, int] = {}
        self._session_meta: dict[str, SessionMeta] = {}
        self._head: str | None = None
        self._marks: dict[str, WatchMark] = {}
        # Every read and write holds the lock: a reader iterating a dict while another thread
        # writes it would otherwise fail ("dictionary changed size during iteration").
        self._lock = threading.RLock()
        self._batch_depth = 0
        self._batch_time: float | None = None  # when the open batch began (its nodes' time)
        # Inside a batch: how to undo each change made so far, newest last. A rollback runs
        # them backwards; the store is never copied, so a batch costs what it writes.
        self._undo: list[Callable[[], None]] | None = None

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        check_commit(nodes, updates)
        with self._lock:
            for u in updates:
                current = self._refs.get(u.name)
                if (current.target if current else None) != u.old:
                    raise ConflictError(
                        f"{u.name} moved: expected {describe(u.old)}, "
                        f"found {describe(current.target if current else None)}"
                    )
            staged: dict[NodeId, StoredNode] = {}
            for n in nodes:
                if n.id in self._nodes or n.id in staged:
                    continue
                depth = 1
                if n.parent is not None:
                    parent = self._nodes.get(n.parent) or staged.get(n.parent)
                    if parent is None:
                        raise MissingNodeError(f"parent {n.parent[:12]} of {n.id[:12]} is not stored")
                    depth = parent.depth + 1
                staged[n.id] = StoredNode(n.id, n.parent, depth, n.type, n.encoded)
            for u in updates:
                if u.new is not None and u.new not in self._nodes and u.new not in staged:
                    raise MissingNodeError(f"{u.name}: target {u.new[:12]} is not stored")
            now = time.time()
            self._nodes.update(staged)
            self._index_nodes(staged.values())
            # (A batch lands at once: its nodes are dated alike, when it began.)
            self._times.update(dict.fromkeys(staged, self._batch_time or now))
            if self._undo is not None and staged:
                self._undo.append(lambda: self._drop_nodes(staged))
            for u in updates:
                self._remember_ref(u.name)
                if u.new is None:
                    self._refs.pop(u.name, None)
                else:
                    self._refs[u.name] = Ref(u.name, u.new, now)
                self._log(u, now)

    def _index_nodes(self, nodes: Iterable[StoredNode]) -> None:
        for n in nodes:
            data = _decode(n.encoded)
            self._index[n.id] = _Entry(self._next_key, node_role(n.type, data), node_text(n.type, data))
            self._next_key += 1

    def search_nodes(self, query: SearchQuery, limit: int, before: int | None = None) -> list[IndexHit]:
        check_query(query)
        roles, types = set(query.roles), set(query.types)
        hits: list[IndexHit] = []
        with self._lock:
            entries = sorted(self._index.items(), key=lambda item: -item[1].key)
            for id, entry in entries:
                if len(hits) >= limit:
                    break
                if before is not None and entry.key >= before:
                    continue
                node = self._nodes[id]
                when = self._times.get(id)
                if (roles and entry.role not in roles) or (types and node.type not in types):
                    continue
                if (query.since is not None or query.until is not None) and (
                        when is None or (query.since is not None and when < query.since)
                        or (query.until is not None and when > query.until)):
                    continue
                if matches(query, entry.text):
                    hits.append(IndexHit(id, node.type, entry.role, node.depth, when, entry.key,
                                         entry.text))
        return hits

    def index_faults(self, progress: Progress | None = None) -> list[str]:
        faults: list[str] = []
        with self._lock:
            for id, node in self._nodes.items():
                entry = self._index.get(id)
                data = _decode(node.encoded)
                if entry is None:
                    faults.append(f"text index: node {id[:12]} has no entry")
                elif (entry.role, entry.text) != (node_role(node.type, data), node_text(node.type, data)):
                    faults.append(f"text index: the entry of node {id[:12]} is not its text")
            faults += [f"text index: an entry for node {id[:12]}, which is not stored"
                       for id in self._index if id not in self._nodes]
        return faults

    def rebuild_index(self, progress: Progress | None = None) -> IndexCounts:
        with self._lock:
            self._index.clear()
            self._index_nodes(self._nodes.values())
            return self.index_counts()

    def index_counts(self) -> IndexCounts:
        with self._lock:
            size = sum(len(e.text.encode()) for e in self._index.values())
            return IndexCounts(len(self._index), size, 0)

    def _log(self, u: RefUpdate, now: float) -> None:
        """Add the move's reflog entry, or fold it into the ref's newest one."""
        i = self._newest.get(u.name) if u.fold else None
        if i is not None:
            entry = self._reflog[i]
            if self._undo is not None:
                self._undo.append(partial(self._put_entry, i, entry))
            started = entry.started if entry.started is not None else entry.time
            self._reflog[i] = ReflogEntry(u.name, entry.old, u.new, now, u.reason, started)
            return
        self._newest[u.name] = len(self._reflog)
        self._reflog.append(ReflogEntry(u.name, u.old, u.new, now, u.reason))

    def _reindex(self) -> None:
        """Find each ref's newest entry again, after the log was rewritten or cut back."""
        self._newest = {e.ref: i for i, e in enumerate(self._reflog)}

    def _put_entry(self, i: int, entry: ReflogEntry) -> None:
        if i < len(self._reflog):
            self._reflog[i] = entry

    def _remember_ref(self, name: str) -> None:
        """Inside a batch, note how to put ref ``name`` back as it is now."""
        if self._undo is not None:
            before = self._refs.get(name)

            def restore() -> None:
                if before is None:
                    self._refs.pop(name, None)
                else:
                    self._refs[name] = before

            self._undo.append(restore)

    def _remember_reflog(self) -> None:
        """Inside a batch, note how to put the reflog back: appends are undone by length,
        a rewrite (rename, expire) by the list it replaced."""
        if self._undo is not None:
            log, length = self._reflog, len(self._reflog)

            def restore() -> None:
                self._reflog = log
                del self._reflog[length:]

            self._undo.append(restore)

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock:
            outer = self._batch_depth == 0
            if outer:
                self._undo = []
                self._remember_reflog()
                self._batch_time = time.time()
            self._batch_depth += 1
            try:
                yield
            except BaseException:
                if outer and self._undo is not None:
                    for undo in reversed(self._undo):
                        undo()
                    self._reindex()
                raise
            finally:
                self._batch_depth -= 1
                if outer:
                    self._undo = None
                    self._batch_time = None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # The lock keeps other threads' writes out until the block ends.
        with self._lock:
            yield

    def get(self, id: NodeId) -> StoredNode | None:
        with self._lock:
            return self._nodes.get(id)

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        with self._lock:
            return {i for i in ids if i in self._nodes}

    def recorded(self, ids: Sequence[NodeId]) -> dict[NodeId, float]:
        with self._lock:
            return {i: self._times[i] for i in ids if i in self._nodes and i in self._times}

    def chain(self, head: NodeId, limit: int | None = None) -> Chain:
        with self._lock:
            return self._chain(head, limit)

    def _chain(self, head: NodeId, limit: int | None) -> Chain:
        ids: list[NodeId] = []
        types: list[str] = []
        raws: list[bytes] = []
        node = self._nodes.get(head)
        if node is None:
            raise KeyError(head)
        start_depth = node.depth
        base: NodeId | None = None
        while node is not None and (limit is None or len(ids) < limit):
            ids.append(node.id)
            types.append(node.type)
            raws.append(node.encoded)
            start_depth = node.depth
            base = node.parent
            node = self._nodes.get(node.parent) if node.parent is not None else None
        ids.reverse()
        types.reverse()
        raws.reverse()
        return Chain(types, [_decode(r) for r in raws], start_depth, base, ids=ids)

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        found: list[NodeId] = []
        with self._lock:
            for i in self._nodes:
                if i.startswith(prefix):
                    found.append(i)
                    if len(found) >= limit:
                        break
        return found

    def get_ref(self, name: str) -> Ref | None:
        with self._lock:
            return self._refs.get(name)

    def list_refs(self, prefix: str) -> list[Ref]:
        with self._lock:
            refs = [r for r in self._refs.values() if r.name.startswith(prefix)]
        return sorted(refs, key=lambda r: r.name)

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        with self._lock:
            if name is not None:
                return [e for e in self._reflog if e.ref == name]
            # By time, as the disk engines give it: a fold gives an older entry a later time.
            # (sorted is stable: ties stay in the order the entries were made.)
            return sorted(self._reflog, key=lambda e: e.time)

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        check_commit((), [RefUpdate(old, target, None, reason), RefUpdate(new, None, target,
                                                                          reason)])
        with self._lock:
            current, taken = self._refs.get(old), self._refs.get(new)
            if current is None or current.target != target or taken is not None:
                raise ConflictError(f"cannot rename {old} to {new}: one of them moved")
            self._remember_ref(old)
            self._remember_ref(new)
            self._remember_reflog()
            # As on disk: the log of `old` moves over and one entry records the rename.
            self._reflog = [
                msgspec.structs.replace(e, ref=new) if e.ref == old else e
                for e in self._reflog
            ]
            del self._refs[old]
            now = time.time()
            self._refs[new] = Ref(new, target, now)
            self._reflog.append(ReflogEntry(new, target, target, now, reason))
            self._reindex()

    def expire_reflog(self, name: str) -> int:
        with self._lock:
            mine = [e for e in self._reflog if e.ref == name]
            keep = mine[-1:] if name in self._refs else []
            # The entry kept no longer remembers where the ref was before it.
            forgotten = [msgspec.structs.replace(e, old=None) for e in keep]
            self._remember_reflog()
            self._reflog = [e for e in self._reflog if e.ref != name] + forgotten
            self._reindex()
            return len(mine) - len(keep)

    def get_session_meta(self, name: str) -> SessionMeta | None:
        with self._lock:
            return self._session_meta.get(name)

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        check_session_meta(name, meta)  # what the other engines could not store, refused
        with self._lock:
            if self._undo is not None:
                self._undo.append(partial(self._put_meta, name, self._session_meta.get(name)))
            # As on disk: a legacy origin is never written.
            self._put_meta(name, msgspec.structs.replace(meta, legacy_origin=None)
                           if meta else None)

    def _put_meta(self, name: str, meta: SessionMeta | None) -> None:
        if meta:
            self._session_meta[name] = meta
        else:
            self._session_meta.pop(name, None)

    def list_session_meta(self) -> dict[str, SessionMeta]:
        with self._lock:
            return dict(self._session_meta)

    def list_watch_marks(self) -> dict[str, WatchMark]:
        with self._lock:
            return dict(self._marks)

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        check_text(path, "watched path")
        with self._lock:
            found = self._marks.get(path)
            if found != old:
                raise ConflictError(f"the watch mark of {path} moved: another watcher read it")
            if self._undo is not None:
                self._undo.append(partial(self._put_mark, path, found))
            self._put_mark(path, new)

    def _put_mark(self, path: str, mark: WatchMark | None) -> None:
        if mark is None:
            self._marks.pop(path, None)
        else:
            self._marks[path] = mark

    def get_head(self) -> str | None:
        with self._lock:
            return self._head

    def set_head(self, value: str) -> None:
        check_head(value)
        with self._lock:
            if self._undo is not None:
                self._undo.append(partial(setattr, self, "_head", self._head))
            self._head = value

    def store_format(self) -> StoreFormat:
        return StoreFormat(1, f"blake3-msgpack-v{ID_VERSION}")  # never written anywhere

    def iter_nodes(self) -> Iterator[StoredNode]:
        # Insertion order of a dict is parents-first, as nodes are only stored after parents.
        with self._lock:
            nodes = list(self._nodes.values())
        yield from nodes

    def count_nodes(self) -> int:
        with self._lock:
            return len(self._nodes)

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        with self._lock:
            gone = {i: n for i in ids if (n := self._nodes.pop(i, None)) is not None}
            times = {i: self._times.pop(i) for i in gone if i in self._times}
            entries = {i: self._index.pop(i) for i in gone if i in self._index}
            if self._undo is not None and gone:
                # Parents first, as iter_nodes promises: by depth.
                self._undo.append(lambda: self._nodes.update(
                    sorted(gone.items(), key=lambda item: item[1].depth)))
                self._undo.append(lambda: self._times.update(times))
                self._undo.append(lambda: self._index.update(entries))
            return len(gone)

    def _drop_nodes(self, ids: dict[NodeId, StoredNode]) -> None:
        for i in ids:
            self._nodes.pop(i, None)
            self._times.pop(i, None)
            self._index.pop(i, None)

    def collect_garbage(
        self, dry_run: bool, keep: NodeId | None = None
    ) -> tuple[list[NodeId], int, int]:
        with self._lock:
            roots = {r.target for r in self._refs.values()}
            if keep is not None:
                roots.add(keep)
            roots.update(t for e in self._reflog for t in (e.old, e.new) if t is not None)
            head = self._head
            if head is not None and parse_symbolic(head) is None:
                roots.add(NodeId(head))
            live: set[NodeId] = set()
            for root in roots:
                cur: NodeId | None = root
                while cur is not None and cur not in live and cur in self._nodes:
                    live.add(cur)
                    cur = self._nodes[cur].parent
            dead = [i for i in reversed(self._nodes) if i not in live]
            removed = 0 if dry_run else self.delete_nodes(dead)
            return dead, removed, len(live)

    def check(self) -> list[str]:
        return []

    def physical_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass
