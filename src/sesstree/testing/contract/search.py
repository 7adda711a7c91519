"""The engine contract, the text index: one entry per distinct node, in step with every
write, equal to a brute-force scan, and safe against any pattern.

An engine with a :class:`~sesstree.store.base.TextIndex` (``search_nodes``) passes these; one
without skips them. What every test compares against is :func:`scan`: every stored node's
:func:`~sesstree.store.textmatch.node_text` tried with
:func:`~sesstree.store.textmatch.matches` and the query's filters, the definition of what a
search finds. The damage test needs ``Engine.damage_index``.
"""

from __future__ import annotations

import random
import time
from typing import Any

import msgspec
import pytest

from ...errors import SearchQueryError
from ...node import NodeId
from ...repo.store import Store
from ...store.base import IndexHit, SearchMode, SearchQuery, TextIndex
from ...store.textmatch import MAX_PATTERN, matches, node_role, node_text
from .. import Engine, assistant, user
from .objects import raw

__all__ = [
    "HOSTILE",
    "scan",
    "test_a_node_shared_by_many_sessions_is_one_entry",
    "test_a_rolled_back_batch_leaves_no_entry",
    "test_another_handles_writes_are_found",
    "test_damaged_or_missing_entries_are_found_and_rebuilt",
    "test_filters_and_pages",
    "test_gc_removes_the_entries_of_what_it_removes",
    "test_hostile_patterns_are_refused_or_matched_literally",
    "test_results_equal_a_scan_on_a_generated_corpus",
    "test_what_is_indexed_is_what_a_person_reads",
]

_decode = msgspec.msgpack.Decoder().decode
_MODES: tuple[SearchMode, ...] = ("words", "phrase", "substring")

#: Patterns that break a query language pasted together from user input: FTS5's and
#: tsquery's syntax, quotes, LIKE's wildcards, SQL, control and odd characters.
HOSTILE = [
    '"', "'", '""', 'a"b', "a'b", "*", "a*", "^a", "NEAR(a b)", "a OR b", "a AND NOT b", "-a",
    "col:a", "a:b", "(", ")", "{a b}", "a + b", "%", "_", "a%b", "\\", "\\x00", "\x00",
    "\u200b", "; DROP TABLE nodes; --", "a & b", "a | b", "!a", "<->", "a:*", "é", "ß", "İ",
    "🔥", "\n", " ", "  a  ", "a\tb", "\ufffd", "\U0010ffff",
]


def _index(store: Store) -> TextIndex:
    backend = store.backend
    if not callable(getattr(backend, "search_nodes", None)):
        pytest.skip("the engine keeps no text index")
    return backend  # type: ignore[return-value]


def scan(store: Store, query: SearchQuery) -> set[NodeId]:
    """The ids a search for ``query`` must find: every stored node tried, one by one."""
    found: set[NodeId] = set()
    nodes = list(store.backend.iter_nodes())
    times = store.backend.recorded([n.id for n in nodes])
    for n in nodes:
        data = _decode(n.encoded)
        if query.roles and node_role(n.type, data) not in query.roles:
            continue
        if query.types and n.type not in query.types:
            continue
        when = times.get(n.id)
        if query.since is not None or query.until is not None:
            if when is None or (query.since is not None and when < query.since) or (
                    query.until is not None and when > query.until):
                continue
        if matches(query, node_text(n.type, data)):
            found.add(n.id)
    return found


def _all_hits(index: TextIndex, query: SearchQuery, page: int = 7) -> list[IndexHit]:
    """Every hit, read page by page."""
    hits: list[IndexHit] = []
    before: int | None = None
    while True:
        got = index.search_nodes(query, page, before)
        hits += got
        if len(got) < page:
            return hits
        before = got[-1].key


def _same_as_scan(store: Store, query: SearchQuery) -> list[IndexHit]:
    hits = _all_hits(_index(store), query)
    assert {h.id for h in hits} == scan(store, query), query
    assert len({h.id for h in hits}) == len(hits), "a node found twice"
    keys = [h.key for h in hits]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)
    return hits


def test_a_node_shared_by_many_sessions_is_one_entry(store: Store) -> None:
    index = _index(store)
    q = store.session("q")
    shared = q.add_message(user("where did the agent decide to drop the cache")).id
    q.add_message(assistant("it did"))
    for i in range(20):
        store.fork(f"f{i}", "q~1").add_message(user(f"fork {i}"))
    hits = index.search_nodes(SearchQuery("cache"), 50)
    assert [h.id for h in hits] == [shared]
    assert index.index_counts().entries == store.backend.count_nodes()


