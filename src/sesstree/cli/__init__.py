"""The ``sess`` command line: git-shaped, thin over the Python API.

:mod:`.core` finds the store, turns every error into one line and holds the entry point; the
commands live in :mod:`.sessions`, :mod:`.reading` and :mod:`.storage` (``run`` in
:mod:`sesstree.agent.command`, loaded only when used). See ``docs/cli.md``.
"""

from __future__ import annotations

from . import reading, refs, sessions, storage, viewing  # noqa: F401 - importing them registers the commands
from .core import StoreLocator, cli, main

__all__ = ["StoreLocator", "cli", "main"]
