"""Reading a session as a person: the conversation view of ``sess log`` (turns folded),
filters, ranges, ``sess show SESSION``, ``sess messages`` in full, ``sess diff`` forms."""

from __future__ import annotations

import json
import time

import pytest
from cli_kit import Sess, msg

from sesstree.fmt import short

CALL = {"id": "c1", "type": "function",
        "function": {"name": "talk_to", "arguments": '{"npc": "mayor"}'}}

#: One agent turn as the loop records it: 12 events, 4 of them messages.
TURN = [
    {"type": "turn/start", "data": {"trigger": {"kind": "user"}}},
    {"role": "user", "content": "Who has the key?\nAsk around."},
    {"type": "step/start", "data": {"step": 1}},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"type": "usage", "data": {"model": "m", "usage": {"prompt_tokens": 20,
                                                         "completion_tokens": 3}}},
    {"type": "tool/call", "data": {"id": "c1", "name": "talk_to", "arguments": '{"npc": "mayor"}'}},
    {"role": "tool", "tool_call_id": "c1", "content": "My daughter keeps it.\nAsk her."},
    {"type": "step/end", "data": {"step": 1, "finish_reason": "tool_calls"}},
    {"type": "step/start", "data": {"step": 2}},
    {"role": "assistant", "content": "The mayor's daughter.\n\n- ask her\n- bring a lantern"},
    {"type": "usage", "data": {"model": "m", "usage": {"prompt_tokens": 40,
                                                         "completion_tokens": 9}}},
    {"type": "step/end", "data": {"step": 2, "finish_reason": "stop"}},
    {"type": "turn/end", "data": {"reason": {"kind": "answer"}, "steps": 2}},
]


def _turn(sess: Sess, session: str = "main") -> list[str]:
    """Append TURN to ``session`` in one go; the ids, oldest first."""
    sess.ok("append", session, "--jsonl", input="\n".join(json.dumps(e) for e in TURN) + "\n")
    return [n["id"] for n in reversed(sess.json("log", session))][-len(TURN):]


def test_log_shows_the_conversation_with_the_turn_folded(sess: Sess) -> None:
    ids = _turn(sess)
    lines = sess.lines("log")
    assert len(lines) == 5  # 4 messages and the turn, not 13 events
    assert lines[0].startswith(f"{short(ids[-1])}  turn/end ")
    assert "turn: answer (stop), 2 steps, 60 in/12 out tokens" in lines[0]
    assert lines[0].endswith("(HEAD -> main)")
    assert [line[:10] for line in lines[1:]] == [short(ids[i]) for i in (9, 6, 3, 1)]
    assert '[calls talk_to {"npc": "mayor"}]' in lines[3]
    assert "step/start" not in "".join(lines) and "usage" not in "".join(lines)
    # every event, and -N as -n N
    assert len(sess.lines("log", "--all-events")) == len(TURN)
    assert [line[:10] for line in sess.lines("log", "--all-events", "-3")] == [
        short(i) for i in ids[:-4:-1]]
    assert len(sess.lines("log", "-2")) == 2
    assert sess.lines("log", "-2", "--reverse")[1].startswith(short(ids[-1]))
    # --json stays every event, for scripts
    assert [n["id"] for n in sess.json("log")] == ids[::-1]


def test_a_turn_that_did_not_end_says_so(sess: Sess) -> None:
    sess.ok("append", "--jsonl", input="\n".join(json.dumps(e) for e in TURN[:5]))
    lines = sess.lines("log")
    assert len(lines) == 3
    assert "turn: unfinished, 20 in/3 out tokens" in lines[2]
    assert lines[2].split()[1] == "turn/start"


def test_turn_duration_comes_from_the_reflog(sess: Sess) -> None:
    # One append per event, as the loop writes: the reflog says when each was recorded.
    for event in TURN:
        if "role" in event:
            sess.ok("append", "--jsonl", input=json.dumps(event))
        else:
            if event["type"] == "turn/end":
                time.sleep(0.25)
            sess.ok("append", str(event["type"]), json.dumps(event["data"]))
    line = sess.ok("log", env={"COLUMNS": "200"}).splitlines()[0]
    seconds = float(line.split(" tokens, ")[1].split(" s")[0])
    assert 0.2 <= seconds < 30


def test_log_filters(sess: Sess) -> None:
    ids = _turn(sess)
    assert [line[:10] for line in sess.lines("log", "--role", "user")] == [short(ids[1])]
    assert [line[:10] for line in sess.lines("log", "--role", "tool")] == [short(ids[6])]
    assert [line[:10] for line in sess.lines("log", "--type", "step/*")] == [
        short(ids[i]) for i in (11, 8, 7, 2)]
    assert [line[:10] for line in sess.lines("log", "--type", "usage", "--type", "turn/end")] == [
        short(ids[i]) for i in (12, 10, 4)]
    assert [line[:10] for line in sess.lines("log", "--grep", "daughter")] == [
        short(ids[9]), short(ids[6])]
    assert sess.lines("log", "--grep", "DAUGHTER") == []
    assert len(sess.lines("log", "--grep", "DAUGHTER", "-i")) == 2
    assert [line[:10] for line in sess.lines("log", "--grep", "mayor", "--all-events")] == [
        short(ids[i]) for i in (9, 5, 3)]
    assert [n["id"] for n in sess.json("log", "--role", "user")] == [ids[1]]
    # times: everything was recorded just now
    assert len(sess.lines("log", "--since", "1 hour ago")) == 4
    assert sess.lines("log", "--until", "yesterday") == []
    assert len(sess.lines("log", "--since", "2020-01-01", "--until", "now")) == 4
    assert sess.json("log", "--since", f"@{int(time.time()) + 3600}") == []


