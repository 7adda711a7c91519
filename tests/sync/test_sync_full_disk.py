"""A push to a `sess serve` whose store's disk is full: the client gets the server's one
full-disk line (HTTP 507, naming the store's folder), not an internal error or a damaged store,
and the server's store is sound once there is room."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from small_disk import leave_free, make_room, mounted
from sync_kit import TOKEN, grow, served

from sesstree import RemoteError, open_store
from sesstree.sync import clone, push


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "disk") as where:
        yield where


def test_a_push_to_a_server_on_a_full_disk_says_the_disk_is_full(
        disk: Path, tmp_path: Path) -> None:
    origin = open_store(disk / "origin")
    grow(origin, "main", 3)
    try:
        with served(origin) as url:
            mine = clone(url, tmp_path / "mine")
            grow(mine, "main", 400, text="x" * 2000)
            leave_free(disk, 0)
            with pytest.raises(RemoteError) as caught:
                push(mine, url, ["main"], token=TOKEN)
            line = str(caught.value)
            assert "HTTP 507" in line, line
            assert "full" in line and str(disk / "origin") in line, line
            assert "internal error" not in line and "damaged" not in line, line
            assert "\n" not in line
            make_room(disk)
            push(mine, url, ["main"], token=TOKEN)
            assert origin.session_head("main") == mine.session_head("main")
            assert origin.fsck() == []
            mine.close()
    finally:
        origin.close()
