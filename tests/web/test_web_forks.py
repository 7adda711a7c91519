"""Where a session forked, as its page says: from which session, at which node."""

from __future__ import annotations

from pathlib import Path

import pytest

from sesstree import Store, open_store
from sesstree.node import NodeId
from sesstree.store.base import Chain
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
        # (5 events: quest-2's own turn, from its turn/start; a page begins at a turn's start)
        assert views.session("quest-2", None, 5)["fork_at"] == ""
        assert views.session("quest-2", "quest-2~7", 200)["fork_at"] is None
        store.delete_session("quest-1")
        gone = views.session("quest-2", None, 200)
        assert gone["fork"] == {"session": "quest-1", "id": end, "depth": 5, "exists": False}


def test_the_proxys_forks_name_the_session_they_left(tmp_path: Path) -> None:
    from sesstree.proxy import Exchange, Recorder, ReplyBuilder, parse_request
    from sesstree.proxy.protocols import CHAT

    def call(history: list[dict[str, str]], answer: str) -> Exchange:
        parsed = parse_request(CHAT, {"model": "m", "messages": history})
        assert parsed is not None
        reply = ReplyBuilder(CHAT)
        reply.feed_json({"model": "m", "choices": [
            {"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]})
        return Exchange(parsed, reply.result(), 200)

    with open_store(tmp_path / "s") as store:
        recorder = Recorder(store)
        first = [{"role": "user", "content": "q0"}]
        recorder.record(call(first, "a0"))
        recorder.record(call([*first, {"role": "assistant", "content": "a0"},
                              {"role": "user", "content": "q1"}], "a1"))
        # The client edits its history: the second question is asked differently.
        outcome = recorder.record(call([*first, {"role": "assistant", "content": "a0"},
                                        {"role": "user", "content": "q1, again"}], "b1"))
        forked = outcome.session
        names = {s.name for s in store.sessions()}
        assert len(names) == 2 and forked in names
        (source,) = names - {forked}
        page = Views(store).session(forked, None, 200)
        assert page["fork"] is not None and page["fork"]["session"] == source
        shared = store.diff(forked, source).base
        assert page["fork"]["id"] == shared
        assert shared is not None and store.show(shared + "~0m").data["content"] == "a0"


def test_a_session_created_otherwise_names_no_source(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        _agent_turn(store, "base", "find the key")
        _agent_turn(store, "copy", "find the key")  # the same history, written again
        _agent_turn(store, "copy", "look under the mat")
        store.tag("v1", "base")
        store.fork("from-tag", "v1")
        views = Views(store)
        assert views.session("copy", None, 200)["fork"] is None
        assert views.session("from-tag", None, 200)["fork"] is None


def test_a_branch_made_at_head_names_the_session_head_was_on(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        _agent_turn(store, "quest-1", "find the key")
        end = store.session_head("quest-1")
        _agent_turn(store, "quest-1", "go in")
        _agent_turn(store, "chat", "hello")
        store.checkout("quest-1")
        store.fork("quest-2")  # `sess branch quest-2`: from HEAD
        store.fork("quest-3", "HEAD~1t")
        store.fork("quest-4", "@~5")
        store.checkout("chat")  # HEAD moves on: the entries still name quest-1
        _agent_turn(store, "quest-2", "ask the mayor")
        _agent_turn(store, "quest-3", "ask the smith")
        _agent_turn(store, "quest-4", "ask the guard")
        assert store.reflog("quest-3")[0].reason == "branch: created from quest-1~1t"
        views = Views(store)
        for name in ("quest-2", "quest-3", "quest-4"):
            fork = views.session(name, None, 200)["fork"]
            assert fork is not None and fork["session"] == "quest-1", name
        assert views.session("quest-3", None, 200)["fork"]["id"] == end
        # Detached, HEAD names no session: the entry keeps HEAD and the page names none
        # (never the session HEAD is on when the page is read).
        store.checkout("quest-1~1t")
        store.fork("quest-5")
        store.fork("quest-6", "HEAD~1")
        store.checkout("quest-2")  # related to both, and not where they came from
        _agent_turn(store, "quest-5", "leave")
        _agent_turn(store, "quest-6", "stay")
        assert store.reflog("quest-5")[0].reason == "branch: created from HEAD"
        assert store.reflog("quest-6")[0].reason == "branch: created from HEAD~1"
        assert views.session("quest-5", None, 200)["fork"] is None
        assert views.session("quest-6", None, 200)["fork"] is None


def test_a_fork_right_after_the_system_prompt_is_marked_where_it_was_made(
        tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        for name in ("app-1", "app-2"):
            store.session(name).add_message({"role": "system", "content": "Be terse."})
        prompt = store.session_head("app-1")
        assert prompt is not None
        _agent_turn(store, "app-1", "find the key")
        store.fork("retry", "app-1~2m")  # the system prompt, before the first question
        _agent_turn(store, "retry", "find the door")
        _agent_turn(store, "app-2", "hello")  # the same prompt, another conversation
        # By the rule the two share nothing a reader knows, but the user forked there.
        assert store.diff("retry", "app-1").base is None
        views = Views(store)
        page = views.session("retry", None, 200)
        assert page["fork"] == {"session": "app-1", "id": prompt, "depth": 1, "exists": True}
        assert page["fork_at"] == prompt
        assert views.session("app-2", None, 200)["fork"] is None
        # The source reset to an unrelated history no longer holds the node: no mark.
        _agent_turn(store, "other", "no prompt")
        store.reset("app-1", "other")
        assert views.session("retry", None, 200)["fork"] is None


def test_the_fork_mark_reads_a_bounded_part_of_a_long_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.web import diffing, forks

    monkeypatch.setattr(diffing, "DIFF_READ", 50)
    monkeypatch.setattr(forks, "DIFF_READ", 50, raising=False)
    with open_store(tmp_path / "s") as store:
        for name in ("app", "gone"):
            store.session(name).add_message({"role": "system", "content": "Be terse."})
        store.fork("copy", "app")
        store.fork("left", "gone")
        store.delete_session("gone")
        _agent_turn(store, "app", "hello")
        for i in range(40):  # 200 events past the fork, more than the page reads
            _agent_turn(store, "copy", f"q{i}")
            _agent_turn(store, "left", f"r{i}")
        reads: list[int | None] = []
        chain = store.backend.chain

        def counted(head: NodeId, limit: int | None = None) -> Chain:
            reads.append(limit)
            return chain(head, limit)

        monkeypatch.setattr(store.backend, "chain", counted)
        views = Views(store)
        assert views.session("copy", None, 10)["fork"] is None  # too far back to look
        assert views.session("left", None, 10)["fork"] is None
        assert reads and all(n is not None and n <= 2 * 50 + 10 for n in reads), reads


def test_a_fork_of_a_session_handle_names_that_session(tmp_path: Path) -> None:
    # `quest.fork("quest-2")`, as the README and examples/quest.py fork: at the handle's head,
    # even after another handle moved the session on, and logged as forked from the session.
    with open_store(tmp_path / "s") as store:
        _agent_turn(store, "quest-1", "find the key")
        quest = store.session("quest-1")
        end = quest.head
        _agent_turn(store, "quest-1", "go in")  # through another handle: `quest` is behind
        west = quest.fork("quest-2")
        assert west.head == end
        assert store.reflog("quest-2")[0].reason == "branch: created from quest-1"
        _agent_turn(store, "quest-2", "ask the mayor")
        fork = Views(store).session("quest-2", None, 200)["fork"]
        assert fork is not None and (fork["session"], fork["id"]) == ("quest-1", end)
