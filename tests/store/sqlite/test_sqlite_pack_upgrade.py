"""A format-4 store with a long history, written by the sesstree of format 4 (835aec1, see
``data/make_format4_long.py``), opened by this one: upgraded to format 5 in place, online.

Opening it only adds format 5's column and table (instant) and says the old history is still
to be packed (``pack_pending``); everything reads back exactly meanwhile. A repack packs it
all and clears that; a repack killed part-way leaves a store that opens, reads back exactly,
passes fsck and is still pending, and a later repack finishes it; the pauses and closes of
writers finish it too, a little each time. A format-5 store reads on read-only media, and
the sesstree of format 4 refuses it with its one line.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import zstandard
from core_testkit import HELPERS, load_script
from small_disk import read_only_view

import sesstree
from sesstree import StoreFormatError, StoreReadOnlyError, open_store
from sesstree.store.sqlite import opening, packing

DATA = Path(__file__).parent / "data"
#: The last commit whose sesstree writes format 4.
FORMAT_4 = "835aec1"
CHILD = HELPERS / "pack_crash_child.py"



#: ``data/make_format4_long.py``'s ``summary`` reads a store the way the JSON was made.
summary = load_script(DATA / "make_format4_long.py").summary
GOLDEN: dict[str, Any] = json.loads((DATA / "format4_long.json").read_text())


@pytest.fixture
def long4(tmp_path: Path) -> Path:
    """A copy of the long format-4 store (its folder)."""
    folder = tmp_path / "s"
    folder.mkdir()
    packed = (DATA / "format4_long.db.zst").read_bytes()
    (folder / "store.db").write_bytes(zstandard.ZstdDecompressor().decompress(packed))
    return folder


def meta(folder: Path) -> dict[str, str]:
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT key, value FROM meta").fetchall())


def off_refs(store: Any) -> int:
    """Nodes on no live session's path (what only a deleted session's reflog keeps): a
    repack packs the paths of refs, so these stay loose (here: the deleted session's one)."""
    on = {i for s in store.sessions() for i in store.chain(s.name).ids}
    return int(store.backend.pack_counts().packed_nodes
               + store.backend.pack_counts().loose_nodes - len(on))


def reads_back(folder: Path) -> None:
    """The store reads back what the format-4 sesstree read from it, and passes fsck."""
    with open_store(folder, create=False) as store:
        assert summary(store) == GOLDEN
        assert store.fsck() == []


def test_a_format_4_store_opens_as_format_5_with_its_packing_pending(long4: Path) -> None:
    assert meta(long4)["format"] == "4"
    with open_store(long4, create=False) as store:
        assert store.backend.store_format().version == 7  # (through 5: packs, then 6, then 7)
        assert summary(store) == GOLDEN
        assert store.fsck() == []
        counts = store.backend.pack_counts()
        assert counts.packs == 0 and counts.loose_nodes == GOLDEN["nodes"][0]
    after = meta(long4)
    assert after["format"] == "7" and after["pack_pending"] == "1"  # (a reader packs nothing)
    reads_back(long4)


def test_a_repack_packs_the_upgraded_history_and_clears_the_pending_job(long4: Path) -> None:
    with open_store(long4, create=False) as store:
        counts = store.backend.repack()
        assert counts.loose_nodes == off_refs(store) == 1, counts
        assert counts.packed_nodes == GOLDEN["nodes"][0] - 1, counts
        assert counts.packs >= 4  # main's 1,100 nodes take two (PACK_MAX), and side, big
        assert summary(store) == GOLDEN
        assert store.fsck() == []
    assert "pack_pending" not in meta(long4)
    reads_back(long4)
    with closing(sqlite3.connect(f"file:{long4 / 'store.db'}?mode=ro", uri=True)) as db:
        # The payload over 64 KiB stays apart, by its hash; the smaller ones went into packs.
        assert db.execute("SELECT count(*) FROM nodes WHERE bid IS NOT NULL").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM blobs").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM nodes WHERE data != x''").fetchone() == (1,)


def write_until_packed(folder: Path, most: int) -> int:
    """Writers that append one message to session ``w`` and close, until the pending packing
    is done (at most ``most`` of them); returns how many it took, and checks the store."""
    closes = 0
    while "pack_pending" in meta(folder) or closes == 0:
        assert closes < most, "the pending packing never finished"
        with open_store(folder, create=False) as store:
            store.session("w").add_message({"role": "user", "content": f"w {closes}"})
        closes += 1
    with open_store(folder, create=False) as store:
        # Loose are only the nodes no ref reaches, and ``w``'s newest messages (a tail shorter
        # than PACK_MIN is left loose once the job went past ``w``).
        loose = store.backend.pack_counts().loose_nodes
        assert off_refs(store) <= loose <= off_refs(store) + min(closes, packing.PACK_MIN - 1)
        got = summary(store)
        assert got["nodes"][0] == GOLDEN["nodes"][0] + closes
        assert {k: v for k, v in got.items() if k != "nodes"} == {
            k: v for k, v in GOLDEN.items() if k != "nodes"}
        assert [m["content"] for m in store.messages("w")] == [f"w {i}" for i in range(closes)]
        assert store.fsck() == []
    return closes


