"""Packs on PostgreSQL (format 5), as the engine keeps them: whole runs of PACK_AT packed after
the commit that makes them, a tail packed when its writer closes, payloads moved into frames
or kept apart, two packers on one tail, writers and gc killed while they pack, and damage to
packs and their index found on every read and by fsck. The engine-agnostic promises are the
pack contract (``test_postgres_contract.py``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sesstree import Store, open_store
from sesstree.errors import StoreCorruptError
from sesstree.node import Node, make_node
from sesstree.repo.store import raw_node
from sesstree.store.packs import INLINE_MAX, PACK_AT, PACK_MIN
from sesstree.testing import user

SRC = Path(__file__).resolve().parents[3] / "src"


def sql(url: str, statement: str, *args: Any) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, args)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description is not None else []


def grow(store: Store, name: str, n: int, start: int = 0) -> list[Node]:
    s = store.session(name)
    return [s.add_message(user(f"{name} {i} " + "word " * (i % 50))) for i in range(start, start + n)]


def test_whole_runs_of_pack_at_are_packed_after_the_commit_and_the_rest_waits(
    postgres_url: str,
) -> None:
    with open_store(postgres_url) as store:
        path = grow(store, "q", 2 * PACK_AT + 10)
        packs = sql(postgres_url, "SELECT depth, count, base FROM packs ORDER BY pid")
        seq_256 = sql(postgres_url, "SELECT seq FROM nodes WHERE id = %s",
                      bytes.fromhex(path[PACK_AT - 1].id))[0][0]
        assert packs == [(1, PACK_AT, None), (PACK_AT + 1, PACK_AT, seq_256)]
        assert sql(postgres_url, "SELECT count(*) FROM nodes WHERE pack IS NULL") == [(10,)]
        assert sql(postgres_url, "SELECT count(*) FROM nodes WHERE pack IS NOT NULL "
                   "AND length(data) = 0") == [(2 * PACK_AT,)]
    # Closed, the writer leaves a tail shorter than PACK_MIN loose; a tail that long is packed.
    assert sql(postgres_url, "SELECT count(*) FROM packs") == [(2,)]
    with open_store(postgres_url) as store:
        path += grow(store, "q", PACK_MIN - 10, start=len(path))
    assert sql(postgres_url, "SELECT depth, count FROM packs ORDER BY pid DESC LIMIT 1") == [
        (2 * PACK_AT + 1, PACK_MIN)]
    with open_store(postgres_url) as store:
        assert store.backend.chain(path[-1].id).ids == [n.id for n in path]
        assert store.backend.pack_counts().loose_nodes == 0  # type: ignore[attr-defined]


def test_payloads_go_into_the_frame_or_stay_apart_and_their_blobs_follow(
    postgres_url: str,
) -> None:
    mid = {"role": "tool", "tool_call_id": "m", "content": "a line of a file\n" * 200}
    big = {"role": "tool", "tool_call_id": "b", "content": os.urandom(INLINE_MAX).hex()}
    shared = {"role": "tool", "tool_call_id": "s", "content": "shared line\n" * 300}
    with open_store(postgres_url) as store:
        store.session("loose").add_message(shared)  # a session too short to be packed
        q = store.session("q")
        path = [q.add_message(m) for m in (mid, big, shared)]
        assert sql(postgres_url, "SELECT count(*) FROM blobs") == [(3,)]
        path += grow(store, "q", PACK_AT)  # and the first PACK_AT are packed
        # mid's blob went into its frame; big's is kept apart (its row still names it); the
        # shared one stays for the loose row that names it.
        assert sql(postgres_url, "SELECT count(*) FROM blobs") == [(2,)]
    kept = sql(postgres_url, "SELECT id FROM nodes WHERE blob IS NOT NULL AND pack IS NOT NULL")
    assert [bytes(r[0]).hex() for r in kept] == [path[1].id]
    with open_store(postgres_url) as store:
        assert store.messages("q")[:3] == [mid, big, shared]
        for node in path[:3]:
            got = store.backend.get(node.id)
            assert got is not None and got.encoded == raw_node(node).encoded
        assert store.messages("loose") == [shared]
        assert store.fsck() == []
        # gc of the packed session takes big's blob with it; the loose one keeps its own.
        store.delete_session("q")
        store.expire_reflog("q")
        assert store.gc().removed == len(path)
        assert store.backend.pack_counts().packs == 0  # type: ignore[attr-defined]
        assert store.messages("loose") == [shared]
    assert sql(postgres_url, "SELECT count(*) FROM blobs") == [(1,)]


def test_two_packers_on_one_tail_pack_each_node_once(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        q = store.session("seed")
        first = q.add_message(user("root"))
        nodes = [first]
        for i in range(3 * PACK_AT):  # nodes with no ref moved: nothing packs them
            nodes.append(make_node(nodes[-1].id, "user/message", user(f"unlinked {i}")))
        store.write(nodes[1:])
    stores = [open_store(postgres_url), open_store(postgres_url)]
    try:
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def pack(s: Store) -> None:
            try:
                start.wait()
                s.backend._packer.pack_tail(bytes.fromhex(nodes[-1].id), 1, 40)  # type: ignore[attr-defined]
            except BaseException as exc:  # (reported by the test, not lost in the thread)
                errors.append(exc)

        threads = [threading.Thread(target=pack, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    finally:
        for s in stores:
            s.close()
    assert sql(postgres_url, "SELECT count(*), sum(count) FROM packs")[0][1] == len(nodes)
    assert sql(postgres_url, "SELECT count(*) FROM nodes WHERE pack IS NULL") == [(0,)]
    with open_store(postgres_url) as store:
        assert store.backend.chain(nodes[-1].id).ids == [n.id for n in nodes]
        assert store.fsck() == []


def test_writers_killed_while_they_pack_lose_nothing(postgres_url: str) -> None:
    rng = random.Random(11)
    helper = Path(__file__).resolve().parents[2] / "helpers" / "append_loop.py"
    acked: list[int] = []
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, str(helper), postgres_url, "quest"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(SRC)})
        assert proc.stdout is not None and proc.stderr is not None
        target = len(acked) + rng.randint(PACK_AT // 2, PACK_AT + 40)
        for line in proc.stdout:
            acked.append(int(line.split()[1]))
            if len(acked) >= target:
                break
        time.sleep(rng.random() * 0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with proc.stdout, proc.stderr:
            rest = proc.stdout.read()
        acked.extend(int(x.split()[1]) for x in rest.splitlines() if x.startswith("ACK"))
        with open_store(postgres_url, create=False) as store:
            contents = [m["content"] for m in store.messages("quest")]
            assert contents == [f"m:{i}" for i in range(len(contents))], "gap or reorder"
            assert len(contents) > max(acked)
            assert store.fsck() == []
    assert sql(postgres_url, "SELECT count(*) FROM packs")[0][0] >= 2


GC = """
import sys
from sesstree import open_store
with open_store(sys.argv[1]) as store:
    print("walking", flush=True)
    store.gc()
