"""Where a session forked, as its page says: from which session, at which node."""

from __future__ import annotations

from pathlib import Path

from sesstree import Store, open_store
from sesstree.web.views import Views


def _agent_turn(store: Store, name: str, prompt: str) -> None:
    s = store.session(name)
    s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": prompt})
    s.append("step/start", {"step": 1})
    s.add_message({"role": "assistant", "content": f"about {prompt}"})
    s.append("turn/end", {"reason": {"kind": "answer"}, "steps": 1})


def test_a_branch_names_its_source_and_the_node_they_part_at(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        _agent_turn(store, "quest-1", "find the key")
        end = store.session_head("quest-1")
        _agent_turn(store, "quest-1", "go in")
        store.fork("quest-2", "quest-1~5")  # the end of the first turn
        _agent_turn(store, "quest-2", "ask the mayor")
        _agent_turn(store, "chat", "hello")  # shares only the turn/start with both
        views = Views(store)
        page = views.session("quest-2", None, 200)
        assert page["fork"] == {"session": "quest-1", "id": end, "depth": 5, "exists": True}
        assert page["fork_at"] == end  # the mark follows the turn's end
        assert views.session("quest-1", None, 200)["fork"] is None  # the older one
        assert views.session("chat", None, 200)["fork"] is None  # unrelated
        # A page that starts after the fork point has the mark at its top; one that ends
        # before it has none.
        assert views.session("quest-2", None, 3)["fork_at"] == ""
        assert views.session("quest-2", "quest-2~7", 200)["fork_at"] is None
        store.delete_session("quest-1")
        gone = views.session("quest-2", None, 200)
        assert gone["fork"] == {"session": "quest-1", "id": end, "depth": 5, "exists": False}


def test_a_session_not_made_by_branch_is_matched_with_the_one_before_it(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        _agent_turn(store, "base", "find the key")
        end = store.session_head("base")
        assert end is not None
        # Written as the proxy writes a fork: a new session that re-sends base's history.
        _agent_turn(store, "base-fork-1", "find the key")
        _agent_turn(store, "base-fork-1", "look under the mat")
        _agent_turn(store, "base", "go in")
        views = Views(store)
        assert views.session("base-fork-1", None, 200)["fork"] == {
            "session": "base", "id": end, "depth": 5, "exists": True}
        assert views.session("base", None, 200)["fork"] is None
