"""Both suites at once, as this module gave them before they were split: the engine contract
(:mod:`sesstree.testing.contract`) and the repo suite (:mod:`sesstree.testing.repo`).

A test module written for it keeps running everything with ``from
sesstree.testing.conformance import *``; a new engine's tests import the two apart.
"""

from __future__ import annotations

from . import colliding_nodes as colliding_nodes
from . import grow as grow
from .contract import *  # noqa: F403 - the engine contract's tests and the store fixture
from .contract.objects import raw as raw
from .contract.objects import walk as walk
from .repo import *  # noqa: F403 - the repo suite's tests