print("done", flush=True)
"""


def test_gc_killed_while_it_repacks_loses_nothing(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        with store.batch():
            path = grow(store, "q", 4 * PACK_AT)
        forks = {}
        for k, at in enumerate((10, PACK_AT + 3, 2 * PACK_AT + 100)):
            store.fork(f"f{k}", path[at].id)
            forks[f"f{k}"] = path[: at + 1] + grow(store, f"f{k}", PACK_MIN + k)
        store.backend.repack()  # type: ignore[attr-defined]
        store.session("q").rewind(3 * PACK_AT)
        store.expire_reflog("q")
        keep = path[:PACK_AT]
    rng = random.Random(3)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", GC, postgres_url], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(rng.random() * 0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        with open_store(postgres_url) as store:
            assert store.backend.chain(keep[-1].id).ids == [n.id for n in keep]
            for name, fork in forks.items():
                assert store.backend.chain(fork[-1].id).ids == [n.id for n in fork], name
            assert store.fsck() == []
    with open_store(postgres_url) as store:
        store.gc()
        kept = {n.id for n in keep} | {n.id for f in forks.values() for n in f}
        assert store.backend.count_nodes() == len(kept)
        counts = store.backend.pack_counts()  # type: ignore[attr-defined]
        assert counts.packed_nodes + counts.loose_nodes == len(kept)
        assert store.fsck() == []


def _expected(store: Store) -> dict[str, list[Node]]:
    return {s.name: store.session(s.name).events() for s in store.sessions()}


def _reads(store: Store, expected: dict[str, list[Node]], rng: random.Random) -> int:
    """Read every session, some nodes by id and every node: each read gives exactly what was
    stored or raises StoreCorruptError. Returns how many reads raised."""
    raised = 0
    for path in expected.values():
        try:
            chain = store.backend.chain(path[-1].id)
            assert chain.ids == [n.id for n in path] and chain.datas == [n.data for n in path]
        except StoreCorruptError:
            raised += 1
        for node in rng.sample(path, 5):
            try:
                got = store.backend.get(node.id)
                assert got is not None and got.encoded == raw_node(node).encoded
                assert got.parent == node.parent
            except StoreCorruptError:
                raised += 1
    every = {n.id: raw_node(n).encoded for p in expected.values() for n in p}
    try:
        assert {n.id: n.encoded for n in store.backend.iter_nodes()} == every
    except StoreCorruptError:
        raised += 1
    return raised


def test_damage_to_packs_is_never_read_as_data_and_fsck_finds_it(postgres_url: str) -> None:
    rng = random.Random(2024)
    with open_store(postgres_url) as store:
        grow(store, "q", 2 * PACK_AT + 30)
        store.fork("f", f"q~{PACK_AT + 40}")
        grow(store, "f", PACK_MIN + 5)
        store.backend.repack()  # type: ignore[attr-defined]
        expected = _expected(store)
    pids = [r[0] for r in sql(postgres_url, "SELECT pid FROM packs ORDER BY pid")]
    columns = ["data", "data", "data", "sum", "codec", "depth", "count", "base"]
    for _ in range(40):
        pid, column = rng.choice(pids), rng.choice(columns)
        (before,) = sql(postgres_url, f"SELECT {column} FROM packs WHERE pid = %s", pid)[0]
        if column in ("data", "sum"):
            at = rng.randrange(len(before))
            after: Any = bytearray(before)
            after[at] ^= 1 << rng.randrange(8)
            after = bytes(after)
        elif before is None:
            continue
        else:
            after = before + rng.choice([-1, 1, 7])
        sql(postgres_url, f"UPDATE packs SET {column} = %s WHERE pid = %s", after, pid)
        with open_store(postgres_url) as store:
            raised = _reads(store, expected, rng)
            faults = store.fsck()
        assert raised, (column, pid)
        assert any(f"pack {pid} (" in f for f in faults), (column, faults)
        sql(postgres_url, f"UPDATE packs SET {column} = %s WHERE pid = %s", before, pid)
    # The index rows of packed nodes: their pack, their depth.
    rows = sql(postgres_url, "SELECT seq, pack, depth FROM nodes WHERE pack IS NOT NULL")
    for _ in range(15):
        seq, pack, depth = rng.choice(rows)
        column, value = rng.choice([("pack", rng.choice(pids)), ("depth", depth + 1)])
        if column == "pack" and value == pack:
            continue
        sql(postgres_url, f"UPDATE nodes SET {column} = %s WHERE seq = %s", value, seq)
        with open_store(postgres_url) as store:
            raised = _reads(store, expected, rng)
            faults = store.fsck()
        assert faults, (column, seq)
        del raised  # (a node no read happened to touch may read fine: fsck finds it)
        sql(postgres_url, "UPDATE nodes SET pack = %s, depth = %s WHERE seq = %s",
            pack, depth, seq)
    with open_store(postgres_url) as store:
        assert _reads(store, expected, rng) == 0
        assert store.fsck() == []


@pytest.mark.parametrize("limit", [1, PACK_AT, PACK_AT + 1])
def test_a_limited_read_of_a_packed_path_reads_only_the_packs_it_needs(
    postgres_url: str, limit: int
) -> None:
    with open_store(postgres_url) as store:
        path = grow(store, "q", 3 * PACK_AT)
        row = store.backend._db.execute(  # type: ignore[attr-defined]
            "SELECT cardinality(o_packs) FROM sesstree_path(%s, %s)",
            (bytes.fromhex(path[-1].id), limit)).fetchone()
        assert row == (1 if limit <= PACK_AT else 2,)
        assert store.backend.chain(path[-1].id, limit=limit).ids == [n.id for n in path[-limit:]]
