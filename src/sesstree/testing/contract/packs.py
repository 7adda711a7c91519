"""The engine contract, packs: what an engine that keeps packs (:class:`~sesstree.store.base.Packing`,
the frame of :mod:`sesstree.store.packs`) promises besides what the other topics check.

Packs change how a path is kept, never what is read: a session appended one event at a time
past ``PACK_AT`` is packed and reads back exactly (whole and limited paths, every node by id,
every node of the store, id prefixes), from the handle that wrote it and from a fresh one; a
fork made inside a pack reads the pack's prefix then its own events; ``repack`` packs the
tails too short to be packed by the writers; gc after a rewind drops the rewound events from
the packs too; a payload kept apart from its pack reads back and is stored once; and a flipped
byte in a pack is an error naming the pack, on every read and in fsck.

An engine without packs (the memory engine) skips these. The damage test needs the engine's
hook ``Engine.damage_pack(store)``, which flips one byte of the stored bytes of one pack (the
checksum left as it was), as bad media would; without it, that test is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from ...errors import StoreCorruptError
from ...node import Node
from ...repo.store import Store, raw_node
from ...store.base import Backend, PackCounts, Packing
from ...store.packs import INLINE_MAX, PACK_AT, PACK_MIN
from .. import Engine, assistant, user

__all__ = [
    "test_a_flipped_byte_in_a_pack_is_an_error_naming_the_pack",
    "test_a_fork_inside_a_pack_reads_its_prefix_then_its_own_events",
    "test_a_payload_kept_apart_from_its_pack_reads_back_and_is_stored_once",
    "test_a_session_appended_one_at_a_time_is_packed_and_reads_back",
    "test_a_tree_of_forks_reads_back_exactly",
    "test_gc_after_a_rewind_drops_the_rewound_events_from_the_packs",
    "test_repack_packs_the_tails_too_short_for_the_writers",
]


def packing(store: Store, engine: Engine) -> Packing:
    """The store's backend as a :class:`Packing`; the test is skipped if it keeps no packs."""
    backend = store.backend
    if not (callable(getattr(backend, "pack_counts", None))
            and callable(getattr(backend, "repack", None))):
        pytest.skip(f"the {engine.name} engine keeps no packs")
    found: Packing = backend  # type: ignore[assignment]
    return found


def counts(store: Store) -> PackCounts:
    """The pack counts of a store whose engine keeps packs."""
    found: PackCounts = store.backend.pack_counts()  # type: ignore[attr-defined]
    return found


def message(i: int) -> dict[str, Any]:
    """Message ``i`` of some varied agent traffic (what packs must give back exactly)."""
    kind = i % 5
    if kind == 0:
        return user(f"turn {i}: h\u00e9llo \u2603 \U0001f600 " + "word " * (i % 37))
    if kind == 1:
        return assistant(None, tool_calls=[{"id": f"c{i}", "type": "function", "function": {
            "name": "read", "arguments": msgspec.json.encode({"path": f"f{i}.txt"}).decode()}}])
    if kind == 2:
        return {"role": "tool", "tool_call_id": f"c{i - 1}", "content": "line\n" * (i % 300)}
    if kind == 3:
        return assistant("", refusal=None, extra={"n": -i, "f": i / 7, "deep": [[[i]], {}]})
    return user("")


def append(store: Store, name: str, n: int, start: int = 0) -> list[Node]:
    """Append messages ``start .. start + n`` to session ``name``, one commit each."""
    session = store.session(name)
    return [session.add_message(message(start + i)) for i in range(n)]


