"""The human title of a session and where it came from, for ``sess branch -v`` and
``sess show SESSION``.

The title is the first of: the ``title`` of the session's metadata (what pi's
``session_info`` and a seed file's ``.meta.json`` give), the newest summary Claude Code wrote
into the transcript (a ``claude/summary`` record), the first user message. The source is the
file an import read (its ``sesstree.import`` provenance) or the endpoint and model a ``sess
run`` used.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..repo import Store
from .conversation import content_text

__all__ = ["RUN_KEY", "Title", "session_title"]

#: The session metadata key where ``sess run`` remembers how it ran a session.
RUN_KEY = "sesstree.run"
#: Where an import's provenance is kept (``sesstree.interop.provenance.PROVENANCE_KEY``;
#: named here so that listing sessions does not load the importers).
_IMPORT_KEY = "sesstree.import"


class Title(msgspec.Struct, frozen=True):
    """A session's title (None if it has no text at all) and its source (None: made here)."""

    title: str | None
    source: str | None


def session_title(store: Store, name: str) -> Title:
    """The title and source of session ``name`` (which exists)."""
    meta = store.get_session_meta(name) or {}
    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    if not title:
        title = _from_history(store, name)
    return Title(_first_line(title) if title else None, _source(meta))


def _from_history(store: Store, name: str) -> str | None:
    head = store.session_head(name)
    if head is None:
        return None
    chain = store.chain(head)
    for kind, data in zip(reversed(chain.types), reversed(chain.datas), strict=True):
        if kind == "claude/summary" and isinstance(data, dict) and isinstance(
                data.get("summary"), str) and data["summary"].strip():
            return str(data["summary"])
    for kind, data in zip(chain.types, chain.datas, strict=True):
        if kind == "user/message" and isinstance(data, dict):
            text = content_text(data.get("content")).strip()
            if text:
                return text
    return None


def _first_line(text: str, width: int = 100) -> str:
    line = " ".join(text.strip().split("\n", 1)[0].split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _source(meta: dict[str, Any]) -> str | None:
    origin = meta.get(_IMPORT_KEY)
    if isinstance(origin, dict) and isinstance(origin.get("source"), str):
        fmt = origin.get("format")
        return f"{fmt}: {origin['source']}" if isinstance(fmt, str) else origin["source"]
    run = meta.get(RUN_KEY)
    if isinstance(run, dict) and isinstance(run.get("model"), str):
        return f"run: {run['model']} at {run.get('base_url', '?')}"
    if isinstance(meta.get("source"), str):
        fmt = meta.get("format")
        return f"{fmt}: {meta['source']}" if isinstance(fmt, str) else meta["source"]
    return None
