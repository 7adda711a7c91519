"""The repo suite on every engine: what sesstree builds on the contract, the same on each.

Each engine's contract runs in its own module (``tests/store/test_memory_contract.py``,
``tests/store/sqlite/test_sqlite_contract.py``, ``tests/store/postgres/test_postgres_contract.py``);
the repo suite needs nothing of an engine but how to open it, so one module runs it on all
three, with the engine in the test id (``test_revisions[postgres]``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sesstree import open_store
from sesstree.repo.store import Store
from sesstree.store.memory import MemoryBackend
from sesstree.testing import Engine
from sesstree.testing.repo import *  # noqa: F403 - the repo suite's tests and fixtures


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    if request.param == "memory":
        backend = MemoryBackend()  # opened again, it is the same store
        return Engine("memory", open=lambda: Store(backend), measures_size=False)
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        return Engine("postgres", open=lambda: open_store(url))
    return Engine("sqlite", open=lambda: open_store(tmp_path / "s"))
