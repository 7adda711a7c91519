"""Fixtures for the web view: a SQLite store with forks, served by a real uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from forest_kit import TOKEN, fill, serve

from sesstree import Store, open_store


@pytest.fixture
def forest_store(tmp_path: Path) -> Iterator[Store]:
    """A store on disk holding the demo forest."""
    store = open_store(tmp_path / "s")
    fill(store)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def url(forest_store: Store) -> Iterator[str]:
    """A read-only web view of the demo forest."""
    with serve(forest_store) as base:
        yield base


@pytest.fixture
def client(url: str) -> Iterator[httpx.Client]:
    """An HTTP client on the read-only web view."""
    with httpx.Client(base_url=url, timeout=10) as c:
        yield c


@pytest.fixture
def writable_url(forest_store: Store) -> Iterator[str]:
    """A web view of the demo forest started with a token."""
    with serve(forest_store, token=TOKEN) as base:
        yield base


@pytest.fixture(scope="session")
def shared_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One read-only web view of the demo forest for the tests that never change it."""
    store = open_store(tmp_path_factory.mktemp("shared") / "s")
    fill(store)
    try:
        with serve(store) as base, httpx.Client(base_url=base, timeout=10) as c:
            c.store = store  # type: ignore[attr-defined]
            yield c
    finally:
        store.close()
