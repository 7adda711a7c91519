"""Each command's work follows what it touches, not what the store holds.

Work is counted, never timed: SQLite's virtual machine steps (``set_progress_handler`` calls
back every N instructions, a deterministic count of the work a statement does), the SQL
statements run (``set_trace_callback``), which columns they read, and which backend calls a
command makes. A store ten times larger must not cost ten times the work.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from codec_kit import read_only_run
from core_testkit import assistant, user

from sesstree import Store, make_node, open_store
from sesstree.cli.graph import GraphNode, draw_graph, stream_graph
from sesstree.cli.reading import _ref_labels
from sesstree.repo.maintenance import Stats, fsck, gc
from sesstree.store.base import PackCounts
from sesstree.store.sqlite.packing import PENDING

# -- helpers ---------------------------------------------------------------------------------


def fill(store: Store, sessions: int, length: int, *, seed: int = 1, big: bool = True,
         prefix: str = "s") -> None:
    """``sessions`` sessions of ``length`` messages, a quarter forked from earlier ones; some
    payloads over 1 KB (stored apart)."""
    rng = random.Random(seed)
    names: list[str] = []
    with store.batch():
        for k in range(sessions):
            name = f"{prefix}{k:04d}"
            if names and rng.random() < 0.25:
                store.fork(name, f"{rng.choice(names)}~{rng.randint(0, length - 1)}")
            s = store.session(name)
            for i in range(length):
                text = f"{name} {i} " + ("x" * 1500 if big and i % 3 == 0 else "short")
                s.add_message(user(text) if i % 2 == 0 else assistant(text))
            names.append(name)


def garbage(store: Store, n: int) -> list[str]:
    """``n`` nodes nothing names (an aborted import)."""
    nodes, parent = [], None
    for i in range(n):
        node = make_node(parent, "user/message", user(f"junk {i} " + "y" * (1200 if i % 4 else 5)))
        nodes.append(node)
        parent = node.id
    store.write(nodes)
    return [n.id for n in nodes]


def db_of(store: Store) -> sqlite3.Connection:
    db = store.backend._db  # type: ignore[attr-defined]
    assert isinstance(db, sqlite3.Connection)
    return db


@contextmanager
def vm_steps(store: Store) -> Iterator[list[int]]:
    """Count SQLite VM instructions (in hundreds) run inside the block."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    db = db_of(store)
    db.set_progress_handler(tick, 100)
    try:
        yield count
    finally:
        db.set_progress_handler(None, 0)


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    seen: list[str] = []
    db = db_of(store)
    db.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        db.set_trace_callback(None)


