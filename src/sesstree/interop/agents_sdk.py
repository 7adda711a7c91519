"""The OpenAI Agents SDK's ``Session`` protocol on a sesstree session.

Replace ``SQLiteSession("id", "db")`` with ``SesstreeSession("id", store)`` and the SDK's history
gains forks, dedup and the reflog. Each SDK item is stored verbatim as an ``agents/item``
event (``get_items`` returns exactly what ``add_items`` got); a renderer turns the items that
are chat messages or tool calls into chat messages, so ``store.messages()`` and the CLI read
them too.

- ``pop_item`` rewinds the session by one event; the reflog keeps the old head, so it is
  undone with ``sess reset NAME <old id>``. Popping the only item deletes the ref (sessions
  cannot point at nothing), again with the reflog entry.
- ``clear_session`` deletes the ref and keeps the history: nothing is lost, ``sess reflog
  NAME`` shows where it was, and the next ``add_items`` starts a new root.

The SDK is an optional dependency (``pip install sesstree[openai-agents]``): this module does
not import it; the class satisfies its ``Session`` protocol structurally.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..events import register_event_type
from ..repo.store import Store
from .codex import response_item_events

__all__ = ["ITEM_TYPE", "SesstreeSession"]

ITEM_TYPE = "agents/item"


def _render(item: Any) -> dict[str, Any] | None:
    events = response_item_events(item)
    if not events:
        return None
    message: dict[str, Any] = events[0][1]
    return message


register_event_type(ITEM_TYPE, render=_render)


class SesstreeSession:
    """An Agents SDK session kept in session ``session_id`` of a sesstree store."""

    #: Read by the SDK; None means its defaults.
    session_settings: Any = None

    def __init__(self, session_id: str, store: Store, *, session_settings: Any = None) -> None:
        self.session_id = session_id
        self.store = store
        self.session_settings = session_settings
        self._session = store.session(session_id)
        self._lock = threading.Lock()

    # Every method does its store work in a worker thread (asyncio.to_thread): a store on a
    # server answers in a network round trip, and an SDK agent's event loop must not wait
    # for it. The lock keeps one call at a time on the session handle.

    def _items(self) -> list[Any]:
        with self._lock:
            self._session.refresh()
            return [n.data for n in self._session.events() if n.type == ITEM_TYPE]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items of the session, oldest first; only the newest ``limit`` if given."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        items = await asyncio.to_thread(self._items)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[Any]) -> None:
        """Append the items, in one transaction."""
        if items:
            await asyncio.to_thread(self._add, [dict(item) for item in items])

    def _add(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._session.refresh()
            self._session.extend([(ITEM_TYPE, item) for item in items])

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (a rewind: undoable through the reflog)."""
        return await asyncio.to_thread(self._pop)

    def _pop(self) -> Any | None:
        with self._lock:
            self._session.refresh()
            events = self._session.events()
            for back, node in enumerate(reversed(events), 1):
                if node.type != ITEM_TYPE:
                    continue
                if back < len(events):
                    self._session.rewind(back)
                else:
                    self.store.delete_session(self.session_id)
                    self._session.refresh()
                return node.data
            return None

    async def clear_session(self) -> None:
        """Forget the session's items: the ref goes, the history stays in the reflog."""
        await asyncio.to_thread(self._clear)

    def _clear(self) -> None:
        with self._lock:
            if self.store.has_session(self.session_id):
                self.store.delete_session(self.session_id)
            self._session.refresh()
