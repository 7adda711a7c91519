"""The Claude Agent SDK's ``SessionStore`` on a sesstree store.

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore

    options = ClaudeAgentOptions(session_store=SesstreeSessionStore("~/agent-store"))

Each transcript becomes the sessions ``sess import`` makes of the same lines (``sess log``,
the web view, ``sess push``/``pull``), node for node, and an index beside them gives ``load``
back every line exactly as it was appended (:mod:`.claude_agent_sdk_keys`). Entries with a
``uuid`` are idempotent; a fork made by the SDK stores only what it changed
(:mod:`.claude_agent_sdk_tree`); every append is one compare-and-set transaction with the
SDK's summary folded in it (:mod:`.claude_agent_sdk_writes`).

The SDK is an optional dependency: ``pip install sesstree[claude-agent-sdk]``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from ..repo.store import Store, open_store
from .claude_agent_sdk_keys import clean_key, find, index_data, indexed, project_prefix, read_lines
from .claude_agent_sdk_writes import append_entries, delete_key

__all__ = ["SesstreeSessionStore"]


def _fold(prev: Any, key: dict[str, str], entries: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(fold_session_summary(prev, key, entries))  # type: ignore[arg-type]


class SesstreeSessionStore(SessionStore):
    """A ``SessionStore`` kept in a sesstree store.

    ``store`` is an open :class:`~sesstree.Store` (it stays the caller's to close) or a
    location to open: a folder, ``postgresql://...`` (then :meth:`close` closes it).
    """

    def __init__(self, store: Store | str | os.PathLike[str]) -> None:
        if isinstance(store, Store):
            self.store, self._owned = store, False
        else:
            self.store, self._owned = open_store(os.path.expanduser(os.fspath(store))), True
        # One call at a time on the store's connection; each runs in a worker thread
        # (asyncio.to_thread), so that a store on a server never stalls the agent's loop.
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the store if this object opened it."""
        if self._owned:
            self.store.close()

    async def _run(self, fn: Any, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return fn(*args)

        return await asyncio.to_thread(locked)

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append a batch of transcript lines; lines whose ``uuid`` is stored are skipped."""
        if entries:
            await self._run(append_entries, self.store, clean_key(key),
                            [dict(e) for e in entries], _fold)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every line appended to ``key``, in order, or None for a key never written."""
        return await self._run(self._load, clean_key(key))  # type: ignore[no-any-return]

    def _load(self, key: dict[str, str]) -> list[Any] | None:
        keyed = find(self.store, key)
        if keyed.head is None:
            return None
        return [ln.final for ln in read_lines(self.store, keyed.name, keyed.head).lines]

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main transcripts of ``project_key`` with their last write times (epoch ms)."""
        found = await self._run(self._heads, project_key)
        return [{"session_id": d["key"]["session_id"], "mtime": d["mtime"]} for d in found]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summaries of ``project_key``'s sessions, as folded at each append."""
        found = await self._run(self._heads, project_key)
        return [d["summary"] for d in found if "summary" in d]

    def _heads(self, project_key: str) -> list[dict[str, Any]]:
        out = []
        for _, head in indexed(self.store, project_prefix(project_key)):
            data = index_data(self.store, head)
            key = data["key"]
            if key["project_key"] == project_key and "subpath" not in key:
                out.append(data)
        return out

    async def delete(self, key: SessionKey) -> None:
        """Delete a transcript (a main one with its subagents'); the reflog keeps it."""
        await self._run(delete_key, self.store, clean_key(key))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths stored under a session (its subagents' transcripts)."""
        return await self._run(self._subkeys, clean_key(key))  # type: ignore[no-any-return]

    def _subkeys(self, key: dict[str, str]) -> list[str]:
        out = []
        for _, head in indexed(self.store, find(self.store, key).name + "/"):
            sub = index_data(self.store, head)["key"]
            if (sub.get("subpath") and sub["project_key"] == key["project_key"]
                    and sub["session_id"] == key["session_id"]):
                out.append(sub["subpath"])
        return sorted(out)