@pytest.mark.parametrize(("args", "needles"), [
    (("log", "--since", "someday"), ("'someday' is no time", "--since")),
    (("log", "--grep", "(unclosed"), ("no regular expression", "--grep")),
    (("log", "--graph", "--role", "user"), ("--graph draws whole sessions",)),
    (("log", "a..b..c"), ("not a range",)),
    (("log", "main..nosuch"), ("'nosuch'",)),
])
def test_log_filter_errors_are_one_line(sess: Sess, args: tuple[str, ...],
                                        needles: tuple[str, ...]) -> None:
    _turn(sess)
    sess.fail(*args, needles=needles)


def test_ranges_in_log_and_diff(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "main~1", "west")
    west = sess.ok("append", "west", "user/message", msg("user", "I go east.")).split()[0]
    assert [line[:10] for line in sess.lines("log", "main..west")] == [west]
    assert [line[:10] for line in sess.lines("log", "west..main")] == [short(ids[2])]
    assert [n["id"] for n in sess.json("log", "main~2..main")] == [ids[2], ids[1]]
    both = sess.lines("log", "main...west")
    assert [line[:12] for line in both] == [f"> {west}", f"< {short(ids[2])}"]
    assert sess.lines("log", "main..main") == []
    # HEAD is the missing end: west.. is west..HEAD (HEAD is main)
    assert [line[:10] for line in sess.lines("log", "west..")] == [short(ids[2])]
    # diff: A..B is A B; A...B only what B added since they parted; A alone is A HEAD
    assert sess.ok("diff", "main..west") == sess.ok("diff", "main", "west")
    only_b = sess.lines("diff", "main...west")
    assert only_b[0] == f"common ancestor {short(ids[1])} (2 events)"
    assert only_b[1:] == ["only in west (1):", f"  {west}  user/message       user: I go east."]
    assert sess.ok("diff", "west") == sess.ok("diff", "west", "HEAD")
    assert sess.json("diff", "main...west")["a"] == []
    sess.fail("diff", "main..west", "main", needles=("a range or two revisions",))


def test_diff_stat(sess: Sess) -> None:
    sess.quest()
    sess.ok("branch", "main~2", "west")
    sess.ok("append", "west", "assistant/message", msg("assistant", "Hello there"))
    sess.ok("append", "west", "turn/start", "{}")
    lines = sess.lines("diff", "--stat", "main", "west")
    assert lines[1] == " main | +2 events: 1 assistant/message, 1 user/message; " \
                       "36 characters of text"
    assert lines[2] == " west | +2 events: 1 assistant/message, 1 turn/start; " \
                       "11 characters of text"
    stat = sess.json("diff", "--stat", "main", "west")
    assert stat["b"] == {"events": 2, "types": {"assistant/message": 1, "turn/start": 1},
                         "chars": 11}


def test_show_session_renders_the_conversation_in_full(sess: Sess) -> None:
    ids = _turn(sess)
    out = sess.ok("show", "main")
    assert out.splitlines()[:4] == [
        f"session main  {short(ids[-1])} (HEAD -> main)",
        "title   Who has the key?",
        f"length  {len(TURN)} events",
        "",
    ]
    body = out.split("\n\n", 1)[1]
    assert body == (
        "user\n"
        "    Who has the key?\n"
        "    Ask around.\n"
        "\n"
        "assistant\n"
        '    call talk_to [c1] {"npc": "mayor"}\n'
        "    result [c1]\n"
        "        My daughter keeps it.\n"
        "        Ask her.\n"
        "\n"
        "assistant\n"
        "    The mayor's daughter.\n"
        "\n"
        "    - ask her\n"
        "    - bring a lantern\n"
    )
    # sess messages gives the same conversation, unclipped; --oneline the old one-liners
    assert sess.ok("messages") == body
    assert sess.ok("messages", "--pretty") == body
    assert sess.lines("messages", "--oneline")[0] == "user: Who has the key? Ask around."
    # HEAD, an id, name~N: one node, as before; --node for a session's head node
    assert sess.ok("show", "HEAD").startswith(f"node    {ids[-1]}\n")
    assert sess.ok("show", "main", "--node").startswith(f"node    {ids[-1]}\n")
    assert sess.json("show", "main")["id"] == ids[-1]


