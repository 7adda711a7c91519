"""Damaged store files: flip bytes at random offsets in many copies of one store.

For every copy, every read (open, messages, log, show of every node, sessions, reflog) must
either return exactly what was stored or raise StoreCorruptError (StoreFormatError on open,
when the damage hits the format version); any other exception is a failure, and so is a read
that returns something else without an error. Whenever a read failed, fsck must report
damage too. The figures are printed (``pytest -s``).

One kind of damage no read can see: the reflog is not covered by any hash, so a changed ref
name (or a damaged page) in it can leave a session at an earlier position of its own history
(sound, verified nodes, just older) or out of the session list. Such reads are counted
apart, and fsck must find every one of them (the ref's log no longer chains, a ref name that
cannot exist, or SQLite's own checks).
"""

from __future__ import annotations

import random
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sesstree import StoreCorruptError, StoreFormatError, UnknownRevisionError, open_store


def build(folder: Path) -> dict[str, Any]:
    """A store with two sessions sharing a prefix, payloads stored apart, a tag; returns what
    every read should give."""
    with open_store(folder) as store:
        a = store.session("a")
        for i in range(80):
            big = "x" * (1500 + i) if i % 9 == 4 else ""
            a.add_message({"role": "user" if i % 2 else "assistant",
                           "content": f"transfer {i} dollars to alice {big}"})
        store.fork("b", "a~30")
        b = store.session("b")
        for i in range(15):
            b.add_message({"role": "user", "content": f"b {i}"})
        store.tag("t", "a~5")
        expected = {
            "messages": {n: store.messages(n) for n in ("a", "b")},
            "log": {n: store.log(n) for n in ("a", "b")},
            "nodes": {node.id: node for n in ("a", "b") for node in store.log(n)},
            "sessions": [(s.name, s.head, s.length) for s in store.sessions()],
        }
    return expected


def build_compressed(folder: Path) -> dict[str, Any]:
    """The same shape past the store's first 1,000 payloads (format 4): rows and payloads
    stored apart as zstd frames made with the trained dictionary, and block digests; every
    20th node is shown."""
    from sesstree.store.codec import TRAIN_AFTER

    rng = random.Random(4)
    words = "read the file then run the tests and fix the error in store session".split()
    with open_store(folder) as store:
        a = store.session("a")
        with store.batch():
            for i in range(TRAIN_AFTER + 300):
                big = " ".join(rng.choices(words, k=300)) if i % 9 == 4 else ""
                a.add_message({"role": "user" if i % 2 else "assistant",
                               "content": f"transfer {i} dollars to alice "
                                          + " ".join(rng.choices(words, k=20)) + big})
        store.fork("b", "a~30")
        b = store.session("b")
        for i in range(15):
            b.add_message({"role": "user", "content": f"b {i} " + " ".join(rng.choices(words, k=20))})
        store.tag("t", "a~5")
        expected = {
            "messages": {n: store.messages(n) for n in ("a", "b")},
            "log": {n: store.log(n) for n in ("a", "b")},
            "nodes": {node.id: node for n in ("a", "b") for node in store.log(n)[::20]},
            "sessions": [(s.name, s.head, s.length) for s in store.sessions()],
        }
    return expected


def reads(store: Any, expected: dict[str, Any]) -> list[tuple[str, Callable[[], Any], Any]]:
    out: list[tuple[str, Callable[[], Any], Any]] = []
    for name in ("a", "b"):
        out.append((f"messages {name}", lambda n=name: store.messages(n),
                    expected["messages"][name]))
        out.append((f"log {name}", lambda n=name: store.log(n), expected["log"][name]))
    for node_id, node in expected["nodes"].items():
        out.append((f"show {node_id[:8]}", lambda i=node_id: store.show(i), node))
    out.append(("sessions", lambda: [(s.name, s.head, s.length) for s in store.sessions()],
                expected["sessions"]))
    return out