def test_what_is_indexed_is_what_a_person_reads(store: Store) -> None:
    index = _index(store)
    q = store.session("q")
    q.add_message({"role": "user", "content": [
        {"type": "text", "text": "look at ECONNRESET"},
        {"type": "image_url", "image_url": {"url": "https://img.example/zebra.png"}}]})
    call = q.add_message(assistant(None, tool_calls=[{
        "id": "call_xylophone", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "cache_control.py"}'}}])).id
    result = q.add_message({"role": "tool", "tool_call_id": "call_xylophone",
                            "content": "def cache_control(): pass"}).id
    err = q.append("error", {"kind": "loop", "type": "Boom", "message": "quota exhausted"}).id
    summary = q.append("compaction/marker", {"summary": "we dropped the cache"}).id
    def ids(pattern: str, mode: SearchMode = "words") -> set[NodeId]:
        return {h.id for h in index.search_nodes(SearchQuery(pattern, mode), 50)}
    assert ids("read_file") == {call}
    assert ids("cache_control") == {call, result}
    assert ids("ECONNRESET") != set()
    assert ids("quota exhausted", "phrase") == {err}
    assert ids("dropped") == {summary}
    # Ids and bookkeeping are not text: a tool call's id, an image's URL, a node id.
    assert ids("xylophone", "substring") == set()
    assert ids("zebra", "substring") == set()
    assert ids(call[:16], "substring") == set()
    hit = index.search_nodes(SearchQuery("read_file"), 1)[0]
    assert (hit.type, hit.role) == ("assistant/message", "assistant")
    got = store.backend.get(call)
    assert got is not None and hit.depth == got.depth
    assert hit.time == store.backend.recorded([call])[call]


_VOCAB = ("cache caché Cache CACHE cache_control ECONNRESET econnreset drop dropped the a of "
          "agent Straße strasse naïve naive résumé resume über Über 東京 日本語 🔥 x y z "
          "foo.py foo_bar foo-bar 42 4.2 ").split()
_PUNCT = [" ", " ", " ", ", ", ". ", "\n", "-", "_", "/", ": ", "(", ")", '"', "'"]


def _corpus(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(_VOCAB) + rng.choice(_PUNCT) for _ in range(rng.randint(1, 12)))
            for _ in range(n)]


def test_results_equal_a_scan_on_a_generated_corpus(store: Store) -> None:
    rng = random.Random(25)
    texts = _corpus(rng, 120)
    for i, text in enumerate(texts):
        name = f"s{i % 7}"
        s = store.session(name)
        kind = i % 4
        if kind == 0:
            s.add_message(user(text))
        elif kind == 1:
            s.add_message(assistant(text))
        elif kind == 2:
            s.add_message(assistant(None, tool_calls=[{"id": f"c{i}", "type": "function",
                                                       "function": {"name": "grep", "arguments": text}}]))
        else:
            s.add_message({"role": "tool", "tool_call_id": f"c{i}", "content": text})
    patterns = ([*_VOCAB, "cache drop", "the cache", "drop the", "Cache control", "cache_", "ach",
                 "e d", "naïve résumé", "東京", "京", "o.p", "4.", "🔥", "zz", "cache cache"]
                + [rng.choice(texts)[a:a + rng.randint(1, 12)] for a in range(0, 40, 3)])
    for pattern in patterns:
        for mode in _MODES:
            for ignore_case in (False, True):
                query = SearchQuery(pattern, mode, ignore_case)
                try:
                    _same_as_scan(store, query)
                except SearchQueryError:
                    assert mode != "substring" or not pattern, query


def test_filters_and_pages(store: Store) -> None:
    index = _index(store)
    q = store.session("q")
    q.add_message(user("needle one"))
    q.add_message(assistant("needle two"))
    time.sleep(0.02)
    middle = time.time()
    time.sleep(0.02)
    q.add_message({"role": "tool", "tool_call_id": "c", "content": "needle three"})
    q.append("error", {"message": "needle four"})
    everything = _same_as_scan(store, SearchQuery("needle"))
    assert [h.role for h in everything] == ["error", "tool", "assistant", "user"]
    assert [h.type for h in _same_as_scan(store, SearchQuery("needle", roles=("user", "tool")))] == [
        "tool/result", "user/message"]
    assert [h.role for h in _same_as_scan(store, SearchQuery("needle", types=("error",)))] == ["error"]
    assert len(_same_as_scan(store, SearchQuery("needle", since=middle))) == 2
    assert len(_same_as_scan(store, SearchQuery("needle", until=middle))) == 2
    # Pages: each below the previous page's last key, none repeated, none skipped.
    first = index.search_nodes(SearchQuery("needle"), 3)
    rest = index.search_nodes(SearchQuery("needle"), 3, first[-1].key)
    assert first + rest == everything
    assert index.search_nodes(SearchQuery("needle"), 3, rest[-1].key) == []


def test_another_handles_writes_are_found(store: Store, engine: Engine) -> None:
    index = _index(store)
    assert index.search_nodes(SearchQuery("elsewhere"), 5) == []  # (the index is read once)
    other = engine.open()
    try:
        written = other.session("w").add_message(user("written elsewhere")).id
        # A node arriving as a pull or an import does: stored alone, no ref moved.
        loose = raw(None, "user/message", user("arrived elsewhere"))
        other.backend.commit([loose], [])
    finally:
        other.close()
    assert {h.id for h in index.search_nodes(SearchQuery("elsewhere"), 5)} == {written, loose.id}


def test_a_rolled_back_batch_leaves_no_entry(store: Store) -> None:
    index = _index(store)
    store.session("q").add_message(user("kept"))
    with pytest.raises(RuntimeError), store.batch():
        store.session("q").add_message(user("rolled back"))
        raise RuntimeError("abandon the batch")
    assert index.search_nodes(SearchQuery("rolled"), 5) == []
    assert index.index_faults() == []
    assert len(index.search_nodes(SearchQuery("kept"), 5)) == 1


def test_gc_removes_the_entries_of_what_it_removes(store: Store) -> None:
    index = _index(store)
    q = store.session("q")
    q.add_message(user("stays"))
    gone = q.add_message(user("rewound away")).id
    q.rewind(1)
    # Rewound away but kept by the reflog: still stored, still found.
    assert [h.id for h in index.search_nodes(SearchQuery("rewound"), 5)] == [gone]
    store.expire_reflog("q")
    assert store.gc().removed == 1
    assert index.search_nodes(SearchQuery("rewound"), 5) == []
    assert index.index_faults() == []
    assert index.index_counts().entries == store.backend.count_nodes()


def test_damaged_or_missing_entries_are_found_and_rebuilt(store: Store, engine: Engine) -> None:
    index = _index(store)
    if engine.damage_index is None:
        pytest.skip("the engine gave no way to damage its index")
    q = store.session("q")
    one = q.add_message(user("alpha bravo")).id
    two = q.add_message(user("charlie delta")).id
    q.add_message(user("echo"))
    assert index.index_faults() == []
    engine.damage_index(store, one, True)  # the entry is gone
    engine.damage_index(store, two, False)  # the entry holds other text
    faults = index.index_faults()
    assert any(one[:12] in f for f in faults) and any(two[:12] in f for f in faults), faults
    assert store.fsck() != []  # fsck reports it
    counts = index.rebuild_index()
    assert counts.entries == store.backend.count_nodes()
    assert index.index_faults() == []
    assert [h.id for h in index.search_nodes(SearchQuery("alpha"), 5)] == [one]
    assert [h.id for h in index.search_nodes(SearchQuery("charlie"), 5)] == [two]


def test_hostile_patterns_are_refused_or_matched_literally(store: Store) -> None:
    q = store.session("q")
    for i, pattern in enumerate(HOSTILE):
        q.add_message(user(f"message {i}: {pattern} end"))
    q.add_message(user("a OR b, NEAR(a b), col:a and \"quoted\" text"))
    for pattern in [*HOSTILE, "", "x" * (MAX_PATTERN + 1), "word " * 40]:
        for mode in _MODES:
            for ignore_case in (False, True):
                query = SearchQuery(pattern, mode, ignore_case)
                try:
                    hits = _same_as_scan(store, query)
                except SearchQueryError as e:
                    assert str(e)  # one clear message
                    continue
                if mode == "substring" and pattern in HOSTILE and not ignore_case:
                    assert hits, f"{pattern!r} is stored literally"
    # Filters are values, never syntax.
    odd: dict[str, Any] = {"roles": ("user' OR 1=1 --",), "types": ('"',)}
    assert _same_as_scan(store, SearchQuery("message", **odd)) == []
