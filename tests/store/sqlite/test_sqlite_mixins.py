"""The backends are put together from mixins that declare, as stubs, what the backend provides:
a stub must never win over the real method (a mixin listed before the one that defines it)."""

from __future__ import annotations

import inspect

import pytest

from sesstree.store.postgres.backend import PostgresBackend
from sesstree.store.sqlite.backend import SqliteBackend


@pytest.mark.parametrize("backend", [SqliteBackend, PostgresBackend])
def test_no_method_resolves_to_a_mixins_stub(backend: type) -> None:
    stubs = []
    for name in dir(backend):
        owner = next(k for k in backend.__mro__ if name in k.__dict__)
        member = owner.__dict__[name]
        if inspect.isfunction(member) and "raise NotImplementedError" in inspect.getsource(member):
            stubs.append(f"{owner.__name__}.{name}")
    assert stubs == []