def older_position(what: str, got: Any, want: Any) -> bool:
    """True if a read shows a session at an earlier point of its own history, or leaves a
    session out of the list: what damage to the reflog (which no hash covers) can do."""
    if what.startswith("messages"):
        return bool(got == want[: len(got)])
    if what.startswith("log"):
        return bool(got == want[len(want) - len(got):])
    if what == "sessions":
        listed = {name: (head, length) for name, head, length in want}
        return all(name in listed and length <= listed[name][1] for name, _, length in got)
    return False  # a node read by id is content-addressed: it is right or it fails


class Tally:
    def __init__(self) -> None:
        self.copies = self.refused = self.found_by_reads = self.found_by_fsck = 0
        self.harmless = self.missing_refs = self.ref_rolled_back = 0
        self.silent: list[str] = []
        self.tracebacks: list[str] = []
        self.unflagged: list[str] = []


def attack(original: Path, work: Path, expected: dict[str, Any], rng: random.Random,
           tally: Tally) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    data = bytearray((original / "store.db").read_bytes())
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
    (work / "store.db").write_bytes(bytes(data))
    tally.copies += 1
    failed = False
    older: list[str] = []
    try:
        store = open_store(work, create=False)
    except (StoreCorruptError, StoreFormatError):
        tally.refused += 1
        return
    except Exception:
        tally.tracebacks.append(traceback.format_exc())
        return
    with store:
        for what, read, want in reads(store, expected):
            try:
                got = read()
            except StoreCorruptError:
                failed = True
                continue
            except UnknownRevisionError:
                # A damaged ref name or id index hides a session or node: no data is shown,
                # and fsck must see it (checked below).
                tally.missing_refs += 1
                failed = True
                continue
            except Exception:
                tally.tracebacks.append(f"{what}: {traceback.format_exc()}")
                failed = True
                continue
            if got != want:
                failed = True
                if older_position(what, got, want):
                    older.append(what)
                else:
                    tally.silent.append(f"{tally.copies}: {what}")
        try:
            faults = store.fsck()
        except StoreCorruptError:
            faults = ["fsck: store damaged"]
        except Exception:
            tally.tracebacks.append(f"fsck: {traceback.format_exc()}")
            return
    tally.found_by_reads += failed
    tally.found_by_fsck += bool(faults)
    if failed and not faults:
        tally.unflagged.append(f"copy {tally.copies}")
    if older and faults:
        tally.ref_rolled_back += 1
    elif older:
        tally.silent += [f"{tally.copies}: {what} (ref damage fsck missed)" for what in older]
    if not failed and not faults:
        tally.harmless += 1


def campaign(tmp_path: Path, copies: int, seed: int,
             make: Callable[[Path], dict[str, Any]] = build) -> Tally:
    original = tmp_path / "original"
    expected = make(original)
    rng = random.Random(seed)
    tally = Tally()
    for _ in range(copies):
        attack(original, tmp_path / "copy", expected, rng, tally)
    print(f"\ndamaged copies: {tally.copies}; refused at open: {tally.refused}; "
          f"found by reads: {tally.found_by_reads}; found by fsck: {tally.found_by_fsck}; "
          f"harmless (unused bytes): {tally.harmless}; a ref or node hidden: "
          f"{tally.missing_refs}; a ref rolled back (found by fsck only): "
          f"{tally.ref_rolled_back}; silent wrong reads: {len(tally.silent)}; "
          f"tracebacks: {len(tally.tracebacks)}")
    assert tally.tracebacks == [], tally.tracebacks[0]
    assert tally.silent == [], tally.silent
    assert tally.unflagged == [], tally.unflagged
    return tally


def test_damaged_copies_never_give_wrong_data_or_tracebacks(tmp_path: Path) -> None:
    campaign(tmp_path, copies=40, seed=1)


def test_damaged_compressed_copies_never_give_wrong_data_or_tracebacks(tmp_path: Path) -> None:
    campaign(tmp_path, copies=40, seed=3, make=build_compressed)


@pytest.mark.stress
def test_damaged_copies_many(tmp_path: Path) -> None:
    campaign(tmp_path, copies=500, seed=2)


@pytest.mark.stress
def test_damaged_compressed_copies_many(tmp_path: Path) -> None:
    campaign(tmp_path, copies=300, seed=5, make=build_compressed)
