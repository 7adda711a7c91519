"""The repo suite: what sesstree itself promises on top of any engine, as pytest tests.

An engine passes the engine contract (:mod:`sesstree.testing.contract`); this suite checks
that the repository layer (:mod:`sesstree.repo`) behaves the same on it: revisions, HEAD,
log, show and diff (:mod:`.revisions`), forks, renames, deletes, tags and fsck
(:mod:`.sessions`). Its tests use the :class:`~sesstree.Store` only, never the backend, and
need nothing of an :class:`~sesstree.testing.Engine` but ``open``. An engine's tests run it by
a separate import, with the same ``engine`` fixture as the contract's::

    from sesstree.testing.repo import *  # noqa: F403 - the repo suite's tests and fixtures
"""

from __future__ import annotations

from ..fixtures import store
from . import revisions, sessions
from .revisions import *  # noqa: F403 - the suite's tests, by topic
from .sessions import *  # noqa: F403

__all__ = ["store"]
__all__ += revisions.__all__
__all__ += sessions.__all__
