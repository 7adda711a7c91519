"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance), every
base and extended capability, through the async methods and the sync ones, on SQLite and on
PostgreSQL (each capability on a fresh store)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from pg_server import with_schema

from sesstree import Store, open_store
from sesstree.integrations.langgraph import AsyncSesstreeSaver, SesstreeSaver


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


class SyncDriven(SesstreeSaver):
    """The saver with its async methods run through the sync ones on the loop's thread, so
    that the suite checks the sync methods too."""

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, **kw: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        for tup in self.list(config, **kw):
            yield tup

    async def aput(self, *args: Any) -> Any:
        return self.put(*args)

    async def aput_writes(self, *args: Any, **kw: Any) -> None:
        self.put_writes(*args, **kw)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def acopy_thread(self, source: str, target: str) -> None:
        self.copy_thread(source, target)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


@pytest.mark.parametrize("saver_class", [AsyncSesstreeSaver, SyncDriven])
def test_every_capability_passes(fresh_store: Callable[[], Store],
                                 saver_class: type[SesstreeSaver]) -> None:
    @checkpointer_test(name=f"sesstree-{saver_class.__name__}")
    async def factory() -> AsyncIterator[SesstreeSaver]:
        yield saver_class(fresh_store())

    report = asyncio.run(validate(factory))
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert failures == {}
    assert {cap for cap, r in report.results.items() if r.passed} == {
        c.value for c in ALL_CAPABILITIES}
