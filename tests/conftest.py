"""Shared fixtures: a store on every backend, always closed (ResourceWarnings are errors)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The conformance suite ships in the package; its asserts are rewritten like a test module's.
pytest.register_assert_rewrite("sesstree.testing")

from sesstree import Store, open_store  # noqa: E402 - after the rewrite is registered
from sesstree import events as events_module  # noqa: E402

HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))

from cli_kit import Sess  # noqa: E402 - found through the path set just above
from pg_server import postgres_server, postgres_url  # noqa: E402, F401 - fixtures

BACKENDS = ["memory", "sqlite", "postgres"]


def _open(kind: str, folder: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "postgres":
        return open_store(request.getfixturevalue("postgres_url"))
    return open_store(":memory:") if kind == "memory" else open_store(folder)


@pytest.fixture(autouse=True)
def private_sess_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout's HEAD of a shared store is kept under SESS_HOME: never the tester's own."""
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "sess-home"))


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    return str(request.param)


def _fresh(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    s = _open(kind, tmp_path / "s", request)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def store(backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A fresh store on each backend, closed after the test."""
    yield from _fresh(backend_kind, tmp_path, request)


@pytest.fixture
def every_backend_store(backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """:func:`store` under a name that a folder's own ``store`` fixture does not shadow."""
    yield from _fresh(backend_kind, tmp_path, request)


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """Open extra stores (``make_store("sqlite", path)``); every one is closed afterwards."""
    opened: list[Store] = []

    def make(kind: str = "sqlite", folder: Path | None = None, **kw: object) -> Store:
        if kind == "memory":
            s = open_store(":memory:")
        else:
            s = open_store(folder if folder is not None else tmp_path / f"s{len(opened)}", **kw)  # type: ignore[arg-type]
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A fresh SQLite store."""
    s = open_store(tmp_path / "s")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def registry() -> Iterator[Callable[..., None]]:
    """Register extension event types for one test; they are forgotten afterwards."""
    added: list[str] = []

    def register(name: str, render: Callable[..., object] | None = None) -> None:
        events_module.register_event_type(name, render)  # type: ignore[arg-type]
        added.append(name)

    yield register
    for name in added:
        events_module._registry.pop(name, None)



@pytest.fixture
def sess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sess:
    """A fresh store in tmp_path/.sess, found by discovery from the current folder (CLI tests)."""
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    s.ok("init")
    return s