def steps_of(store: Store, fn: Callable[[], Any]) -> int:
    fn()  # warm: caches and the derived path sizes
    with vm_steps(store) as count:
        fn()
    return count[0]


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small store and one with ten times the sessions and nodes."""
    small, large = tmp_path_factory.mktemp("small"), tmp_path_factory.mktemp("large")
    with open_store(small) as s:
        fill(s, 20, 12)
        s.checkout("s0005")
    with open_store(large) as s:
        fill(s, 200, 12)
        s.checkout("s0005")
    return small, large


def bounded(two_sizes: tuple[Path, Path], fn: Callable[[Store], Any], factor: float = 1.5) -> None:
    small_dir, large_dir = two_sizes
    with open_store(small_dir) as small, open_store(large_dir) as large:
        a = steps_of(small, lambda: fn(small))
        b = steps_of(large, lambda: fn(large))
    assert b <= factor * a + 20, (a, b)  # (+20: a few hundred steps of fixed noise)


# -- flat commands ---------------------------------------------------------------------------


def test_log_n_20_and_its_labels_read_a_bounded_number_of_rows(two_sizes: tuple[Path, Path]) -> None:
    def log20(store: Store) -> None:
        nodes = store.log("HEAD", 20)
        _ref_labels(store, [n.id for n in nodes])

    bounded(two_sizes, log20)


def test_show_prefix_is_flat(two_sizes: tuple[Path, Path]) -> None:
    def show(store: Store) -> None:
        head = store.session_head("s0005")
        assert head is not None
        node = store.show(head[:8])
        _ref_labels(store, [node.id])

    bounded(two_sizes, show)


def test_labels_name_exactly_the_refs_at_the_nodes(store: Store) -> None:
    sqlite_store = store  # (every backend)
    s = sqlite_store.session("main")
    a = s.add_message(user("a")).id
    b = s.add_message(user("b")).id
    sqlite_store.fork("side", a)
    sqlite_store.tag("v1", a)
    sqlite_store.fork("gone", b)
    sqlite_store.delete_session("gone")
    assert _ref_labels(sqlite_store, [a, b]) == {a: ["side", "tag: v1"], b: ["HEAD -> main"]}
    assert _ref_labels(sqlite_store, [a, b]) == {
        k: v for k, v in _ref_labels(sqlite_store).items() if k in (a, b)}
    with sqlite_store.batch():  # moves not logged yet are seen too
        sqlite_store.reset("side", b)
        assert _ref_labels(sqlite_store, [a])[a] == ["tag: v1"]
        assert _ref_labels(sqlite_store, [b])[b] == ["HEAD -> main", "side"]


def test_sessions_fetch_no_head(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    s = store.session("a")
    s.add_message(user("one"))
    s.add_message(user("two"))
    store.fork("b", "a~1")
    if store.backend.__class__.__name__ != "MemoryBackend":
        monkeypatch.setattr(store.backend, "get", lambda id: pytest.fail("a head was fetched"))
    assert [(i.name, i.length) for i in store.sessions()] == [("a", 2), ("b", 1)]
    with store.batch():
        store.session("c").add_message(user("three"))
        assert [(i.name, i.length) for i in store.sessions()] == [("a", 2), ("b", 1), ("c", 1)]


def test_branch_is_one_statement_whatever_the_number_of_sessions(sqlite_store: Store) -> None:
    fill(sqlite_store, 60, 3, big=False)
    with statements(sqlite_store) as seen:
        assert len(sqlite_store.sessions()) == 60
    assert len([s for s in seen if not s.startswith("PRAGMA")]) == 1


def test_stats_after_the_first_reads_no_payload_and_is_flat(two_sizes: tuple[Path, Path]) -> None:
    for folder in two_sizes:
        with open_store(folder) as store:
            store.stats()  # the first fills the path sizes
            with statements(store) as seen:
                again = store.stats()
            # The one read of rows with their data asks for rows past the last sized one.
            assert all("n.data" not in s or "n.seq > " in s for s in seen), seen
            assert again.logical_bytes > again.nodes
    with open_store(two_sizes[0]) as small, open_store(two_sizes[1]) as large:
        a = steps_of(small, small.stats)
        b = steps_of(large, large.stats)
    # Sessions are 10x, so refs are counted 10x; nodes and payloads are not walked.
    assert b <= 12 * a


def test_stats_logical_bytes_match_a_full_pass(store: Store) -> None:
    fill(store, 8, 6)
    store.tag("t", "s0001")
    first = store.stats()
    store.session("s0002").add_message(user("more " * 50))  # sized by the next stats
    second = store.stats()
    expected = 0
    for info in store.sessions():
        expected += sum(len(__import__("msgspec").json.encode(n.data)) + 1
                        for n in store.log(info.name))
    assert second.logical_bytes == expected
    assert second.logical_bytes > first.logical_bytes
    assert (second.sessions, second.tags) == (8, 1)


# -- gc --------------------------------------------------------------------------------------


def test_gc_reads_no_payload_and_removes_only_garbage(sqlite_store: Store) -> None:
    fill(sqlite_store, 10, 6)
    dead = garbage(sqlite_store, 1300)  # three chunks
    before = {i.name: sqlite_store.messages(i.name) for i in sqlite_store.sessions()}
    with statements(sqlite_store) as seen:
        result = gc(sqlite_store)
    assert sorted(result.unreachable) == sorted(dead) and result.removed == 1300
    payload_reads = [s for s in seen if ".data" in s or " data," in s or "data FROM" in s]
    assert payload_reads == []
    assert {i.name: sqlite_store.messages(i.name) for i in sqlite_store.sessions()} == before
    assert sqlite_store.backend.has(dead) == set()
    assert sqlite_store.fsck() == []
    # The payloads only the garbage used are gone too, and no others.
    db = db_of(sqlite_store)
    assert db.execute("SELECT count(*) FROM blobs WHERE bid NOT IN "
                      "(SELECT bid FROM nodes WHERE bid IS NOT NULL)").fetchone()[0] == 0


def test_gc_keeps_what_a_write_during_its_removal_reaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sesstree.store.sqlite import gc as sqlite_gc

    with open_store(tmp_path / "s") as store, open_store(tmp_path / "s") as other:
        store.session("main").add_message(user("named"))
        dead = garbage(store, 1200)
        original = sqlite_gc._chunks

        def chunks(seqs: Iterator[int]) -> Iterator[list[int]]:
            # After the walk, before the first removal: another process forks at a doomed
            # node and appends a child to another.
            other.fork("saved", dead[300])
            child = make_node(dead[700], "user/message", user("child of a doomed node"))
            other.write([child])
            other.move_ref("sessions/kid", None, child.id, "test")
            yield from original(seqs)

        monkeypatch.setattr(sqlite_gc, "_chunks", chunks)
        result = gc(store)
        assert result.removed == 1200 - 701  # 0..700 are reached again; 701.. go
        assert [m["content"] for m in store.messages("saved")][-1] == "junk 300 " + "y" * 5
        assert len(store.messages("kid")) == 702
        assert store.fsck() == []


def test_gc_while_a_writer_appends_loses_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    folder, stop = tmp_path / "s", tmp_path / "stop"
    with open_store(folder) as store:
        store.session("w").add_message(user("start"))
        garbage(store, 6000)  # twelve chunks
    writer = subprocess.Popen(
        [sys.executable, "-c", (
            "import pathlib, sys, time\n"
            "from sesstree import open_store\n"
            "s = open_store(sys.argv[1]).session('w')\n"
            "stop, i = pathlib.Path(sys.argv[2]), 0\n"
            "print('ready', flush=True)\n"
            "while not stop.exists():\n"
            "    node = s.add_message({'role': 'user', 'content': f'w{i}'})\n"
            "    print(node.id, time.time(), flush=True)\n"
            "    i += 1\n"
        ), str(folder), str(stop)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    with open_store(folder) as store:
        began = time.time()
        result = gc(store)
        ended = time.time()
    stop.touch()
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    acknowledged = [line.split() for line in out.splitlines()]
    # The writer kept appending while gc ran (its appends are stamped inside gc's run).
    assert any(began <= float(t) <= ended for _, t in acknowledged)
    assert result.removed == 6000
    with open_store(folder) as store:
        ids = [i for i, _ in acknowledged]
        assert store.backend.has(ids) == set(ids)
        assert [m["content"] for m in store.messages("w")] == ["start"] + [
            f"w{i}" for i in range(len(ids))]
        assert store.fsck() == []


def test_gc_progress_reaches_the_end(sqlite_store: Store) -> None:
    garbage(sqlite_store, 1100)
    seen: list[tuple[int, int]] = []
    gc(sqlite_store, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (1100, 1100)


# -- fsck ------------------------------------------------------------------------------------


def test_fsck_streams_the_rows_and_reports_progress(sqlite_store: Store) -> None:
    fill(sqlite_store, 30, 100, big=False)  # 3,000 nodes: two slices
    seen: list[tuple[int, int]] = []
    with statements(sqlite_store) as sql:
        assert fsck(sqlite_store, progress=lambda d, t: seen.append((d, t))) == []
    reads = [s for s in sql if "n.data" in s]
    assert reads and all("LIMIT" in s for s in reads)
    assert len(seen) >= 2 and seen[-1][0] == seen[-1][1]


def test_fsck_still_finds_a_damaged_node_in_a_later_slice(sqlite_store: Store) -> None:
    from sesstree.node import encode_data

    fill(sqlite_store, 30, 100, big=False)
    db = db_of(sqlite_store)
    key, pack = db.execute("SELECT id, pack FROM nodes WHERE seq = 2500").fetchone()
    assert pack is None  # (loose: its type and payload are in `loose`)
    with db:
        db.execute("UPDATE loose SET data = ? WHERE seq = 2500", (
            b"\xacuser/message" + encode_data({"role": "user", "content": "forged"}),))
    assert fsck(sqlite_store) == [f"node {key.hex()[:12]} does not hash to its id (content damaged)"]


# -- log --graph ----------------------------------------------------------------------------


def _all_tips(store: Store) -> list[str]:
    tips = [r.target for r in store.backend.list_refs("")]
    head = store.head()[1]
    return tips + ([head] if head else [])


def test_streamed_graph_draws_what_the_whole_tree_drawing_draws(store: Store) -> None:
    rng = random.Random(5)
    for round_ in range(3):
        fill(store, 12, 6, seed=round_ + 10 * rng.randint(0, 9), big=False, prefix=f"r{round_}-")
        store.session(f"lone{round_}").add_message(user(f"unrelated {round_}"))
        store.tag(f"t{round_}", f"r{round_}-0001~2")
        labels = {}
        stored = list(store.backend.iter_nodes())
        reach = set()
        for tip in _all_tips(store):
            cur: Any = tip
            while cur is not None and cur not in reach:
                reach.add(cur)
                cur = next(n.parent for n in stored if n.id == cur)
        whole = [GraphNode(n.id, n.parent, n.id[:8]) for n in stored if n.id in reach]
        labels = {n.id: n.id[:8] for n in stored}
        streamed = list(stream_graph(store, _all_tips(store),
                                     lambda nodes, at=labels: [at[n.id] for n in nodes]))
        assert streamed == draw_graph(whole)


def test_streamed_graph_reads_slices_and_never_the_whole_store(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sesstree.cli import graph

    fill(sqlite_store, 5, 40, big=False)
    monkeypatch.setattr(graph, "_PIECE", 16)
    monkeypatch.setattr(sqlite_store.backend, "iter_nodes",
                        lambda: pytest.fail("the whole store was read"))
    asked: list[int | None] = []
    chain = sqlite_store.chain

    def counting(rev: Any, limit: int | None = None) -> Any:
        asked.append(limit)
        return chain(rev, limit)

    monkeypatch.setattr(sqlite_store, "chain", counting)
    labels = stream_graph(sqlite_store, _all_tips(sqlite_store),
                          lambda nodes: [n.type for n in nodes])
    first = [next(labels) for _ in range(5)]
    assert len(first) == 5 and asked == [16]  # stopped early: one slice read
    rest = list(labels)
    assert len(first) + len(rest) >= sqlite_store.backend.count_nodes()
    assert all(a is not None and a <= 16 for a in asked)


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the links walked and the nodes read by every store in the process. (Links are
    counted as the walk takes them; a backend fetches them in slices of a fixed size.)"""
    from sesstree.repo import scan

    seen = {"links": 0, "nodes": 0}
    newest_first = scan.Links.newest_first
    chain = Store.chain

    def links(self: Any) -> Iterator[tuple[int, int | None]]:
        for row in newest_first(self):
            seen["links"] += 1
            yield row

    def nodes(self: Any, rev: Any, limit: int | None = None) -> Any:
        out = chain(self, rev, limit)
        seen["nodes"] += len(out)
        return out

    monkeypatch.setattr(scan.Links, "newest_first", links)
    monkeypatch.setattr(Store, "chain", nodes)
    return seen