def reads_back(backend: Backend, path: list[Node]) -> None:
    """Every way of reading ``path`` (oldest first, a root first) gives it exactly."""
    head = path[-1].id
    ids = [n.id for n in path]
    full = backend.chain(head)
    assert full.ids == ids
    assert full.types == [n.type for n in path]
    assert full.datas == [n.data for n in path]
    assert full.start_depth == 1 and full.base is None
    for limit in sorted({1, 2, PACK_MIN + 1, PACK_AT - 1, PACK_AT, PACK_AT + 1, len(path) - 1}):
        if not 0 < limit < len(path):
            continue
        part = backend.chain(head, limit=limit)
        assert part.ids == ids[-limit:], limit
        assert part.datas == [n.data for n in path[-limit:]], limit
        assert part.start_depth == len(path) - limit + 1
        assert part.base == ids[-limit - 1]
    for depth, node in enumerate(path, 1):
        got = backend.get(node.id)
        assert got is not None, node.id
        assert (got.id, got.parent, got.depth, got.type) == (node.id, node.parent, depth, node.type)
        assert got.encoded == raw_node(node).encoded
    middle = path[len(path) // 2].id
    assert backend.resolve_prefix(middle[:20]) == [middle]
    assert backend.has(ids) == set(ids)


def every_node(backend: Backend, nodes: list[Node]) -> None:
    """``iter_nodes`` gives exactly ``nodes`` (the store holds nothing else), parents first."""
    seen: set[str] = set()
    got: dict[str, Any] = {}
    for n in backend.iter_nodes():
        assert n.parent is None or n.parent in seen
        seen.add(n.id)
        got[n.id] = (n.parent, n.type, n.encoded)
    assert got == {n.id: (n.parent, n.type, raw_node(n).encoded) for n in nodes}


def test_a_session_appended_one_at_a_time_is_packed_and_reads_back(
    store: Store, engine: Engine
) -> None:
    packing(store, engine)
    path = append(store, "q", PACK_AT + 40)
    after = counts(store)
    assert after.packs >= 1 and after.packed_nodes >= PACK_AT
    assert after.packed_nodes + after.loose_nodes == len(path)
    assert after.raw_bytes > after.stored_bytes > 0
    reads_back(store.backend, path)
    every_node(store.backend, path)
    assert store.messages("q") == [n.data for n in path]
    fresh = engine.open()
    try:
        reads_back(fresh.backend, path)
        assert fresh.messages("q") == [n.data for n in path]
        assert fresh.fsck() == []
    finally:
        fresh.close()


def test_a_fork_inside_a_pack_reads_its_prefix_then_its_own_events(
    store: Store, engine: Engine
) -> None:
    packing(store, engine)
    base = append(store, "q", PACK_AT + 10)
    assert counts(store).packs >= 1
    at = PACK_AT // 2  # well inside the first pack
    store.fork("f", base[at].id)
    own = append(store, "f", PACK_MIN + 4, start=1000)
    assert own[0].parent == base[at].id
    reads_back(store.backend, base[: at + 1] + own)
    reads_back(store.backend, base)
    before = counts(store)
    writer = engine.open()
    try:  # a fork of the fork, at one of its loose events, by a writer that packs it at close
        writer.fork("g", own[2].id)
        later = append(writer, "g", PACK_MIN, start=2000)
    finally:
        writer.close()
    assert counts(store).packs > before.packs
    reads_back(store.backend, base[: at + 1] + own[:3] + later)
    reads_back(store.backend, base[: at + 1] + own)
    every_node(store.backend, base + own + later)
    assert store.fsck() == []


def test_a_tree_of_forks_reads_back_exactly(store: Store, engine: Engine) -> None:
    packing(store, engine)
    trunk = append(store, "trunk", PACK_AT + PACK_MIN)
    paths = {"trunk": trunk}
    for k, (name, at, n) in enumerate([("a", 5, PACK_AT + 3), ("b", PACK_AT - 1, 3),
                                       ("c", PACK_AT + 2, PACK_MIN)]):
        store.fork(name, trunk[at].id)
        paths[name] = trunk[: at + 1] + append(store, name, n, start=10_000 * (k + 1))
    store.fork("a2", paths["a"][PACK_AT].id)  # a fork of a fork, inside a's packed part
    paths["a2"] = paths["a"][: PACK_AT + 1] + append(store, "a2", PACK_MIN + 1, start=50_000)
    writer = engine.open()
    try:  # the trunk goes on in another handle, which packs what it grew when it closes
        paths["trunk"] = trunk + append(writer, "trunk", PACK_MIN * 2, start=len(trunk))
    finally:
        writer.close()
    for name, path in paths.items():
        reads_back(store.backend, path)
        assert store.messages(name) == [n.data for n in path]
    every_node(store.backend, list({n.id: n for p in paths.values() for n in p}.values()))
    assert store.fsck() == []


def test_repack_packs_the_tails_too_short_for_the_writers(store: Store, engine: Engine) -> None:
    packing(store, engine)
    writer = engine.open()
    try:
        short = append(writer, "short", PACK_MIN - 1, start=7000)
        long = append(writer, "long", PACK_AT + 5)
        writer.fork("side", long[PACK_AT + 1].id)
        side = long[: PACK_AT + 2] + append(writer, "side", 2, start=500)
    finally:
        writer.close()
    before = counts(store)
    assert before.loose_nodes > 0  # tails shorter than PACK_MIN stay loose when a writer closes
    heard: list[tuple[int, int]] = []
    after = packing(store, engine).repack(lambda done, total: heard.append((done, total)))
    assert after == counts(store)
    assert after.loose_nodes == 0 and after.packs > before.packs
    assert after.packed_nodes == len(short) + len(long) + 2
    # (What it counts is the engine's: nodes, refs...; it goes forward and ends done.)
    assert heard and heard[-1][0] == heard[-1][1] > 0
    assert [d for d, _ in heard] == sorted(d for d, _ in heard)
    for path in (short, long, side):
        reads_back(store.backend, path)
    assert packing(store, engine).repack() == after
    assert store.fsck() == []


def test_gc_after_a_rewind_drops_the_rewound_events_from_the_packs(
    store: Store, engine: Engine
) -> None:
    packing(store, engine)
    path = append(store, "q", PACK_AT + PACK_MIN)
    packing(store, engine).repack()
    packed = counts(store)
    assert packed.loose_nodes == 0
    keep = PACK_AT // 2
    store.session("q").rewind(len(path) - keep)
    assert store.expire_reflog("q") > 0
    result = store.gc()
    assert result.removed == len(path) - keep
    for node in path[keep:]:
        assert store.backend.get(node.id) is None
        assert store.backend.has([node.id]) == set()
    reads_back(store.backend, path[:keep])
    every_node(store.backend, path[:keep])
    left = counts(store)
    # What went is gone from the packs too: they hold only the kept events.
    assert left.packed_nodes + left.loose_nodes == keep
    assert left.raw_bytes < packed.raw_bytes
    assert store.fsck() == []
    # And the rest of the session grows and packs again from there.
    more = append(store, "q", PACK_AT, start=keep)
    reads_back(store.backend, path[:keep] + more)
    assert store.fsck() == []


def test_a_payload_kept_apart_from_its_pack_reads_back_and_is_stored_once(
    store: Store, engine: Engine
) -> None:
    packing(store, engine)
    big = {"role": "tool", "tool_call_id": "c1", "content": os.urandom(INLINE_MAX).hex()}
    a = append(store, "a", 40)
    a.append(store.session("a").add_message(big))
    a += append(store, "a", PACK_AT, start=41)
    store.fork("b", a[10].id)
    b = [*a[:11], store.session("b").add_message(big), *append(store, "b", PACK_MIN, start=900)]
    packing(store, engine).repack()
    assert counts(store).loose_nodes == 0
    for path in (a, b):
        reads_back(store.backend, path)
    assert store.messages("a")[40] == big == store.messages("b")[11]
    if engine.measures_size:
        # Stored once: a third session holding it costs far less than the payload's size.
        before = store.stats().physical_bytes
        store.fork("c", a[-1].id)
        c = store.session("c")
        c.add_message(big)
        append(store, "c", PACK_MIN, start=5000)
        packing(store, engine).repack()
        assert store.stats().physical_bytes - before < len(big["content"]) / 4
        assert store.messages("c")[-PACK_MIN - 1] == big
    assert store.fsck() == []


def test_a_flipped_byte_in_a_pack_is_an_error_naming_the_pack(
    store: Store, engine: Engine
) -> None:
    packing(store, engine)
    if engine.damage_pack is None:
        pytest.skip(f"the {engine.name} engine's tests give no Engine.damage_pack")
    path = append(store, "q", PACK_AT + 3)
    packing(store, engine).repack()
    engine.damage_pack(store)
    reads: list[Callable[[], object]] = [lambda: store.backend.chain(path[-1].id),
                                         lambda: store.backend.get(path[0].id),
                                         lambda: list(store.backend.iter_nodes())]
    for read in reads:
        with pytest.raises(StoreCorruptError, match="pack"):
            read()
    fresh = engine.open()
    try:
        with pytest.raises(StoreCorruptError, match="pack"):
            fresh.messages("q")
        faults = fresh.fsck()
        assert any("pack" in f for f in faults), faults
    finally:
        fresh.close()
