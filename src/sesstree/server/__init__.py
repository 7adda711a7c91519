"""``sess serve``: a store over HTTP, for sync (``/api/v1/...``) and, mounted beside it, any
other view of the same store. See ``docs/sync.md`` for the API."""

from __future__ import annotations

from .app import create_app, serve

__all__ = ["create_app", "serve"]