@pytest.mark.parametrize("sessions", [30, 300])
def test_graph_n_20_reads_what_its_lines_need_not_the_store(
    tmp_path: Path, sess: Any, monkeypatch: pytest.MonkeyPatch, sessions: int
) -> None:
    where = tmp_path / "big"
    with open_store(where) as s:
        fill(s, sessions, 10, big=False)  # forks of older sessions at older points included
        total = s.backend.count_nodes()
    seen = _counting_reads(monkeypatch)
    lines = sess.lines("--store", str(where), "log", "--graph", "--all", "-n", "20")
    assert len(lines) == 20 and lines[0].startswith("* ")
    # The newest session's lines: its links and the slice of nodes drawn, whatever the size.
    assert seen["links"] <= 40 and seen["nodes"] <= 64, (seen, total)
    seen.update(links=0, nodes=0)
    everything = sess.lines("--store", str(where), "log", "--graph", "--all")
    assert everything[:20] == lines
    assert seen["nodes"] >= total > 250  # (the same counters see a whole drawing)
    # One session (an old one): its path, and no walk of what was written after it.
    seen.update(links=0, nodes=0)
    one = sess.lines("--store", str(where), "log", "--graph", "s0002")
    assert seen == {"links": 0, "nodes": len(one)} and len(one) >= 10


