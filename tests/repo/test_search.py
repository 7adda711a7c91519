"""Store.search on the memory and SQLite engines: one hit per distinct node with the sessions
that reach it, rewound-away nodes only with everything=True, gc, REV scopes, paging, hostile
patterns, and results equal to a brute-force scan of a generated corpus (hypothesis)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_server import with_schema

from sesstree import SearchQueryError, Store, open_store
from sesstree.store.base import SearchQuery
from sesstree.store.memory import MemoryBackend
from sesstree.testing import assistant, user
from sesstree.testing.contract.search import HOSTILE, scan


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        s = open_store(request.getfixturevalue("postgres_url"))
    else:
        s = Store(MemoryBackend()) if request.param == "memory" else open_store(tmp_path / "s")
    try:
        yield s
    finally:
        s.close()


def test_a_message_shared_by_many_forks_is_one_hit_with_its_sessions(store: Store) -> None:
    q = store.session("q")
    shared = q.add_message(user("where did the agent decide to drop the cache")).id
    q.add_message(assistant("here"))
    for i in range(200 - 1):
        store.fork(f"f{i:03}", "q").add_message(user(f"fork {i}"))
    page = store.search("cache", shown=5)
    assert [h.id for h in page.hits] == [shared]
    hit = page.hits[0]
    assert hit.session_count == 200 and hit.complete
    assert len(hit.sessions) == 5
    # The most recently moved first; each place counts back from that session's head.
    assert hit.sessions[0].name == "f198" and hit.sessions[0].back == 2
    assert (hit.before, hit.match, hit.after) == ("where did the agent decide to drop the ", "cache", "")
    assert (hit.role, hit.type) == ("user", "user/message")


def test_rewound_away_nodes_are_found_only_with_everything(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("kept needle"))
    gone = q.add_message(user("rewound needle")).id
    q.rewind(1)
    assert [h.match for h in store.search("needle").hits] == ["needle"]
    hits = store.search("needle", everything=True).hits
    assert hits[0].id == gone and hits[0].sessions == [] and hits[0].session_count == 0
    # A gc removes it (once the reflog lets it go): no hit even with everything.
    store.expire_reflog("q")
    store.gc()
    assert gone not in {h.id for h in store.search("needle", everything=True).hits}
    assert store.fsck() == []


def test_revisions_scope_the_search_to_their_paths(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("alpha in q"))
    store.fork("w", "q").add_message(user("alpha in w"))
    q.add_message(user("alpha again in q"))
    hits = store.search("alpha", revs=["w"]).hits
    assert [h.match for h in hits] == ["alpha", "alpha"]
    assert [(p.name, p.back) for h in hits for p in h.sessions] == [("w", 0), ("w", 1)]
    both = store.search("alpha", revs=["q", "w"]).hits
    assert len(both) == 3
    assert [p.name for p in both[-1].sessions] == ["q", "w"]  # shared: both places


def test_pages_go_on_where_the_last_stopped(store: Store) -> None:
    q = store.session("q")
    for i in range(25):
        q.add_message(user(f"page {i}"))
    seen = []
    cursor = None
    while True:
        page = store.search("page", limit=10, cursor=cursor)
        seen += [h.after for h in page.hits]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [f" {i}" for i in reversed(range(25))]
    with pytest.raises(SearchQueryError):
        store.search("page", cursor="bogus")


def test_hostile_patterns_are_one_clear_error_or_a_literal_match(store: Store) -> None:
    q = store.session("q")
    for pattern in HOSTILE:
        q.add_message(user(f"x {pattern} y"))
    for pattern in [*HOSTILE, "", "z" * 5000]:
        for mode in ("words", "phrase", "substring"):
            try:
                store.search(pattern, mode=mode)  # type: ignore[arg-type]
            except SearchQueryError as e:
                assert str(e) and "\n" not in str(e)


_ALPHABET = st.sampled_from([*"abcAB_é ß-.,'\"*()東京🔥\n", "cache", "Cache", "drop", " the "])
_TEXT = st.lists(_ALPHABET, min_size=0, max_size=12).map("".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(_TEXT, min_size=1, max_size=12), pattern=_TEXT,
       mode=st.sampled_from(["words", "phrase", "substring"]), ignore_case=st.booleans())
def test_search_equals_a_brute_force_scan(tmp_path_factory: pytest.TempPathFactory, texts: list[str],
                                          pattern: str, mode: str, ignore_case: bool) -> None:
    query = SearchQuery(pattern, mode, ignore_case)  # type: ignore[arg-type]
    for engine in ("memory", "sqlite"):
        s = (Store(MemoryBackend()) if engine == "memory"
             else open_store(tmp_path_factory.mktemp("s") / "s"))
        try:
            for i, text in enumerate(texts):
                s.session(f"s{i % 3}").add_message(user(text) if i % 2 else assistant(text))
            try:
                page = s.search(pattern, mode=mode, ignore_case=ignore_case,  # type: ignore[arg-type]
                                everything=True, limit=1000)
            except SearchQueryError:
                continue
            assert {h.id for h in page.hits} == scan(s, query), (engine, texts, pattern)
        finally:
            s.close()


# A forest grown by steps: append a message to a session, fork one from another's past,
# rewind one, delete one, or store a chain nothing names (an aborted import).
_STEP = st.tuples(st.sampled_from(["add", "add", "add", "fork", "rewind", "delete", "loose"]),
                  st.integers(0, 4), st.integers(0, 5), st.sampled_from(["drop cache", "cache",
                                                                         "the drop", "other"]))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], Store]]:
    """A maker of empty stores of one engine, one per hypothesis example."""
    if request.param == "memory":
        yield lambda: Store(MemoryBackend())
        return
    if request.param == "sqlite":
        yield lambda: open_store(tmp_path_factory.mktemp("s") / "s")
        return
    server = request.getfixturevalue("postgres_server")
    schemas: list[str] = []

    def fresh() -> Store:
        schemas.append("t_" + uuid.uuid4().hex[:16])
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schemas[-1]}")  # type: ignore[arg-type]
        return open_store(with_schema(server, schemas[-1]))
    yield fresh
    with psycopg.connect(server, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, min_size=1, max_size=40), page=st.integers(1, 4),
       mode=st.sampled_from(["words", "substring"]))
def test_pages_hold_every_hit_a_session_reaches_once_with_its_sessions(
        new_store: Callable[[], Store], steps: list[tuple[str, int, int, str]],
        page: int, mode: str) -> None:
    # Hits above every session's head, below it, in what was rewound away or deleted, or in
    # a chain nothing names: every page together is exactly the hits some session reaches.
    from sesstree.node import make_node
    s = new_store()
    try:
        loose_parent = None
        for i, (op, a, b, text) in enumerate(steps):
            name, other = f"s{a}", f"s{(a + b) % 5}"
            if op == "add":
                s.session(name).add_message(user(f"{text} {i}"))
            elif op == "fork" and s.has_session(other) and not s.has_session(name):
                s.fork(name, f"{other}~{b % max(1, len(s.session(other)))}")
            elif op == "rewind" and s.has_session(name) and len(s.session(name)) > b:
                s.session(name).rewind(b)
            elif op == "delete" and s.has_session(name):
                s.delete_session(name)
            elif op == "loose":
                node = make_node(loose_parent, "user/message",
                                 {"role": "user", "content": f"{text} {i}"})
                s.write([node])
                loose_parent = node.id
        query = SearchQuery("cache", mode)  # type: ignore[arg-type]
        holders: dict[str, set[str]] = {}
        for info in s.sessions():
            for nid in s.chain(info.head).ids:
                holders.setdefault(nid, set()).add(info.name)
        want = {nid for nid in scan(s, query) if nid in holders}
        got: list[str] = []
        cursor = None
        for _ in range(100):
            result = s.search("cache", mode=mode, limit=page, cursor=cursor,  # type: ignore[arg-type]
                              shown=10)
            for h in result.hits:
                got.append(h.id)
                assert h.session_count == len(holders[h.id]) and h.complete
                assert {p.name for p in h.sessions} == holders[h.id]
            cursor = result.cursor
            if cursor is None:
                break
        assert len(got) == len(set(got)) and set(got) == want, steps
    finally:
        s.close()
