"""The forest's layout on random trees: lines join up from row to row, parents come after
children, every session's head is drawn once, and only the page's paths are read."""

from __future__ import annotations

import random

import pytest

from sesstree import Store, open_store
from sesstree.web.catalog import Filter
from sesstree.web.views import Views


def _random_forest(store: Store, seed: int, sessions: int, *, turns: bool = False) -> None:
    rng = random.Random(seed)
    for i in range(sessions):
        names = [s.name for s in store.sessions()]
        if names and rng.random() < 0.8:
            source = rng.choice(names)
            back = rng.randrange(store.depth(source))
            s = store.fork(f"s{i}", f"{source}~{back}")
        else:
            s = store.session(f"s{i}")
            if turns and rng.random() < 0.5:
                s.add_message({"role": "system", "content": "Be terse."})
        for j in range(rng.randrange(0 if s.head else 1, 4)):
            if turns:  # agent turns: each opens with the same turn/start and step/start
                s.append("turn/start", {"trigger": {"kind": "user"}})
                if rng.random() < 0.7:
                    s.add_message({"role": "user", "content": f"{i}.{j}"})
                s.append("step/start", {"step": 1})
                s.add_message({"role": "assistant", "content": f"a{i}.{j}"})
                s.append("turn/end", {"reason": {"kind": "answer"}})
            else:
                s.add_message({"role": "user", "content": f"{i}.{j}"})


@pytest.mark.parametrize("turns", [False, True], ids=["messages", "agent-turns"])
@pytest.mark.parametrize("seed", range(12))
def test_lines_join_from_row_to_row(seed: int, turns: bool) -> None:
    with open_store(":memory:") as store:
        _random_forest(store, seed, 14, turns=turns)
        views = Views(store)
        data = views.forest(Filter(), 0, 40)
        rows = data["rows"]
        drawn = [(r["id"], r["copy"]) for r in rows]
        assert len(set(drawn)) == len(rows)
        heads = sorted(s for r in rows for s in r["sessions"])
        assert heads == sorted(s.name for s in store.sessions())
        bottom: set[int] = set()
        for i, r in enumerate(rows):
            top = {s["x1"] for s in r["segments"] if s["y1"] == 0}
            assert top == bottom, f"row {i}: lines from above {top}, below {bottom}"
            assert r["separate"] == (not top and r is not rows[0])
            bottom = {s["x2"] for s in r["segments"] if s["y2"] == 2}
            into_node = {s["x2"] for s in r["segments"] if s["y2"] == 1}
            assert into_node <= {r["lane"]}
            # Sessions never meet at an opener or a system prompt (see sesstree.repo.related).
            assert not (r["fork"] and r["type"] in ("turn/start", "step/start",
                                                    "system/message"))
            if r["parent"] is None:
                assert r["lane"] not in {s["x1"] for s in r["segments"] if s["y1"] == 1}
            else:
                below = [j for j in range(i + 1, len(rows)) if rows[j]["id"] == r["parent"]]
                assert below, f"row {i}: its parent is drawn below it"
                assert {"x1": r["lane"], "y1": 1, "x2": r["lane"], "y2": 2} in r["segments"]
                parent_depth = rows[below[0]]["depth"]
                assert r["hidden"] == r["depth"] - parent_depth - 1
            assert max([r["lane"], *(max(s["x1"], s["x2"]) for s in r["segments"])]) < data["lanes"]
        assert bottom == set(), "every line ends at a root"


def _agent_turn(store: Store, name: str, prompt: str) -> None:
    s = store.session(name)
    s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": prompt})
    s.append("step/start", {"step": 1})
    s.add_message({"role": "assistant", "content": f"about {prompt}"})
    s.append("step/end", {"step": 1, "finish_reason": "stop"})
    s.append("turn/end", {"reason": {"kind": "answer"}, "steps": 1})


