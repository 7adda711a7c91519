"""The engine contract: what every storage engine promises at the seam, as pytest tests.

This is the suite an engine author runs. A new engine proves itself with one test module
that imports it and gives it an :class:`~sesstree.testing.Engine`::

    import pytest
    from sesstree.testing import Engine
    from sesstree.testing.contract import *  # noqa: F403 - the contract's tests and fixtures

    @pytest.fixture
    def engine(tmp_path) -> Engine:
        return Engine("mine", open=lambda: open_store(f"mine://{tmp_path}"),
                      damage_node=my_damage_function)

The tests talk to the engine's :class:`~sesstree.store.base.Backend` (``store.backend``);
where one goes through the :class:`~sesstree.Store` it is to drive the engine the way sesstree
does, and what it checks is still what the engine kept. By topic:

- :mod:`.objects`: idempotent puts, reads by id, paths, id prefixes, damage fsck finds;
- :mod:`.refs`: compare-and-set on create, move and delete, the reflog, metadata, reopening;
- :mod:`.batches`: all-or-nothing, one reflog entry per ref, folding as a compare-and-set;
- :mod:`.runs`: a handle's run of plain appends as one entry, each append committed;
- :mod:`.space`: gc of what nothing reaches, reflog expiry, sizes, large payloads;
- :mod:`.text`: text no engine can hold (:mod:`sesstree.store.storable`);
- :mod:`.search`: the text index, one entry per distinct node, in step with writes and gc,
  equal to a brute-force scan, safe against any pattern (an engine without one skips it;
  the damage test needs ``Engine.damage_index``);
- :mod:`.packs`: packs read back exactly, forks in them, repack, gc, damage named (an
  engine without packs skips them; the damage test needs ``Engine.damage_pack``).

What sesstree builds on top (revisions, HEAD, log, diff, sessions and tags) is the repo
suite, :mod:`sesstree.testing.repo`, imported apart. Test ids name the engine by the module
that imports the suite (``tests/store/sqlite/test_sqlite_contract.py::test_cas_on_creation``).
"""

from __future__ import annotations

from ..fixtures import store
from . import batches, objects, packs, refs, runs, search, space, text
from .batches import *  # noqa: F403 - the contract's tests, by topic
from .objects import *  # noqa: F403
from .packs import *  # noqa: F403
from .refs import *  # noqa: F403
from .runs import *  # noqa: F403
from .search import *  # noqa: F403
from .space import *  # noqa: F403
from .text import *  # noqa: F403

__all__ = ["store"]
__all__ += objects.__all__
__all__ += refs.__all__
__all__ += batches.__all__
__all__ += runs.__all__
__all__ += space.__all__
__all__ += text.__all__
__all__ += packs.__all__
__all__ += search.__all__
