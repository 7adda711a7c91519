"""The human title of a session and where it came from, for ``sess branch -v`` and
``sess show SESSION``.

The title is the first of: the ``title`` of the session's metadata (what pi's
``session_info`` and a seed file's ``.meta.json`` give), the summary Claude Code wrote of
this conversation (a ``claude/summary`` record, of the same file, whose ``leafUuid`` is on the
session's path), the first user message. The source is the file an import read (its
provenance, :meth:`~sesstree.repo.store.Store.session_origin`) or the endpoint and model a
``sess run`` used.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..repo.store import Store
from ..store.base import RUN_KEY, ImportOrigin
from ..text import content_text

__all__ = ["Title", "Titles", "session_title"]


class Title(msgspec.Struct, frozen=True):
    """A session's title (None if it has no text at all) and its source (None: made here)."""

    title: str | None
    source: str | None


class Titles:
    """Titles of a store's sessions, reading each session's metadata and history once.

    Claude Code writes its summaries at the top of a transcript, before the conversation:
    they land in a session of their own (the file's records before its first entry), so the
    summary of a session is looked for in every session imported from the same file.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._meta: dict[str, dict[str, Any]] = {}
        self._origin: dict[str, ImportOrigin | None] = {}
        self._summaries: dict[str, dict[str, str]] = {}  # source file -> leafUuid -> summary
        self._formats: dict[str, str] | None = None  # source file -> format of its holder

    def meta(self, name: str) -> dict[str, Any]:
        """The metadata of session ``name`` ({} for none)."""
        if name not in self._meta:
            found = self.store.get_session_meta(name)
            self._meta[name] = found if isinstance(found, dict) else {}
        return self._meta[name]

    def origin(self, name: str) -> ImportOrigin | None:
        """Where session ``name`` was imported from, or None."""
        if name not in self._origin:
            self._origin[name] = self.store.session_origin(name)
        return self._origin[name]

    def of(self, name: str) -> Title:
        """The title and source of session ``name`` (which exists)."""
        meta = self.meta(name)
        title = meta.get("title") if isinstance(meta.get("title"), str) else None
        if not title:
            title = self._from_history(name)
        origin = self.origin(name)
        source = f"{origin.format}: {origin.source}" if origin is not None else _source(meta)
        if source is None:
            source = self._imported_from(name)
        return Title(_first_line(title) if title else None, source)

    def _imported_from(self, name: str) -> str | None:
        """The file session ``name`` was imported from, by its reflog, when it holds no
        provenance: a file's main line is held by one session (the one a re-import updates),
        so a later import of the same file under another name (``--as``) takes it over, but
        this session came from that file all the same. The newest import move since the
        session was last created says which file; the format is that of the session that
        holds the file now, if one does."""
        entries = self.store.reflog(name)
        born = max((k for k, e in enumerate(entries) if e.new is None), default=-1)
        for entry in reversed(entries[born + 1:]):
            path = _import_path(entry.reason)
            if path is None:
                continue
            if self._formats is None:  # which file is held in which format, looked up once
                self._formats = {}
                for info in self.store.sessions():
                    if (origin := self.origin(info.name)) is not None:
                        self._formats[origin.source] = origin.format
            fmt = self._formats.get(path)
            return f"{fmt}: {path}" if fmt is not None else path
        return None

    def _from_history(self, name: str) -> str | None:
        head = self.store.session_head(name)
        if head is None:
            return None
        chain = self.store.chain(head)
        origin = self.origin(name)
        if origin is not None and origin.format == "claude":
            summaries = self._claude_summaries(origin.source)
            at = {data["uuid"]: i for i, (kind, data) in
                  enumerate(zip(chain.types, chain.datas, strict=True))
                  if kind.startswith("claude/") and isinstance(data, dict)
                  and isinstance(data.get("uuid"), str)}
            on_path = [leaf for leaf in summaries if leaf in at]
            if on_path:  # the conversation's own summary; the furthest along if several
                return summaries[max(on_path, key=at.__getitem__)]
        for kind, data in zip(chain.types, chain.datas, strict=True):
            if kind == "user/message" and isinstance(data, dict):
                text = content_text(data.get("content")).strip()
                if text:
                    return text
        return None

    def _claude_summaries(self, source: str) -> dict[str, str]:
        if source not in self._summaries:
            found: dict[str, str] = {}
            for info in self.store.sessions():
                origin = self.origin(info.name)
                if origin is None or origin.source != source:
                    continue
                chain = self.store.chain(info.head)
                for kind, data in zip(chain.types, chain.datas, strict=True):
                    if kind == "claude/summary" and isinstance(data, dict) and isinstance(
                            data.get("leafUuid"), str) and isinstance(data.get("summary"), str):
                        found[data["leafUuid"]] = data["summary"]
            self._summaries[source] = found
        return self._summaries[source]


def session_title(store: Store, name: str) -> Title:
    """The title and source of session ``name`` (which exists)."""
    return Titles(store).of(name)


def _first_line(text: str, width: int = 100) -> str:
    line = " ".join(text.strip().split("\n", 1)[0].split())
    return line if len(line) <= width else line[: width - 1] + "…"


# What an import's reflog reasons say after its file's path (interop/common.py): whole, as
# the end of the reason, since a path may hold these words too ("how it grew/x.jsonl").
_KEPT = "; previous head kept in this reflog"
_IMPORT_TAILS = (" grew", " extends this session", " was edited since its last import" + _KEPT,
                 " went on from an earlier point" + _KEPT,
                 " replaced this session's history (--force)" + _KEPT)


def _import_path(reason: str) -> str | None:
    """The file an ``import: PATH ...`` reflog reason names, or None for another move."""
    if not reason.startswith("import: "):
        return None
    rest = reason[len("import: "):]
    for tail in _IMPORT_TAILS:
        if rest.endswith(tail) and len(rest) > len(tail):
            return rest[:-len(tail)]
    return rest or None


def _source(meta: dict[str, Any]) -> str | None:
    """Where a session not imported (or imported before provenance was kept) came from."""
    run = meta.get(RUN_KEY)
    if isinstance(run, dict) and isinstance(run.get("model"), str):
        return f"run: {run['model']} at {run.get('base_url', '?')}"
    if isinstance(meta.get("source"), str):
        fmt = meta.get("format")
        return f"{fmt}: {meta['source']}" if isinstance(fmt, str) else meta["source"]
    return None
