"""Commands called the wrong way, and edge cases every reading command shares: a usage error
(missing or contradictory arguments) is one line and exit 2 wherever it is found, and the
reading commands agree with each other (`show`, `diff` of one node, `log A..B`)."""

from __future__ import annotations

import json

import pytest
from cli_kit import Sess, user_error
from test_conversation_view import TURN


@pytest.mark.parametrize("args", [
    ("reset",),
    ("checkout",),
    ("branch", "-d"),
    ("branch", "-m", "main"),
    ("branch", "a", "b", "c"),
    ("tag", "-d"),
    ("append", "a", "b", "c", "d"),
    ("reflog", "--expire"),
    ("log", "--json", "--oneline"),
    ("log", "--graph", "--json"),
    ("log", "--all"),
    ("messages", "--pretty", "--json"),
    ("messages", "--oneline", "--jsonl"),
    ("messages", "--json", "--jsonl"),
    ("diff", "main..main", "main"),
])
def test_a_usage_error_is_one_line_and_exit_2(sess: Sess, args: tuple[str, ...]) -> None:
    sess.quest()
    before = sess.json("branch")
    result = sess(*args)
    line = user_error(result)
    assert result.exit_code == 2, (args, line)
    assert "--help" in line  # where to read how to say it
    assert sess.json("branch") == before  # nothing moved


@pytest.mark.parametrize(("flags", "named"), [
    (("--pretty", "--json"), ("--pretty", "--json")),
    (("--oneline", "--jsonl"), ("--oneline", "--jsonl")),
])
def test_contradictory_output_flags_name_both(sess: Sess, flags: tuple[str, ...],
                                              named: tuple[str, ...]) -> None:
    sess.quest()
    user_error(sess("messages", *flags), *named)


def test_one_output_flag_still_works(sess: Sess) -> None:
    sess.quest()
    assert len(json.loads(sess.ok("messages", "--json"))) == 3
    assert len(sess.lines("messages", "--jsonl")) == 3
    assert sess.ok("messages", "--pretty") == sess.ok("messages")


def test_diff_of_one_node_with_itself_says_so_once(sess: Sess) -> None:
    sess.quest()
    sess.ok("branch", "west")
    for args in (("main", "main"), ("main", "west"), ("main..west",)):
        out = sess.lines("diff", *args)
        assert len(out) == 1 and out[0].startswith("no difference: "), out
        assert "3 events" in out[0]
    sess.ok("append", "west", "user/message", '{"role": "user", "content": "more"}')
    out = sess.ok("diff", "main", "west")
    assert out.count("only in") == 2 and "no difference" not in out


def test_show_with_no_argument_shows_heads_session(sess: Sess) -> None:
    sess.quest()
    assert sess.ok("show") == sess.ok("show", "main")
    assert sess.ok("show").startswith("session main ")
    sess.ok("checkout", sess.head("main~1"))  # detached: the node, as before
    assert sess.ok("show").startswith("node ")


def test_a_range_shows_the_turn_line_its_session_shows(sess: Sess) -> None:
    lines = "\n".join(json.dumps(e) for e in TURN) + "\n"
    sess.ok("append", "main", "--jsonl", input=lines)
    sess.ok("branch", "main", "side")
    # Both go on with a turn of their own; its first event (the same turn/start, on the same
    # parent) is one node, so the range starts inside the new turn.
    sess.ok("append", "main", "--jsonl", input=lines)
    side_turn = lines.replace("Who has the key?", "Where is the cave?")
    sess.ok("append", "side", "--jsonl", input=side_turn)
    whole = sess.lines("log", "main")
    ranged = sess.lines("log", "side..main")
    turn_lines = [line for line in whole if "turn/end" in line]
    assert len(turn_lines) == 2
    assert ranged[0] == whole[0] and "turn/end" in ranged[0]  # the turn line, the same
    assert ranged == whole[:len(ranged)] and len(ranged) == 5  # the turn's line and 4 messages
    both = sess.lines("log", "side...main")
    assert sum("turn/end" in line for line in both) == 2  # one turn on each side
