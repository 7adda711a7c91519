"""A format-4 PostgreSQL store, as the sesstree of format 4 wrote it, upgraded to format 5 in
place and online: the schema at once, the history packed afterwards by ``repack`` (resumable:
killed midway, the store opens, reads back exactly and the next repack finishes).

``data/format4.json.gz`` was written by that sesstree (``data/make_format4.py``): the
statements it ran to create the store, every row, and what it read back from it.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sesstree import Store, open_store
from sesstree.store.packs import PACK_MAX

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    with gzip.open(DATA / "format4.json.gz", "rt") as f:
        found: dict[str, Any] = json.load(f)
    return found


def load(url: str, golden: dict[str, Any]) -> None:
    """Make the format-4 store of ``golden`` at ``url``: its statements, then its rows."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for statement in golden["statements"]:
            conn.execute(statement)
        for name, table in golden["tables"].items():
            cols = ", ".join(table["columns"])
            marks = ", ".join(["%s"] * len(table["columns"]))
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {name} ({cols}) VALUES ({marks})",  # type: ignore[arg-type]
                    [[bytes.fromhex(v["hex"]) if isinstance(v, dict) else v for v in row]
                     for row in table["rows"]])
        for table, column in (("nodes", "seq"), ("reflog", "n")):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "  # type: ignore[arg-type]
                         f"(SELECT max({column}) FROM {table}))")


def read(store: Store) -> dict[str, Any]:
    """What ``data/make_format4.py`` read from the store (its ``read``), read by this sesstree."""
    return {
        "messages": {n: store.messages(n) for n in ("main", "branch")},
        "tags": [[t.name, t.target] for t in store.tags()],
        "reflog": [[e.ref, e.old, e.new, e.time, e.reason, e.started] for e in store.reflog()],
        "meta": store.get_session_meta("main"),
        "nodes": store.backend.count_nodes(),
        "fsck": store.fsck(),
    }


def exact(store: Store, golden: dict[str, Any]) -> None:
    """The store reads back what the sesstree of format 4 read, node for node."""
    assert read(store) == golden["read"]
    for name in ("main", "branch"):
        events = store.session(name).events()
        for node in events[:: max(1, len(events) // 50)] + events[-3:]:
            assert store.show(node.id) == node


def meta(url: str, key: str) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def test_a_format_4_store_upgrades_in_place_and_repack_packs_it(
    postgres_url: str, golden: dict[str, Any]
) -> None:
    assert golden["format"] == 4 and golden["read"]["fsck"] == []
    load(postgres_url, golden)
    with open_store(postgres_url) as store:
        assert store.backend.store_format().version == 7
        exact(store, golden)  # loose rows of format 4, read as they were
        before = store.backend.pack_counts()  # type: ignore[attr-defined]
        assert before.packs == 0 and before.loose_nodes == golden["read"]["nodes"]
    assert meta(postgres_url, "pack_pending") == ""  # opening and reading packed nothing
    with open_store(postgres_url) as store:
        heard: list[tuple[int, int]] = []
        after = store.backend.repack(lambda d, t: heard.append((d, t)))  # type: ignore[attr-defined]
        # Everything a ref reaches is packed; the deleted session's events (only its reflog
        # reaches them) stay loose.
        assert after.loose_nodes == 3 and after.packed_nodes == golden["read"]["nodes"] - 3
        assert after.packs >= golden["read"]["nodes"] // PACK_MAX
        assert heard[-1] == (after.packed_nodes, before.loose_nodes)
        exact(store, golden)
    assert meta(postgres_url, "pack_pending") is None
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        # The payloads over 1 KB went into their packs' frames, their blobs with them; the
        # one over 64 KB is kept apart (and a payload only the loose events name stays).
        left = conn.execute("SELECT count(*) FROM blobs").fetchone()
        empty = conn.execute("SELECT count(*) FROM nodes WHERE pack IS NOT NULL "
                             "AND length(data) > 0").fetchone()
    assert left is not None and 1 <= left[0] < len(golden["tables"]["blobs"]["rows"])
    assert empty == (0,)
    with open_store(postgres_url) as store:  # and it goes on growing, and packing, as any
        main = store.session("main")
        for i in range(20):
            main.add_message({"role": "user", "content": f"after the upgrade {i}"})
    with open_store(postgres_url) as store:
        messages = store.messages("main")
        assert messages[:-20] == golden["read"]["messages"]["main"]
        assert store.backend.pack_counts().loose_nodes == 3  # type: ignore[attr-defined]
        assert store.fsck() == []


REPACK = """
import sys, time
from sesstree import open_store
with open_store(sys.argv[1]) as store:
    def heard(done, total):
        print(done, total, flush=True)
        time.sleep(0.5)
    store.backend.repack(heard)
print("finished", flush=True)
"""


def test_a_repack_killed_midway_leaves_a_store_that_reads_back_and_finishes(
    postgres_url: str, golden: dict[str, Any], tmp_path: Path
) -> None:
    load(postgres_url, golden)
    with open_store(postgres_url) as store:
        total = store.backend.pack_counts().loose_nodes  # type: ignore[attr-defined]
    env = {**os.environ, "PYTHONPATH": str(SRC), "SESS_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-c", REPACK, postgres_url], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()  # one pack is made: kill it in the next
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
    assert 0 < int(first[0]) < int(first[1]) == total
    assert meta(postgres_url, "pack_pending") == ""  # still pending
    with open_store(postgres_url) as store:
        midway = store.backend.pack_counts()  # type: ignore[attr-defined]
        assert midway.packs >= 1 and midway.loose_nodes > 3
        exact(store, golden)
        done = store.backend.repack()  # type: ignore[attr-defined]
        assert done.loose_nodes == 3
        exact(store, golden)
    assert meta(postgres_url, "pack_pending") is None


def test_writers_closing_finish_an_upgrades_packing_without_a_repack(
    postgres_url: str, golden: dict[str, Any]
) -> None:
    load(postgres_url, golden)
    open_store(postgres_url).close()  # upgraded: the packing is pending
    closes = 0
    while meta(postgres_url, "pack_pending") is not None:
        assert closes < 20, "the packing an upgrade left never finishes"
        with open_store(postgres_url) as store:  # `sess append`: open, append one, close
            store.session("w").add_message({"role": "user", "content": f"writer {closes}"})
        closes += 1
    with open_store(postgres_url) as store:
        # Everything the upgrade found is packed; the deleted session's events (only its
        # reflog reaches them) stay loose, and so may the writers' own appends made after
        # the packing reached their session (a tail under PACK_MIN waits, as any does: how
        # many depends on how far each close's 50 ms went).
        ids = [bytes.fromhex(i) for i in store.chain(store.session_head("w")).ids]
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute("SELECT count(*) FROM nodes WHERE pack IS NULL AND id = ANY(%s)",
                               (ids,)).fetchone()
        writers_loose = int(row[0]) if row else 0
        assert writers_loose < closes
        loose = store.backend.pack_counts().loose_nodes  # type: ignore[attr-defined]
        assert loose - writers_loose == 3
        assert read(store)["messages"] == golden["read"]["messages"]
        assert store.fsck() == []