def test_writers_closing_finish_the_packing_without_a_repack(long4: Path) -> None:
    """No repack: a writer that closes gives the pending job a moment (here, enough)."""
    closes = write_until_packed(long4, 40)
    print(f"the packing finished after {closes} writers closed")


def test_the_pending_packing_goes_on_where_the_last_writer_stopped(
    long4: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close's moment is short (UPGRADE_AT_CLOSE): on a store with many refs, each writer
    does some. Made to do one ref a close here: the job must still finish, one ref a close."""
    monkeypatch.setattr(packing, "UPGRADE_AT_CLOSE", 0.0)
    closes = write_until_packed(long4, 12)
    print(f"the packing finished after {closes} writers closed")


def spawn(job: str, folder: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(sesstree.__file__).resolve().parents[1])}
    return subprocess.Popen([sys.executable, str(CHILD), job, str(folder)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_repack_killed_mid_upgrade_reopens_reads_back_and_a_later_one_finishes(
    long4: Path, tmp_path: Path
) -> None:
    """Its 4 packs: ``bare``'s 1,000 nodes, then ``big``'s, ``main``'s and ``side``'s tails
    (ref names in order). Killed in the first, just after it, and in the second; a kill that
    comes after the child's last pack (a loaded machine) finds the job done, and is checked
    the same way."""
    mid = 0
    for round, (word, times, delay) in enumerate(
            [("PACKING", 1, 0.0), ("PACKING", 1, 0.003), ("PACKED", 1, 0.0), ("PACKING", 2, 0.0)]):
        folder = tmp_path / f"k{round}"
        shutil.copytree(long4, folder)
        proc = spawn("repack", folder)
        assert proc.stdout is not None and proc.stderr is not None
        seen = 0
        for line in proc.stdout:
            seen += line.strip() == word
            if seen == times:
                break
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        with proc.stdout, proc.stderr:
            err = proc.stderr.read()
        assert proc.returncode in (-signal.SIGKILL, 0), err
        pending = meta(folder).get("pack_pending") == "1"  # the job is not finished
        mid += pending
        reads_back(folder)
        with open_store(folder, create=False) as store:
            loose = store.backend.pack_counts().loose_nodes
            assert store.backend.repack().loose_nodes == off_refs(store)
        assert "pack_pending" not in meta(folder)
        reads_back(folder)
        print(f"round {round}: killed after {word} {times} ({'pending' if pending else 'done'}),"
              f" {loose} nodes left loose; a later repack finished")
    assert mid >= 2  # (the first pack is 1,000 nodes: a kill in it comes before it ends)




@pytest.mark.parametrize("packed", [False, True], ids=["pending", "packed"])
def test_a_format_5_store_reads_on_read_only_media(long4: Path, tmp_path: Path,
                                                   packed: bool) -> None:
    with open_store(long4, create=False) as store:  # upgraded; packed or still pending
        if packed:
            store.backend.repack()
    before = (long4 / "store.db").read_bytes()
    with read_only_view(long4.parent, tmp_path / "ro") as view:
        with open_store(view / long4.name, create=False) as store:
            assert summary(store) == GOLDEN
            assert store.fsck() == []
            with pytest.raises(StoreReadOnlyError):
                store.session("main").add_message({"role": "user", "content": "one more"})
            with pytest.raises(StoreReadOnlyError):
                store.backend.repack()
    assert (long4 / "store.db").read_bytes() == before


@pytest.fixture(scope="module")
def format_4_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sources of the sesstree of format 4, from this checkout's history."""
    root = Path(__file__).resolve().parents[3]
    found = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", FORMAT_4, "src"],
                           capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"commit {FORMAT_4} (format 4) is not in this checkout's history")
    where = tmp_path_factory.mktemp("format4")
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as tar:
        tar.extractall(where, filter="data")
    return where / "src"


def test_the_sesstree_of_format_4_refuses_a_format_5_store_in_one_line(
    long4: Path, format_4_src: Path
) -> None:
    with open_store(long4, create=False) as store:
        store.backend.repack()
    before = (long4 / "store.db").read_bytes()
    env = {**os.environ, "PYTHONPATH": str(format_4_src)}
    for args in (["log", "main"], ["messages", "main"], ["fsck"]):
        done = subprocess.run(
            [sys.executable, "-c", "from sesstree.cli import main; main()", "--store",
             str(long4), *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0, done.stdout
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "has store format 7; this sesstree reads up to 4" in lines[0], lines[0]
    assert (long4 / "store.db").read_bytes() == before


def test_a_sesstree_reading_up_to_format_4_refuses_a_format_5_store(
    long4: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check without the old sources: this sesstree told it reads up to 4."""
    with open_store(long4, create=False):
        pass
    before = (long4 / "store.db").read_bytes()
    monkeypatch.setattr(opening, "FORMAT_VERSION", 4)
    with pytest.raises(StoreFormatError, match="has store format 7; this sesstree reads up to 4"):
        open_store(long4, create=False)
    assert (long4 / "store.db").read_bytes() == before
