"""A write through the web view (a tag, a rename) on a store whose disk is full: the client is
told the server's disk is full (HTTP 507, the store's one full-disk line), not an internal error,
and the write goes through once there is room."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from forest_kit import TOKEN, serve
from small_disk import leave_free, make_room, mounted

from sesstree import open_store


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "disk") as where:
        yield where


def test_a_web_write_on_a_full_disk_says_the_disk_is_full(disk: Path) -> None:
    store = open_store(disk / "s")
    main = store.session("main")
    for i in range(3):
        main.add_message({"role": "user", "content": f"m {i}"})
    auth = {"authorization": f"Bearer {TOKEN}"}
    try:
        with serve(store, token=TOKEN) as url:
            leave_free(disk, 0)
            r = httpx.post(url + "/api/v1/web/tag", json={"name": "t", "rev": "main"},
                           headers=auth, timeout=30)
            assert r.status_code == 507, r.text
            line = r.json()["error"]
            assert "full" in line and str(disk / "s") in line, line
            assert "internal error" not in line and "\n" not in line
            make_room(disk)
            r = httpx.post(url + "/api/v1/web/tag", json={"name": "t", "rev": "main"},
                           headers=auth, timeout=30)
            assert r.status_code == 200, r.text
            assert [t.name for t in store.tags()] == ["t"]
            assert store.fsck() == []
    finally:
        store.close()