def test_graph_n_20_draws_a_join_once_the_paths_below_are_walked(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest session's last event follows 500 of other sessions: its first three lines
    are known only once those links are walked, and nothing older is."""
    fill(sqlite_store, 100, 10, big=False)
    sqlite_store.fork("late", "s0003~5")
    for i in range(2):
        sqlite_store.session("late").add_message(user(f"late {i}"))
    fill(sqlite_store, 50, 10, big=False, prefix="old", seed=3)  # written later, older tips
    sqlite_store.session("late").add_message(user("newest"))
    seen = _counting_reads(monkeypatch)
    tips = _all_tips(sqlite_store)
    labels = stream_graph(sqlite_store, tips, lambda nodes: [n.id[:8] for n in nodes], lines=3)
    first = list(itertools.islice(labels, 3))
    assert 500 < seen["links"] <= 503 + 5 < sqlite_store.backend.count_nodes() - 500
    assert seen["nodes"] == 3  # a first slice the size of the lines asked for
    rest = list(labels)
    stored = list(sqlite_store.backend.iter_nodes())
    reach: set[str] = set()
    for tip in tips:
        cur: Any = tip
        while cur is not None and cur not in reach:
            reach.add(cur)
            cur = next(n.parent for n in stored if n.id == cur)
    whole = [GraphNode(n.id, n.parent, n.id[:8]) for n in stored if n.id in reach]
    assert first + rest == draw_graph(whole)


@pytest.mark.parametrize("seed", range(4))
def test_streamed_graph_of_interleaved_writers_matches_the_whole_drawing(
    store: Store, seed: int
) -> None:
    """Sessions appended to in turns (unrelated roots, forks of forks, tags, HEAD detached
    or not): the lazy walk holds many half-walked paths at once and still draws what the
    whole-tree drawing draws."""
    rng = random.Random(seed)
    names: list[str] = []
    for step in range(160):
        if not names or rng.random() < 0.12:
            name = f"n{step}"
            if names and rng.random() < 0.6:
                base = rng.choice(names)
                back = rng.randint(0, len(store.session(base)) - 1)
                store.fork(name, f"{base}~{back}")
            names.append(name)
        else:
            name = rng.choice(names)
        store.session(name).add_message(user(f"{name} {step}"))
        if rng.random() < 0.05:
            store.tag(f"t{step}", name)
    if seed % 2:
        store.checkout(store.resolve(f"{names[0]}~0"))
    stored = list(store.backend.iter_nodes())
    parent = {n.id: n.parent for n in stored}
    reach: set[str] = set()
    for tip in _all_tips(store):
        cur: Any = tip
        while cur is not None and cur not in reach:
            reach.add(cur)
            cur = parent[cur]
    whole = [GraphNode(n.id, n.parent, n.id[:8]) for n in stored if n.id in reach]
    streamed = list(stream_graph(store, _all_tips(store),
                                 lambda nodes: [n.id[:8] for n in nodes]))
    assert streamed == draw_graph(whole)


def test_log_graph_all_on_the_cli_matches(tmp_path: Path, sess: Any) -> None:
    sess.quest()
    lines = sess.lines("log", "--graph", "--all")
    assert lines[0].startswith("* ") and "(HEAD -> main)" in lines[0]


# -- store format ----------------------------------------------------------------------------


def test_an_older_store_is_upgraded_on_open_and_read_as_it_is_when_read_only(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "s"
    with open_store(folder) as store:
        fill(store, 4, 5)
    path = folder / "store.db"
    with sqlite3.connect(path) as db:  # back to format 1
        db.execute("DROP INDEX nodes_bid")
        db.execute("DROP INDEX reflog_new")
        db.execute("DROP INDEX reflog_time")
        db.execute("DROP TABLE path_bytes")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'format'")
    db.close()
    # Read-only (a process that cannot write it): read as it is.
    stats, labels = msgspec.json.decode(read_only_run(folder, _READ_ONLY),
                                        type=tuple[Stats, list[str]])
    assert stats.sessions == 4 and stats.logical_bytes > 0 and labels == ["s0001"]
    assert stats.packs == PackCounts(0, 0, 20, 0, 0)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] == "1"
    db.close()
    with open_store(folder) as store:
        db = db_of(store)
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        assert {"nodes_bid", "reflog_new", "reflog_time", "path_bytes"} <= names
        # Upgraded to format 7 when opened; the nodes it has are packed afterwards, online
        # (at the writer's pauses, or as here all at once by `sess repack`).
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        assert meta["format"] == "7" and meta[PENDING] == "1"
        assert store.backend.pack_counts() == stats.packs  # type: ignore[attr-defined]
        counts = store.repack()
        assert counts is not None and (counts.packed_nodes, counts.loose_nodes) == (20, 0)
        assert db.execute("SELECT 1 FROM meta WHERE key = ?", (PENDING,)).fetchone() is None
        now = store.stats()
        assert now.packs == counts
        assert msgspec.structs.replace(now, physical_bytes=stats.physical_bytes,
                                       packs=stats.packs) == stats
        assert store.fsck() == []


_READ_ONLY = """
import sys, msgspec
from sesstree import open_store
from sesstree.cli.reading import _ref_labels
with open_store(sys.argv[1], create=False) as store:
    assert store.backend.read_only
    head = store.session_head("s0001")
    print(msgspec.json.encode([store.stats(), _ref_labels(store, [head])[head]]).decode())
"""



# -- progress --------------------------------------------------------------------------------


def test_progress_is_drawn_only_on_a_terminal() -> None:
    import io

    from sesstree.cli.progress import TerminalProgress, terminal_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert terminal_progress("checking nodes", io.StringIO()) is None  # piped: nothing
    assert isinstance(terminal_progress("checking nodes", Tty()), TerminalProgress)
    out = io.StringIO()
    progress = TerminalProgress("checking nodes", out, interval=3600)
    progress(0, 2000)
    progress(1000, 2000)  # within the redraw interval: skipped
    progress(2000, 2000)  # the end is always drawn
    progress.finish()
    assert out.getvalue() == ("\rchecking nodes: 0% (0/2,000)\x1b[K"
                              "\rchecking nodes: 100% (2,000/2,000)\x1b[K\n")


def test_the_newest_sessions_are_read_through_an_index(two_sizes: tuple[Path, Path]) -> None:
    from sesstree.repo.scan import newest_refs

    bounded(two_sizes, lambda store: newest_refs(store.backend, "sessions/", 10))


def test_newest_refs_and_the_reflog_stamp_on_every_backend(store: Store) -> None:
    from sesstree.repo.scan import newest_refs, reflog_stamp

    for name in ("a", "b", "c", "d"):
        store.session(name).add_message({"role": "user", "content": name})
    store.tag("t1", "a")
    store.session("b").add_message({"role": "user", "content": "b again"})  # b moved last
    store.delete_session("c")  # gone: never listed
    before = reflog_stamp(store.backend)
    got = [r.name for r in newest_refs(store.backend, "sessions/", 10)]
    assert got == ["sessions/b", "sessions/d", "sessions/a"]
    assert [r.name for r in newest_refs(store.backend, "sessions/", 1, 1)] == ["sessions/d"]
    assert [r.name for r in newest_refs(store.backend, "tags/", 10)] == ["tags/t1"]
    assert newest_refs(store.backend, "sessions/", 10)[0].target == store.session_head("b")
    # An agent turn rewrites its entry rather than adding one: the stamp still moves.
    d = store.session("d")
    with d.log_group("run: turn"):
        d.add_message({"role": "user", "content": "one"})
        mid = reflog_stamp(store.backend)
        d.add_message({"role": "user", "content": "two"})
    after = reflog_stamp(store.backend)
    assert (mid.entries, mid.newest) != (before.entries, before.newest)
    assert after.entries == mid.entries and after.newest > mid.newest
    assert [r.name for r in newest_refs(store.backend, "sessions/", 1)] == ["sessions/d"]
