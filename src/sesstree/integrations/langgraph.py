"""LangGraph's checkpointer on a sesstree store.

::

    from langgraph.graph import StateGraph
    from sesstree.integrations.langgraph import SesstreeSaver

    graph = builder.compile(checkpointer=SesstreeSaver("~/agent-store"))

A thread is a session (``langgraph/THREAD``; a subgraph's namespace one beside it); each
checkpoint is a node whose parent path runs through its parent checkpoint, so
``get_state_history`` walks the DAG, and a checkpoint put on an older one (time travel,
``update_state``) is a fork: a branch session sharing the history up to there. What a
checkpoint holds that its parent held already is not stored again: a ``messages`` channel
keeps each message once, however many checkpoints and forks hold it
(:mod:`.langgraph_history`). ``copy_thread`` is O(1): new refs at the same nodes. Every write
is one compare-and-set commit (:mod:`.langgraph_writes`); values go through the saver's
``serde`` (LangGraph's ``JsonPlusSerializer`` unless one is given).

Both classes have the sync and the async methods; the async ones run the store work in a
worker thread, so that a store on a server never stalls the event loop.
The framework is an optional dependency: ``pip install sesstree[langgraph]``.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..node import NodeId, session_name
from ..repo.store import Store, open_store
from .langgraph_history import (
    CHECKPOINT,
    Ckpt,
    History,
    base_name,
    leaves,
    node_data,
    read_history,
    split_name,
    thread_refs,
    untyped,
)
from .langgraph_writes import Writer

__all__ = ["AsyncSesstreeSaver", "SesstreeSaver"]

_T = TypeVar("_T")


def _cfg(thread: str, ns: str, ckpt: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": ckpt}}


class SesstreeSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer kept in a sesstree store.

    ``store`` is an open :class:`~sesstree.Store` (it stays the caller's to close) or a
    location to open: a folder, ``postgresql://...`` (then :meth:`close` closes it).
    ``serde`` is LangGraph's serializer protocol (default ``JsonPlusSerializer``).
    """

    def __init__(self, store: Store | str | os.PathLike[str], *,
                 serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        if isinstance(store, Store):
            self.store, self._owned = store, False
        else:
            self.store, self._owned = open_store(os.path.expanduser(os.fspath(store))), True
        # One call at a time on the store's connection (the async ones from worker threads).
        self._lock = threading.RLock()
        self._writer = Writer(self.store, self.serde)

    def close(self) -> None:
        """Close the store if this saver opened it."""
        if self._owned:
            self.store.close()

    def __enter__(self) -> SesstreeSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _locked(self, fn: Callable[..., _T], *args: Any) -> _T:
        with self._lock:
            return fn(*args)

    async def _off_loop(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(self._locked, fn, *args)

    # -- reading ------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its thread's newest without a checkpoint id)."""
        return self._locked(self._get_tuple, config)

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        wanted = get_checkpoint_id(config)
        tips = leaves(self.store, base_name(thread, ns))
        if not tips:
            return None
        held = [(self._writer_tip(tip), ref, tip) for ref, tip in tips]
        if wanted is None:
            best = max((h for h in held if h[0] is not None), default=None,
                       key=lambda h: str(h[0]))
            if best is None:
                return None
            wanted, paths = best[0], [(best[1], best[2])]
        else:
            paths = [(ref, tip) for cid, ref, tip in held if cid == wanted] or tips
        history = read_history(self.store, paths)
        ck = history.ckpts.get(str(wanted))
        return None if ck is None else self._tuple(thread, ns, ck, history, {})

    def _writer_tip(self, tip: NodeId) -> str | None:
        kind, _, data = node_data(self.store, tip)
        held = data.get("id") if kind == CHECKPOINT else data.get("on", data.get("at"))
        return held if isinstance(held, str) else None

    def _tuple(self, thread: str, ns: str, ck: Ckpt, history: History,
               seen: dict[int, Any], metadata: Any = None) -> CheckpointTuple:
        def value(stored: list[str]) -> Any:
            # Elements shared by many checkpoints are decoded once per read.
            key = id(stored)
            if key not in seen:
                seen[key] = (stored, untyped(self.serde, stored))
            return seen[key][1]

        checkpoint = untyped(self.serde, ck.data["cp"])
        values: dict[str, Any] = {c: [value(e) for e in elems] for c, elems in ck.lists.items()}
        values.update((c, untyped(self.serde, v)) for c, v in ck.values.items())
        checkpoint["channel_values"] = values
        md = metadata if metadata is not None else untyped(self.serde, ck.data["md"])
        parent = ck.data.get("parent")
        return CheckpointTuple(
            config=_cfg(thread, ns, ck.data["id"]), checkpoint=checkpoint, metadata=md,
            parent_config=_cfg(thread, ns, parent) if parent else None,
            pending_writes=self._pending(history, ck.data["id"]))

    def _pending(self, history: History, ckpt: str) -> builtins.list[tuple[str, str, Any]]:
        kept: dict[tuple[str, int], tuple[str, str, Any]] = {}
        for data in history.writes.get(ckpt, ()):
            for entry in data["w"]:
                idx, channel, stored = entry[0], entry[1], entry[2]
                key = (data["task"], idx)
                if idx < 0 or key not in kept:  # a special write replaces, a plain one stays
                    value = (untyped(self.serde, stored) if stored is not None
                             else [untyped(self.serde, e) for e in entry[3]])
                    kept[key] = (data["task"], channel, value)
        return list(kept.values())

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """The checkpoints of a thread (of one namespace when the config names it; of every
        thread with no config), newest first; ``filter`` matches metadata keys, ``before``
        keeps those older than its checkpoint, ``limit`` the first so many."""
        return iter(self._locked(self._list, config, filter, before, limit))

    def _list(self, config: RunnableConfig | None, filter: dict[str, Any] | None,
              before: RunnableConfig | None, limit: int | None) -> builtins.list[CheckpointTuple]:
        conf = config["configurable"] if config is not None else {}
        thread = str(conf["thread_id"]) if conf.get("thread_id") is not None else None
        ns = conf.get("checkpoint_ns")
        only = get_checkpoint_id(config) if config is not None else None
        edge = get_checkpoint_id(before) if before is not None else None
        groups: dict[tuple[str, str], builtins.list[tuple[str, NodeId]]] = {}
        for ref, tip in thread_refs(self.store, thread):
            key = split_name(str(session_name(ref)))
            if key is not None and (ns is None or key[1] == ns):
                groups.setdefault(key, []).append((ref, tip))
        found: builtins.list[tuple[str, str, str, Ckpt, History, Any]] = []
        for (t, n), tips in groups.items():
            history = read_history(self.store, tips)
            for cid, ck in history.ckpts.items():
                if (only is not None and cid != only) or (edge is not None and cid >= edge):
                    continue
                md = untyped(self.serde, ck.data["md"])
                if filter and not all(md.get(k) == v for k, v in filter.items()):
                    continue
                found.append((cid, t, n, ck, history, md))
        found.sort(key=lambda f: f[0], reverse=True)
        seen: dict[int, Any] = {}
        return [self._tuple(t, n, ck, h, seen, md) for _, t, n, ck, h, md in found[:limit]]

    # -- writing ------------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint on its parent (``config``'s checkpoint id); only what the parent
        does not hold is written."""
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        self._locked(self._writer.put, thread, ns, conf.get("checkpoint_id"), dict(checkpoint),
                     dict(get_checkpoint_metadata(config, metadata)), dict(new_versions))
        return _cfg(thread, ns, checkpoint["id"])

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Store a task's pending writes on the checkpoint ``config`` names."""
        conf = config["configurable"]
        self._locked(self._writer.put_writes, str(conf["thread_id"]),
                     conf.get("checkpoint_ns", ""), conf["checkpoint_id"], list(writes),
                     task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: its sessions go (``sess gc`` removes the nodes)."""
        self._locked(self._writer.delete_thread, str(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Make thread ``target`` a copy of ``source``, every checkpoint and namespace: O(1)
        in the history's length (refs to the same nodes)."""
        self._locked(self._writer.copy_thread, str(source_thread_id), str(target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (with their writes) that the given runs made."""
        runs = set(run_ids)
        if runs:
            self._locked(self._writer.drop, None, lambda cks: {
                cid for cid, data in cks.items() if data.get("run") in runs})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint only; ``delete``: delete
        the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread)
            else:
                self._locked(self._writer.drop, str(thread),
                             lambda cks: set(cks) - {max(cks)} if cks else set())

    # -- async --------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As :meth:`get_tuple`, off the event loop."""
        return await self._off_loop(self._get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        """As :meth:`list`, off the event loop."""
        for tup in await self._off_loop(self._list, config, filter, before, limit):
            yield tup

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        """As :meth:`put`, off the event loop."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        """As :meth:`put_writes`, off the event loop."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """As :meth:`delete_thread`, off the event loop."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """As :meth:`copy_thread`, off the event loop."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """As :meth:`delete_for_runs`, off the event loop."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """As :meth:`prune`, off the event loop."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


class AsyncSesstreeSaver(SesstreeSaver):
    """The saver for async graphs (``await graph.ainvoke(...)``): the same store and methods
    as :class:`SesstreeSaver`, named as LangGraph names its async savers."""