def test_sessions_meet_only_where_they_share_history_a_reader_knows() -> None:
    with open_store(":memory:") as store:
        _agent_turn(store, "chat", "hello")
        _agent_turn(store, "weather", "will it rain?")
        _agent_turn(store, "quest-1", "find the key")
        end = store.session_head("quest-1")
        _agent_turn(store, "quest-1", "go in")
        store.fork("quest-2", end)
        _agent_turn(store, "quest-2", "ask the mayor")
        rows = Views(store).forest(Filter(), 0, 40)["rows"]
        root = store.chain("chat").ids[0]
        assert root == store.chain("weather").ids[0] == store.chain("quest-1").ids[0]
        # Three trees, each with its own drawing of the turn/start they all begin with.
        roots = [r for r in rows if r["root"]]
        assert [r["id"] for r in roots] == [root] * 3
        assert sorted(r["copy"] for r in roots) == [0, 1, 2]
        assert sum(r["separate"] for r in rows) == 2
        assert not any(r["fork"] and r["root"] for r in rows)
        # The quest parts at the end of its first turn, not at the next turn's turn/start.
        forks = [r for r in rows if r["fork"]]
        assert [r["id"] for r in forks] == [end]
        by_head = {r["sessions"][0]: r for r in rows if r["sessions"]}
        assert by_head["quest-1"]["parent"] == by_head["quest-2"]["parent"] == end
        assert by_head["quest-2"]["hidden"] == 5  # its own copy of the turn/start among them


def test_a_session_whose_head_is_on_another_trunk_is_drawn_on_it() -> None:
    with open_store(":memory:") as store:
        _agent_turn(store, "quest-1", "find the key")
        _agent_turn(store, "quest-1", "go in")
        store.fork("earlier", "quest-1~3")  # a step/start inside the second turn
        store.fork("first", "quest-1~6")  # the end of the first turn
        rows = Views(store).forest(Filter(), 0, 40)["rows"]
        assert [(r["sessions"], r["lane"]) for r in rows] == [
            (["quest-1"], 0), (["earlier"], 0), (["first"], 0), ([], 0)]
        assert [r["parent"] for r in rows] == [
            store.resolve("quest-1~3"), store.resolve("quest-1~6"),
            store.chain("quest-1").ids[0], None]
        assert not any(r["fork"] or r["separate"] for r in rows)


def test_a_page_reads_only_its_own_sessions_paths() -> None:
    with open_store(":memory:") as store:
        base = store.session("base")
        for i in range(5):
            base.add_message({"role": "user", "content": str(i)})
        for i in range(100):
            store.fork(f"f{i:03d}", "base~2").add_message({"role": "user", "content": f"f{i}"})
        views = Views(store)
        data = views.forest(Filter(), 0, 10)
        # Not the last page: the total would need every session read, so it is not given.
        assert len(data["sessions"]) == 10 and data["total"] is None and data["more"]
        last = views.forest(Filter(), 100, 10)
        assert len(last["sessions"]) == 1 and last["total"] == 101 and not last["more"]
        views = Views(store)
        data = views.forest(Filter(), 0, 10)
        assert len(views.paths._paths) == 10
        # A session that grows is read from where it was: the cache keeps its earlier path.
        newest = data["sessions"][0]["name"]
        before = views.paths.path(store.session_head(newest), newest)  # type: ignore[arg-type]
        node = store.session(newest).add_message({"role": "assistant", "content": "more"})
        after = views.paths.path(node.id, newest)
        assert after[: len(before)] == before and len(after) == len(before) + 32
        # Only the fork point and the shared root are drawn besides the ten heads.
        assert len(data["rows"]) == 12


def test_a_node_page_checks_sessions_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.web import views as views_module

    with open_store(":memory:") as store:
        root = store.session("s0").add_message({"role": "user", "content": "root"})
        for i in range(1, 6):
            s = store.fork(f"s{i}", root.id)
            for j in range(30):
                s.add_message({"role": "user", "content": f"{i}.{j}"})
        views = Views(store)
        monkeypatch.setattr(views_module, "CONTAINS_READ", 50)
        first = views.node(root.id)
        # Two uncached paths of 31 events pass the budget of 50; the rest wait.
        assert first["sessions_checked"] == 2 and first["sessions_total"] == 6
        assert len(first["sessions"]) == 2 and len(first["children"]) == 2
        monkeypatch.setattr(views_module, "CONTAINS_READ", 10_000)
        full = views.node(root.id)
        assert full["sessions_checked"] == 6
        assert sorted(full["sessions"]) == [f"s{i}" for i in range(6)]
        assert len(full["children"]) == 5


def test_the_version_polled_changes_when_a_ref_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.web import views as views_module

    with open_store(":memory:") as store:
        store.session("a").add_message({"role": "user", "content": "1"})
        views = Views(store)
        first = views.version()
        store.session("a").add_message({"role": "user", "content": "2"})
        monkeypatch.setattr(views_module, "VERSION_MAX_AGE", 3600.0)
        assert views.version() == first  # one listing serves the polls of its age
        views.forget_version()
        second = views.version()
        assert second != first
        monkeypatch.setattr(views_module, "VERSION_MAX_AGE", 0.0)
        store.tag("t", "a")
        assert views.version() != second
