"""Stores of every older format, as the sesstree of that format wrote them, open, read and
upgrade exactly as they did.

``data/formatN.db`` was written by the sesstree of format N (formats 1 to 4; format 1's reflog
has no ``started`` column, and its payload over 1 KB is a zlib blob), with
``data/make_golden.py``. ``data/formatN.json`` holds what that sesstree read back from it
("read"), and the content of the file once the sesstree of c6933c9 (format 5, with the
``loose`` table) had upgraded it ("upgraded": the schema as SQLite keeps it, and a digest of
every table's rows; how to make it again: data/make_golden.py): however the upgrade is
written, it must leave the same bytes in every row and the same schema. (Formats 1 to 3 were
checked first against the sesstree of 8e3a8aa, format 4, upgrading with its own code before
numbered migrations; format 5 changed their dumps by its migration only, and so did the
``loose`` table, which it adds empty: the old rows keep their payloads until packed.) An
upgrade only adds format 5's column and tables: the history is packed later, by a writer's
pauses or a repack (test_sqlite_pack_upgrade.py). On read-only media, or on a disk too full for the WAL's
index, such a store is read as it is and left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from small_disk import leave_free, make_room, mounted, read_only_view

from sesstree import StoreFullError, StoreReadOnlyError, open_store

DATA = Path(__file__).parent / "data"
#: The formats there is a golden store of.
VERSIONS = [1, 2, 3, 4]


def dump(path: Path) -> dict[str, Any]:
    """The schema SQLite keeps for the store file ``path`` (in creation order), its page size,
    and for every table its row count and a digest of its rows (bytes as hex)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        schema = [list(r) for r in db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")]
        tables: dict[str, list[Any]] = {}
        for kind, name, _, _ in schema:
            if kind != "table":
                continue
            rows = sorted(
                json.dumps([v.hex() if isinstance(v, bytes) else v for v in row])
                for row in db.execute(f"SELECT * FROM {name}")
            )
            digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
            tables[name] = [len(rows), digest]
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    return {"schema": schema, "tables": tables, "page_size": page_size}


def read(folder: Path) -> dict[str, Any]:
    """What a store reads back: the sessions' messages, tags, reflog, HEAD and fsck."""
    with open_store(folder) as store:
        return {
            "messages": {n: store.messages(n) for n in ("main", "branch")},
            "tags": [[t.name, t.target] for t in store.tags()],
            "reflog": [[e.ref, e.old, e.new, e.time, e.reason] for e in store.reflog()],
            "head": list(store.head()),
            "fsck": store.fsck(),
        }


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_store_reads_and_upgrades_as_it_did(tmp_path: Path, version: int) -> None:
    golden = json.loads((DATA / f"format{version}.json").read_text())
    folder = tmp_path / "s"
    folder.mkdir()
    shutil.copyfile(DATA / f"format{version}.db", folder / "store.db")
    assert dump(folder / "store.db")["tables"]["meta"][0] >= 2  # (the file is a store)
    assert read(folder) == golden["read"]  # opened for writing: upgraded on the way in
    assert dump(folder / "store.db") == golden["upgraded"]
    # And an upgraded store takes writes, on the reflog it has (format 1: without `started`).
    with open_store(folder) as store:
        store.session("main").add_message({"role": "user", "content": "after the upgrade"})
        assert store.messages("main") == [
            *golden["read"]["messages"]["main"], {"role": "user", "content": "after the upgrade"}
        ]
        assert store.fsck() == []


def _golden_store(version: int, folder: Path) -> dict[str, Any]:
    """A copy of the golden store of ``version`` in ``folder`` (made); returns its golden JSON."""
    folder.mkdir(parents=True)
    shutil.copyfile(DATA / f"format{version}.db", folder / "store.db")
    return json.loads((DATA / f"format{version}.json").read_text())  # type: ignore[no-any-return]




@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_store_on_read_only_media_reads_as_it_did_and_is_left_as_it_is(
    tmp_path: Path, version: int
) -> None:
    golden = _golden_store(version, tmp_path / "src" / "s")
    before = (tmp_path / "src" / "s" / "store.db").read_bytes()
    with read_only_view(tmp_path / "src", tmp_path / "ro") as view:
        assert read(view / "s") == golden["read"]  # read as it is: no upgrade
        with open_store(view / "s") as store, pytest.raises(StoreReadOnlyError):
            store.set_session_meta("main", {"title": "changed"})
    assert (tmp_path / "src" / "s" / "store.db").read_bytes() == before


@pytest.mark.parametrize("version", VERSIONS)
def test_an_append_to_an_old_store_on_read_only_media_is_refused_as_read_only(
    tmp_path: Path, version: int
) -> None:
    """A store before format 4 has no dictionary table yet, one before format 5 no packs: an
    append must still be refused with the read-only error, not fail looking for them."""
    _golden_store(version, tmp_path / "src" / "s")
    before = (tmp_path / "src" / "s" / "store.db").read_bytes()
    with read_only_view(tmp_path / "src", tmp_path / "ro") as view:
        with open_store(view / "s") as store, pytest.raises(StoreReadOnlyError):
            store.session("main").add_message({"role": "user", "content": "one more"})
    assert (tmp_path / "src" / "s" / "store.db").read_bytes() == before


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_store_on_a_full_disk_reads_then_upgrades_once_there_is_room(
    tmp_path: Path, version: int
) -> None:
    with mounted(tmp_path / "disk", "1m") as disk:
        golden = _golden_store(version, disk / "s")
        before = (disk / "s" / "store.db").read_bytes()
        leave_free(disk, 0)  # no room for the WAL's index: read without it, write nothing
        assert read(disk / "s") == golden["read"]
        with open_store(disk / "s") as store, pytest.raises(StoreFullError):
            store.set_session_meta("main", {"title": "changed"})
        assert (disk / "s" / "store.db").read_bytes() == before
        make_room(disk)
        assert read(disk / "s") == golden["read"]  # opened for writing: upgraded on the way in
        assert dump(disk / "s" / "store.db") == golden["upgraded"]
