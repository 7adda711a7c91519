"""The ``sess`` command line: git-shaped, thin over the Python API.

:mod:`.core` finds the store, turns every error into one line and holds the entry point; the
commands live in :mod:`.sessions`, :mod:`.reading`, :mod:`.storage` and the modules beside
them (``run`` in :mod:`sesstree.agent.command`), each loaded only when one of its commands
is used (see ``_Group.lazy``). See ``docs/cli.md``.
"""

from __future__ import annotations

from .core import StoreLocator, cli, main

__all__ = ["StoreLocator", "cli", "main"]
