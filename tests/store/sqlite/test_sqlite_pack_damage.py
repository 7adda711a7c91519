"""Damaged packed stores: flip bytes in many copies of one format-5 store, on the pages of its
packs, of its node rows and of their id index, and at random offsets of the file.

The store holds what packs must get right: sessions and forks, a fork made inside a pack, a
fork packed below another session's pack, a payload over 64 KiB kept apart, a loose tail on a
packed path and a session with no pack. It is closed (checkpointed into ``store.db``) before
it is copied. For every damaged copy:

- every read (each session's messages and chain, and ``backend.get`` of every node) either
  raises a sesstree error or returns exactly what was stored; any other exception is a
  failure, and so is a read that returns anything else;
- ``fsck`` reports a problem whenever a read failed, and whenever the copy's ``packs`` rows
  (or ``nodes`` rows) are not what they were, read with SQLite directly: a changed pack is
  always found;
- a node whose id index entry was damaged may not be found by id (``get`` gives None, as for
  a node never stored): counted apart, and fsck must report it (SQLite's integrity check);
- flips at random offsets may hit the reflog, which no hash covers: a session read at an
  earlier point of its own history counts apart, and fsck must report it (as in
  test_sqlite_damage.py).

The outcome classes are printed (``pytest -s``). The CLI test damages one pack and checks
that ``sess messages`` says so in one line naming the pack.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import sesstree
from sesstree import SesstreeError, open_store
from sesstree.store.packs import INLINE_MAX

SESSIONS = ("a", "b", "c", "d")
# SQLite's names for the b-trees the packed reads go through (dbstat's ``name`` column).
REGIONS = {
    "packs": ("packs",),
    "nodes": ("nodes",),
    "index": ("sqlite_autoindex_nodes_1",),
}
WORDS = "read the file then run the tests and fix the error in store session".split()


def message(rng: random.Random, tag: str, i: int) -> dict[str, Any]:
    text = f"{tag} {i} " + " ".join(rng.choices(WORDS, k=rng.randint(3, 40)))
    return {"role": "user" if i % 2 else "assistant", "content": text}


def build(folder: Path) -> None:
    """The packed store (see the module docstring), closed."""
    rng = random.Random(7)
    with open_store(folder) as store:
        a = store.session("a")
        for i in range(600):  # packs of 256 inline, the last 88 at close
            m = message(rng, "a", i)
            if i == 300:
                m["content"] = "big " + "".join(rng.choices("abcdefgh", k=INLINE_MAX + 4000))
            a.add_message(m)
        store.fork("b", "a~400")  # inside a's first pack; its 10 nodes stay loose
        for i in range(10):
            store.session("b").add_message(message(rng, "b", i))
        store.fork("c", "a~500")  # inside a's first pack; its 40 are packed at close
        for i in range(40):
            store.session("c").add_message(message(rng, "c", i))
        for i in range(5):  # a session with no pack
            store.session("d").add_message(message(rng, "d", i))
    with open_store(folder) as store:  # a loose tail on a's packed path
        for i in range(7):
            store.session("a").add_message(message(rng, "a", 600 + i))


@dataclass
class Expected:
    """What every read of the undamaged store gives."""

    messages: dict[str, list[dict[str, Any]]]
    chains: dict[str, tuple[Any, ...]]
    nodes: dict[str, Any]
    packs: list[tuple[Any, ...]]
    rows: list[tuple[Any, ...]]


def chain_of(store: Any, name: str) -> tuple[Any, ...]:
    chain = store.chain(name)
    return (chain.types, chain.datas, chain.ids, chain.start_depth, chain.base)


def record(folder: Path) -> Expected:
    with open_store(folder, create=False) as store:
        chains = {n: chain_of(store, n) for n in SESSIONS}
        ids = {i for c in chains.values() for i in c[2]}
        expected = Expected(
            messages={n: store.messages(n) for n in SESSIONS},
            chains=chains,
            nodes={i: store.backend.get(i) for i in sorted(ids)},
            packs=table_rows(folder / "store.db", "packs") or [],
            rows=table_rows(folder / "store.db", "nodes") or [],
        )
        counts = store.backend.pack_counts()
    # The shape the campaign needs, so that it attacks what it says it does.
    assert counts.packs >= 4 and counts.loose_nodes == 22, counts
    assert any(r[2] is not None and r[1] < 256 for r in expected.packs)  # c's, below a's first
    assert not (folder / "store.db-wal").exists() or (folder / "store.db-wal").stat().st_size == 0
    with closing(sqlite3.connect(f"file:{folder / 'store.db'}?mode=ro", uri=True)) as db:
        (apart,) = db.execute("SELECT count(*) FROM nodes WHERE pack IS NOT NULL "
                              "AND bid IS NOT NULL").fetchone()
    assert apart == 1  # the big payload: packed, kept apart
    return expected


def table_rows(path: Path, table: str) -> list[tuple[Any, ...]] | None:
    """Every row of ``table`` read with SQLite directly (None: SQLite cannot read them)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        # A node's recorded time (format 6) is left out: no hash covers it (as none covers
        # the reflog), and a flip there only dates an event otherwise.
        cols = "seq, id, parent, depth, data, bid, codec, pack" if table == "nodes" else "*"
        return db.execute(f"SELECT {cols} FROM {table} ORDER BY rowid").fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()


