"""The Claude Agent SDK's own conformance suite, every optional method included, on SQLite and
on PostgreSQL (each of its contracts on a fresh store)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from claude_agent_sdk.testing import run_session_store_conformance
from pg_server import with_schema

from sesstree import Store, open_store
from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens a new empty store at each call (a folder, or a PostgreSQL schema of its own)."""
    opened: list[Store] = []
    schemas: list[str] = []
    counter = itertools.count()
    server = request.getfixturevalue("postgres_server") if request.param == "postgres" else None

    def make() -> Store:
        if server is None:
            store = open_store(tmp_path / f"s{next(counter)}")
        else:
            schema = "t_" + uuid.uuid4().hex[:16]
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
            schemas.append(schema)
            store = open_store(with_schema(server, schema))
        opened.append(store)
        return store

    yield make
    for s in opened:
        s.close()
    if server is not None:
        with psycopg.connect(server, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]


def test_conformance_with_no_optional_method_skipped(fresh_store: Callable[[], Store]) -> None:
    asyncio.run(run_session_store_conformance(lambda: SesstreeSessionStore(fresh_store())))
