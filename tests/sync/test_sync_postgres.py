"""Sync with a PostgreSQL store: in-process both ways, and served over HTTP."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sync_kit import TOKEN, all_ids, grow, refs_of, served

from sesstree import PushRejectedError, open_store, sync
from sesstree.sync import add_remote, clone, list_remotes
from sesstree.sync.remotes import remotes_file


def test_postgres_to_sqlite_and_back(tmp_path: Path, postgres_url: str) -> None:
    with open_store(postgres_url) as pg:
        grow(pg, "main", 25)
        grow(pg, "fork", 4, start="main~7")
        pg.tag("v1", "main~1")
        with clone(postgres_url, tmp_path / "mine") as mine:
            assert refs_of(mine) == refs_of(pg)
            assert all_ids(mine) == all_ids(pg)
            assert mine.fsck() == [] and pg.fsck() == []
            grow(mine, "fork", 3, text="local")
            result = sync.push(mine, "origin", ["fork"])
            assert result.nodes == 3
            assert pg.session_head("fork") == mine.session_head("fork")
            grow(pg, "main", 2, text="server")
            sync.pull(mine, "origin", ["main"])
            assert mine.session_head("main") == pg.session_head("main")
            assert pg.fsck() == []


def test_sqlite_cloned_into_postgres(tmp_path: Path, postgres_url: str) -> None:
    with open_store(tmp_path / "origin") as origin:
        grow(origin, "a", 12)
        grow(origin, "b", 3, start="a~4")
        with clone(tmp_path / "origin", postgres_url) as pg:
            assert refs_of(pg) == refs_of(origin)
            assert all_ids(pg) == all_ids(origin)
            assert pg.fsck() == []
            # A shared store keeps this user's remotes on this machine, not in the store.
            path = remotes_file(pg)
            assert path is not None
            assert Path(os.environ["SESS_HOME"]) in path.parents
            assert [r.name for r in list_remotes(pg)] == ["origin"]
            grow(origin, "a", 1, text="more")
            grow(pg, "a", 1, text="diverging")
            with pytest.raises(PushRejectedError, match="non-fast-forward"):
                sync.push(pg, "origin", ["a"])


def test_postgres_served_over_http(tmp_path: Path, postgres_url: str) -> None:
    with open_store(postgres_url) as pg:
        grow(pg, "main", 15)
        with served(pg) as url, clone(url, tmp_path / "mine") as mine:
            assert all_ids(mine) == all_ids(pg)
            grow(mine, "main", 2, text="pushed over http")
            grow(mine, "new", 2, start="main~3")
            result = sync.push(mine, url, ["main", "new"], token=TOKEN)
            assert result.nodes == 4
            assert refs_of(pg) == refs_of(mine)
            assert pg.fsck() == []
        # A SQLite store pushing to the PostgreSQL one by URL, as a named remote.
        with open_store(tmp_path / "other") as other:
            add_remote(other, "lab", postgres_url)
            sync.fetch(other, "lab")
            assert other.resolve("lab/new") == pg.session_head("new")