def pages(path: Path) -> dict[str, list[int]]:
    """The byte offset of every page of each region (dbstat: leaf, interior and overflow)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
        out: dict[str, list[int]] = {}
        for region, names in REGIONS.items():
            marks = ",".join("?" * len(names))
            out[region] = [(int(p) - 1) * size for (p,) in db.execute(
                f"SELECT pageno FROM dbstat WHERE name IN ({marks})", names)]
    out["page_size"] = [size]
    return out


@dataclass
class Tally:
    """Outcome classes: of each read, and of each damaged copy."""

    done: int = 0
    reads: Counter[str] = field(default_factory=Counter)
    copies: Counter[str] = field(default_factory=Counter)
    silent: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    unflagged: list[str] = field(default_factory=list)


def reads(store: Any, expected: Expected) -> list[tuple[str, Callable[[], Any], Any]]:
    out: list[tuple[str, Callable[[], Any], Any]] = []
    for n in SESSIONS:
        out.append((f"messages {n}", lambda n=n: store.messages(n), expected.messages[n]))
        out.append((f"chain {n}", lambda n=n: chain_of(store, n), expected.chains[n]))
    for i, node in expected.nodes.items():
        out.append((f"get {i[:8]}", lambda i=i: store.backend.get(i), node))
    return out


def older_position(what: str, got: Any, want: Any) -> bool:
    """A session read at an earlier point of its own history (what reflog damage does)."""
    if what.startswith("messages"):
        return bool(got == want[: len(got)])
    if what.startswith("chain"):
        k = len(got[0])
        return bool(k < len(want[0]) and got[:3] == tuple(w[:k] for w in want[:3]))
    return False


def attack(original: bytes, work: Path, spots: list[int], page: int, rng: random.Random,
           expected: Expected, region: str, tally: Tally) -> None:
    """One damaged copy of ``original``: 1 to 3 bytes flipped at offsets inside the pages
    ``spots`` start (every offset of the file when empty), read and checked."""
    data = bytearray(original)
    for _ in range(rng.randint(1, 3)):
        at = rng.choice(spots) + rng.randrange(page) if spots else rng.randrange(len(data))
        data[at] ^= rng.randrange(1, 256)
    for p in work.iterdir():
        p.unlink()
    (work / "store.db").write_bytes(bytes(data))
    tally.done += 1
    copy = f"{region} copy {tally.done}"
    packs_changed = table_rows(work / "store.db", "packs") != expected.packs
    rows_changed = table_rows(work / "store.db", "nodes") != expected.rows
    try:
        store = open_store(work, create=False)
    except SesstreeError as exc:
        tally.copies[f"{region}: refused at open ({type(exc).__name__})"] += 1
        return
    except Exception:
        tally.tracebacks.append(f"{copy}: open: {traceback.format_exc()}")
        return
    failed = older = False
    with store:
        for what, read, want in reads(store, expected):
            try:
                got = read()
            except SesstreeError as exc:
                # (SQLite's own "database disk image is malformed" counted apart: it must come
                # out as a sesstree error too, never as sqlite3.DatabaseError)
                how = ", SQLite: malformed" if "malformed" in str(exc) else ""
                tally.reads[f"{region}: error ({type(exc).__name__}{how})"] += 1
                failed = True
                continue
            except Exception:
                tally.tracebacks.append(f"{copy}: {what}: {traceback.format_exc()}")
                failed = True
                continue
            if got == want:
                tally.reads[f"{region}: exact"] += 1
            elif got is None and what.startswith("get"):
                tally.reads[f"{region}: node hidden (get gives None)"] += 1
                failed = True
            elif region == "anywhere" and older_position(what, got, want):
                tally.reads[f"{region}: session at an older position (reflog damage)"] += 1
                failed = older = True
            else:
                tally.reads[f"{region}: SILENT WRONG READ"] += 1
                tally.silent.append(f"{copy}: {what}")
        try:
            faults = store.fsck()
        except SesstreeError as exc:
            faults = [f"fsck: {exc}"]
        except Exception:
            tally.tracebacks.append(f"{copy}: fsck: {traceback.format_exc()}")
            return
    if (failed or packs_changed or rows_changed) and not faults:
        tally.unflagged.append(f"{copy} (reads failed: {failed}, packs changed: {packs_changed}, "
                               f"node rows changed: {rows_changed})")
    if not failed and not faults:
        outcome = "harmless (bytes no read or check uses)"
    elif not failed:
        outcome = "found by fsck only"
    else:
        outcome = "found by reads and fsck" if faults else "found by reads only"
    changed = [w for w, c in (("pack", packs_changed), ("node row", rows_changed)) if c]
    tally.copies[f"{region}: {outcome}" + (f" ({' and '.join(changed)} changed)" if changed else "")] += 1
    if older:
        tally.copies[f"{region}: a session at an older position, fsck found it"] += bool(faults)


def campaign(tmp_path: Path, copies: int, seed: int) -> Tally:
    original = tmp_path / "original"
    build(original)
    expected = record(original)
    image = (original / "store.db").read_bytes()
    where = pages(original / "store.db")
    page = where["page_size"][0]
    rng = random.Random(seed)
    tally = Tally()
    work = tmp_path / "copy"
    work.mkdir()
    plan = ["packs", "nodes", "index", "anywhere"]
    weights = [5, 2, 1, 2]  # most flips where the packs are
    for _ in range(copies):
        region = rng.choices(plan, weights)[0]
        spots = [] if region == "anywhere" else where[region]
        attack(image, work, spots, page, rng, expected, region, tally)
    print(f"\n{copies} damaged copies (seed {seed}), pages: " + ", ".join(
        f"{r} {len(where[r])}" for r in REGIONS) + f" of {len(image) // page}")
    for what, counts in (("copies", tally.copies), ("reads", tally.reads)):
        print(f"  {what}:")
        for k, v in sorted(counts.items()):
            print(f"    {k}: {v}")
    assert tally.tracebacks == [], tally.tracebacks[0]
    assert tally.silent == [], tally.silent
    assert tally.unflagged == [], tally.unflagged
    return tally


def test_damaged_packed_copies_never_give_wrong_data(tmp_path: Path) -> None:
    tally = campaign(tmp_path, copies=200, seed=22)
    # The campaign did damage packs, and their reads saw it (not only fsck).
    assert any("pack" in k and "by reads" in k for k in tally.copies), tally.copies


@pytest.mark.stress
def test_damaged_packed_copies_many(tmp_path: Path) -> None:
    campaign(tmp_path, copies=2000, seed=23)


def _sess(*args: str) -> subprocess.CompletedProcess[str]:
    """``sess ARGS`` as a process of its own (this sesstree, wherever it starts)."""
    env = {**os.environ, "PYTHONPATH": str(Path(sesstree.__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_sess_messages_on_a_damaged_pack_is_one_line_naming_the_pack(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    build(folder)
    with closing(sqlite3.connect(folder / "store.db")) as db, db:
        pid, depth, count, data = db.execute(
            "SELECT pid, depth, count, data FROM packs WHERE base IS NULL").fetchone()
        damaged = bytearray(data)
        damaged[len(damaged) // 2] ^= 0x10
        db.execute("UPDATE packs SET data = ? WHERE pid = ?", (bytes(damaged), pid))
    done = _sess("--store", str(folder), "messages", "a")
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"pack {pid} (depths {depth}..{depth + count - 1}" in lines[0], lines[0]
    assert "damaged" in lines[0] and str(folder) in lines[0], lines[0]
    # fsck names it too, and exits non-zero
    check = _sess("--store", str(folder), "fsck")
    assert check.returncode != 0 and f"pack {pid} " in check.stdout + check.stderr
    assert "Traceback" not in check.stderr
