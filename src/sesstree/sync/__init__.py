"""Sessions that travel: remotes, fetch, pull, push and clone between any two stores.

Every node is content-addressed, so two stores find what one lacks by comparing ids, and move
only that (:mod:`.negotiate`); the receiver verifies every node before storing it
(:mod:`.pack`); refs move by compare-and-set. The other store may be a folder, a PostgreSQL
URL, or a store served over HTTP by ``sess serve`` (:mod:`sesstree.server`): the same protocol
runs over each (:mod:`.peer`). Sync is functions that take a store (``push(store, remote)``,
``fetch``, ``pull``, ``clone``), as dulwich's porcelain is: the repository layer below never
calls up into this package. See ``docs/sync.md``.
"""

from __future__ import annotations

from .ops import FetchResult, PullResult, PushResult, clone, fetch, pull, push
from .peer import RefResult
from .remotes import Remote, add_remote, get_remote, list_remotes, remove_remote

__all__ = [
    "FetchResult", "PullResult", "PushResult", "RefResult", "Remote", "add_remote", "clone",
    "fetch", "get_remote", "list_remotes", "pull", "push", "remove_remote",
]
