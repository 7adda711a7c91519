"""The fixture both suites share: a store on the engine under test, closed after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..repo.store import Store
from . import Engine

__all__ = ["store"]


@pytest.fixture
def store(engine: Engine) -> Iterator[Store]:
    """A fresh store on the engine under test, closed after the test."""
    s = engine.open()
    try:
        yield s
    finally:
        s.close()