def test_show_several_revisions(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("tag", "start", "main~2")
    out = sess.ok("show", "start", ids[1][:8])
    first, second = out.split("\n\nnode    ")
    assert first.startswith(f"node    {ids[0]}\n")
    assert second.startswith(f"{ids[1]}\n")
    assert [n["id"] for n in sess.json("show", "start", "main")] == [ids[0], ids[2]]
    # a bad revision anywhere: one line, nothing printed
    sess.fail("show", "start", "nosuch", needles=("'nosuch'",))


def test_long_arguments_are_indented_json(sess: Sess) -> None:
    args = {"query": "x" * 80, "limit": 3}
    call = {"id": "c2", "type": "function",
            "function": {"name": "search", "arguments": json.dumps(args)}}
    sess.ok("append", "assistant/message", json.dumps(
        {"role": "assistant", "content": "Looking.", "tool_calls": [call]}))
    assert sess.lines("messages") == [
        "assistant",
        "    Looking.",
        "    call search [c2]",
        "        {",
        f'          "query": "{"x" * 80}",',
        '          "limit": 3',
        "        }",
    ]


def test_time_filters_on_a_range_and_a_fork(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "main~1", "west")
    west = sess.ok("append", "west", "user/message", msg("user", "I go east.")).split()[0]
    assert [line[:10] for line in sess.lines("log", "west", "--since", "1 hour ago")] == [
        west, short(ids[1]), short(ids[0])]
    assert [line[:12] for line in sess.lines("log", "main...west", "--since", "1 minute ago")
            ] == [f"> {west}", f"< {short(ids[2])}"]
    assert sess.lines("log", "main...west", "--until", "1 hour ago") == []


def test_graph_honours_reverse_and_oneline(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("checkout", "-b", "west", "main~1")
    west = sess.ok("append", "user/message", msg("user", "I go east instead.")).split()[0]
    newest_first = sess.lines("log", "--graph", "--all", "--oneline")
    assert newest_first[2] == "|/"
    oldest_first = sess.lines("log", "--graph", "--all", "--oneline", "--reverse")
    assert oldest_first == [
        f"* {short(ids[0])} user: I need to get into the Cave of Echoes.",
        f"* {short(ids[1])} assistant: Go west past the old mill.",
        "|\\",
        f"| * {short(ids[2])} (main) user: I go west.",
        f"* {west} (HEAD -> west) user: I go east instead.",
    ]
    # without --oneline: the type column, refs at the end, as `sess log` lines are
    assert sess.lines("log", "--graph", "-n", "1") == [
        f"* {west}  {'user/message':<17}  user: I go east instead. (HEAD -> west)"]
    assert sess.lines("log", "--graph", "--reverse", "-n", "1") == sess.lines(
        "log", "--graph", "-n", "1")


def test_a_turn_recorded_in_one_go_has_no_duration(sess: Sess) -> None:
    _turn(sess)  # one transaction, one reflog entry: when it ended, not how long it took
    line = sess.ok("log", env={"COLUMNS": "200"}).splitlines()[0]
    assert line.split("tokens")[1].strip() == "(HEAD -> main)"


def test_log_n_on_a_long_session_reads_a_window(sess: Sess) -> None:
    # 300 turns of 13 events: -n reads the newest window only, and shows the same lines as
    # the whole walk does
    batch = "\n".join(json.dumps(e) for e in TURN)
    sess.ok("append", "--jsonl", input="\n".join([batch] * 1) + "\n")
    for _ in range(5):
        sess.ok("append", "--jsonl", input="\n".join([batch] * 60) + "\n")
    def words(*args: str) -> list[list[str]]:  # the type column's width follows what is shown
        return [line.split() for line in sess.lines("log", *args)]

    full = words()
    for n in (1, 7, 40):
        assert words("-n", str(n)) == full[:n]
    assert len(full) == 5 * 301


@pytest.mark.parametrize("rev", ["....", "main....", "\u2028..main", "main..\x00", "..." + "~" * 900,
                                 "main..main@{99}", "HEAD~9..", "..nosuch"])
def test_hostile_ranges_are_one_line(sess: Sess, rev: str) -> None:
    sess.quest()
    for command in (("log", rev), ("diff", rev), ("log", rev, "--json")):
        result = sess(*command)
        assert "Traceback" not in result.output
        if result.exit_code:
            sess.fail(*command)  # one line on stderr, nothing on stdout


def test_a_turn_logged_as_one_entry_shows_its_duration(sess: Sess) -> None:
    # As the agent loop writes a turn: each event committed as it happens, one reflog entry.
    with sess.store() as store:
        s = store.session("main")
        with s.log_group("run: a turn"):
            for event in TURN:
                if event.get("type") == "turn/end":
                    time.sleep(0.25)
                if "role" in event:
                    s.add_message(event)
                else:
                    s.append(str(event["type"]), event["data"])
        store.set_head_session("main")
    assert len(sess.lines("reflog")) == 1
    line = sess.ok("log", env={"COLUMNS": "200"}).splitlines()[0]
    seconds = float(line.split(" tokens, ")[1].split(" s")[0])
    assert 0.2 <= seconds < 30
