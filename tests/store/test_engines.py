"""Which engine opens a store: ``store/engines.py`` dispatches on the location, and an engine
that opens URLs registers its scheme there."""

from __future__ import annotations

from pathlib import Path

import pytest

from sesstree import open_store
from sesstree.errors import StoreError, StoreNotFoundError
from sesstree.store import engines
from sesstree.store.base import Backend
from sesstree.store.engines import STORE_FILE, open_backend, register
from sesstree.store.memory import MemoryBackend
from sesstree.store.sqlite.backend import SqliteBackend


def test_memory_folder_and_file_each_open_their_engine(tmp_path: Path) -> None:
    memory = open_backend(":memory:")
    assert isinstance(memory, MemoryBackend)
    memory.close()
    folder = open_backend(tmp_path / "s")
    assert isinstance(folder, SqliteBackend)
    folder.close()
    assert (tmp_path / "s" / STORE_FILE).is_file()
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700  # private whatever the umask
    file = open_backend(tmp_path / "s" / STORE_FILE, create=False)  # the file itself
    assert isinstance(file, SqliteBackend)
    file.close()


def test_a_missing_folder_is_not_made_unless_asked(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        open_backend(tmp_path / "none", create=False)
    assert not (tmp_path / "none").exists()


def test_postgresql_and_postgres_urls_open_the_postgres_engine(postgres_url: str) -> None:
    from sesstree.store.postgres.backend import PostgresBackend

    for url in (postgres_url, "postgres" + postgres_url[postgres_url.index("://"):]):
        backend = open_backend(url)
        assert isinstance(backend, PostgresBackend)
        backend.close()


def test_a_registered_scheme_opens_with_its_opener(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "_OPENERS", dict(engines._OPENERS))
    seen: list[tuple[str, bool, bool, float]] = []

    def opener(url: str, *, create: bool, durable: bool, timeout: float) -> Backend:
        seen.append((url, create, durable, timeout))
        return MemoryBackend()

    register("Demo", opener)
    backend = open_backend("demo://here/x", create=False, durable=True, timeout=3.0)
    assert isinstance(backend, MemoryBackend)
    assert open_backend("DEMO://there", timeout=1.0) is not backend
    assert seen == [("demo://here/x", False, True, 3.0), ("DEMO://there", True, False, 1.0)]


def test_a_store_a_url_engine_opens_keeps_head_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL names a store that others share: whichever engine opens it, this user's HEAD is
    a file on this machine (as for PostgreSQL), never a value in the shared store."""
    monkeypatch.setattr(engines, "_OPENERS", dict(engines._OPENERS))
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "home"))
    shared = MemoryBackend()

    def opener(url: str, *, create: bool, durable: bool, timeout: float) -> Backend:
        return shared

    register("demo", opener)
    with open_store("demo://u:pw@here/x") as store:
        store.session("work").add_message({"role": "user", "content": "hi"})
        store.set_head_session("work")
        assert store.head()[0] == "work"
    assert shared.get_head() is None
    assert len(list((tmp_path / "home" / "heads").iterdir())) == 1


def test_a_url_no_engine_registered_is_a_folder_path_as_before(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreNotFoundError, match="no store at mysql:/u@h/db"):
        open_backend("mysql://u@h/db", create=False)
    assert list(tmp_path.iterdir()) == []


def test_without_psycopg_a_url_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sesstree.store.postgres.backend", None)
    with pytest.raises(StoreError, match=r"pip install 'sesstree\[postgres\]'"):
        open_backend("postgresql://nobody@localhost/none")
