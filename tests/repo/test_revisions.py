"""Revisions that count what a reader sees: ``~Nm`` messages and ``~Nt`` turns back, beside the
event steps ``~N`` and ``^`` that count every event, the loop's records included."""

from __future__ import annotations

import pytest
from cli_kit import Sess
from core_testkit import agent_turn

from sesstree import Store
from sesstree.errors import UnknownRevisionError


@pytest.fixture
def chat(store: Store) -> Store:
    for i in (1, 2, 3):
        agent_turn(store, "chat", f"q{i}", f"a{i}")
    return store


def content(store: Store, rev: str) -> object:
    node = store.show(rev)
    return node.data.get("content") if isinstance(node.data, dict) else node.type


def test_messages_back_land_on_messages(chat: Store) -> None:
    assert [content(chat, f"chat~{n}m") for n in range(6)] == ["a3", "q3", "a2", "q2", "a1", "q1"]
    assert content(chat, "chat~m") == "q3"  # like ~, the count defaults to 1
    # From inside a turn, the newest message at or before it is where counting starts.
    assert content(chat, "chat~3~1m") == "q3"
    assert content(chat, "chat~2m~2m") == "a1"


def test_turns_back_land_where_a_turn_ended(chat: Store) -> None:
    ends = [n.id for n in chat.log("chat") if n.type == "turn/end"]  # newest first
    assert chat.resolve("chat~1t") == ends[1]
    assert chat.resolve("chat~2t") == ends[2]
    assert chat.resolve("chat~t") == ends[1]
    # Mid-turn (two events into the last turn's records), a turn back is still the turn before.
    assert chat.resolve("chat~2~1t") == ends[1]
    assert chat.resolve("chat~2t^") == chat.resolve("chat~2t~1")
    assert content(chat, "chat~1t~1m") == "q2"


def test_steps_past_the_start_are_one_clear_error(chat: Store) -> None:
    with pytest.raises(UnknownRevisionError, match=r"chat~3t: .*first turn.*at most 2"):
        chat.resolve("chat~3t")
    with pytest.raises(UnknownRevisionError, match=r"chat~4t: only 3 turns.*back 4"):
        chat.resolve("chat~4t")
    with pytest.raises(UnknownRevisionError, match=r"chat~6m: only 6 messages.*at most 5"):
        chat.resolve("chat~6m")


def test_a_system_prompt_before_the_first_turn_is_where_it_ends(store: Store) -> None:
    store.session("s").add_message({"role": "system", "content": "Be terse."})
    agent_turn(store, "s", "q", "a")
    assert content(store, "s~1t") == "Be terse."
    assert content(store, "s~2m") == "Be terse."


def test_steps_apply_left_to_right_and_event_runs_add_up() -> None:
    from sesstree.repo.revisions import parse_steps

    assert parse_steps("quest-1@{2}~2t^^~3") == ("quest-1@{2}", [(2, "t"), (5, "")])
    assert parse_steps("4f1c9a~3m~t") == ("4f1c9a", [(3, "m"), (1, "t")])
    assert parse_steps("quest-1") == ("quest-1", [])
    # A base is never empty, and an id prefix ending in hex stays an id prefix.
    assert parse_steps("~2t") == ("~2t", [])
    assert parse_steps("beef") == ("beef", [])


def test_cli_log_from_a_turn_or_message_back(sess: Sess) -> None:
    with sess.store() as store:
        for i in (1, 2):
            agent_turn(store, "chat", f"question {i}", f"answer {i}")
    sess.ok("checkout", "chat")
    # One event back is still inside the last turn's records; a message back is the prompt.
    top = sess.lines("log", "-n1", "--oneline", "chat~1m")
    assert len(top) == 1 and "question 2" in top[0]
    top = sess.lines("log", "-n1", "--oneline", "chat~2m")
    assert "answer 1" in top[0]
    turn = sess.lines("log", "--oneline", "chat~1t")
    assert not any("question 2" in line for line in turn)
    assert any("answer 1" in line for line in turn)
    shown = sess.json("show", "chat~1t")
    assert shown["type"] == "turn/end"
    assert "only 2 turns" in sess.fail("show", "chat~3t")
