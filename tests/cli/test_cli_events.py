"""The ``sess`` CLI in-process (click's CliRunner): sessions, HEAD, reading and writing events.

Diff, tag, import/export, maintenance, store discovery and ambiguous prefixes are in
test_cli_more.py.
Every user error must be one line on stderr, a non-zero exit and no traceback (issue 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_kit import Sess, msg

from sesstree.fmt import SHORT


def short(id: str) -> str:
    return id[:SHORT]


# -- init and status -----------------------------------------------------------------------------


def test_init_creates_then_reinitialises_without_losing_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    folder = (tmp_path / ".sess").resolve()
    assert s.ok("init") == f"Initialized empty sesstree store in {folder}\n"
    assert (folder / "store.db").is_file()
    s.ok("append", "user/message", msg("user", "hello"))
    assert s.ok("init") == f"Reinitialized existing sesstree store in {folder}\n"
    assert s.json("status")["length"] == 1


def test_init_path_and_init_at_store_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    out = s.ok("init", "proj/a")
    assert out == f"Initialized empty sesstree store in {(tmp_path / 'proj/a/.sess').resolve()}\n"
    assert (tmp_path / "proj/a/.sess/store.db").is_file()
    out = s.ok("--store", "elsewhere", "init")
    assert out == f"Initialized empty sesstree store in {(tmp_path / 'elsewhere').resolve()}\n"
    assert (tmp_path / "elsewhere/store.db").is_file()
    assert not (tmp_path / ".sess").exists()


def test_status_empty_attached_and_json(sess: Sess) -> None:
    assert sess.ok("status") == "On session main\nNo events yet\n"
    assert sess.json("status") == {"session": "main", "detached": False, "head": None, "length": 0}
    ids = sess.quest()
    assert sess.ok("status") == f"On session main\nhead {short(ids[-1])} (3 events)\n"
    assert sess.json("status") == {"session": "main", "detached": False, "head": ids[-1], "length": 3}


def test_status_detached(sess: Sess) -> None:
    ids = sess.quest()
    assert sess.ok("checkout", "main~1") == f"HEAD is now detached at {short(ids[1])}\n"
    assert sess.ok("status") == f"HEAD detached at {short(ids[1])} (2 events)\n"
    assert sess.json("status") == {"session": None, "detached": True, "head": ids[1], "length": 2}


# -- branch --------------------------------------------------------------------------------------


def test_branch_lists_sessions_current_marked_and_aligned(sess: Sess) -> None:
    assert sess.ok("branch") == ""
    ids = sess.quest()
    sess.ok("append", "a-long-name", "user/message", msg("user", "other"))
    lines = sess.lines("branch")
    assert len(lines) == 2
    assert lines[0].startswith("  a-long-name  ")
    assert lines[1].startswith("* main         ")
    assert short(ids[-1]) in lines[1]
    assert "     3 events  just now" in lines[1]
    assert "     1 event   just now" in lines[0]  # guards a past "1 events"
    # the id column is aligned
    assert len({line.index(" ", 4 + len("a-long-name")) for line in lines}) == 1
    data = sess.json("branch")
    assert [(b["name"], b["length"], b["current"]) for b in data] == [
        ("a-long-name", 1, False), ("main", 3, True)]
    assert data[1]["head"] == ids[-1]
    assert isinstance(data[1]["moved"], float)


def test_branch_creates_from_head_session_prefix_and_ancestor(sess: Sess) -> None:
    ids = sess.quest()
    assert sess.ok("branch", "from-head") == f"Created session from-head at {short(ids[2])}\n"
    sess.ok("branch", "main", "from-session")
    assert sess.ok("branch", ids[0][:6], "from-prefix") == (
        f"Created session from-prefix at {short(ids[0])} from {ids[0][:6]}\n")
    sess.ok("branch", "main~1", "from-tilde")
    sess.ok("branch", "main^^", "from-caret")
    heads = {b["name"]: (b["head"], b["length"]) for b in sess.json("branch")}
    assert heads == {
        "main": (ids[2], 3),
        "from-head": (ids[2], 3),
        "from-session": (ids[2], 3),
        "from-prefix": (ids[0], 1),
        "from-tilde": (ids[1], 2),
        "from-caret": (ids[0], 1),
    }
    # a fork is O(1): no new node was written
    assert sess.json("stats")["nodes"] == 3
    # HEAD did not move
    assert sess.json("status")["session"] == "main"
    entries = sess.json("reflog", "from-tilde")
    assert [e["reason"] for e in entries] == ["branch: created from main~1"]


def test_branch_rename_carries_head_and_reflog(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("checkout", "main")
    assert sess.ok("branch", "-m", "main", "quest") == "Renamed session main to quest\n"
    assert [b["name"] for b in sess.json("branch")] == ["quest"]
    assert sess.json("status")["session"] == "quest"
    reasons = [e["reason"] for e in sess.json("reflog", "quest")]
    assert reasons[0] == "branch: renamed main to quest"
    assert len(reasons) == 4  # three appends carried over
    assert sess.head("quest") == ids[-1]


def test_branch_delete_is_logged_detaches_head_and_can_be_undone(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("checkout", "main")
    sess.ok("branch", "keep")
    assert sess.ok("branch", "-d", "main") == (
        f"Deleted session main (was {short(ids[-1])}; 'sess branch main@{{1}} main' restores it)\n"
        f"HEAD is now detached at {short(ids[-1])}\n")
    assert [b["name"] for b in sess.json("branch")] == ["keep"]
    assert sess.ok("status") == f"HEAD detached at {short(ids[-1])} (3 events)\n"
    entries = sess.json("reflog", "main")
    assert entries[0]["reason"] == "branch: deleted"
    assert entries[0]["new"] is None
    # main@{1} is where main pointed before the deletion
    sess.ok("branch", "main@{1}", "main")
    assert sess.head("main") == ids[-1]




def test_branch_forks_source_into_new_as_the_product_says(sess: Sess) -> None:
    # Guards a past bug: `sess branch quest-1 quest-2` ran git's order (NEW START) and
    # answered "unknown revision 'quest-2'".
    ids = sess.quest()
    sess.ok("branch", "-m", "main", "quest-1")
    assert sess.ok("branch", "quest-1", "quest-2") == (
        f"Created session quest-2 at {short(ids[-1])} from quest-1\n")
    assert sess.json("log", "quest-2") == sess.json("log", "quest-1")


def test_branch_in_git_order_is_refused_with_the_right_order(sess: Sess) -> None:
    sess.quest()
    sess.ok("branch", "-m", "main", "quest-1")
    before = sess.json("branch"), sess.json("reflog", "quest-1")
    sess.fail("branch", "quest-2", "quest-1", needles=(
        "unknown revision 'quest-2'", "'quest-1' exists", "SOURCE NEW",
        "'sess branch quest-1 quest-2'"))
    assert (sess.json("branch"), sess.json("reflog", "quest-1")) == before  # nothing changed


# Guards a past bug: HEAD unset in a fresh store means main.
def test_branch_rename_of_implicit_head_session_moves_head(sess: Sess) -> None:
    ids = sess.quest()  # HEAD was never set explicitly: it is main by default
    sess.ok("branch", "-m", "main", "quest")
    assert sess.json("status") == {"session": "quest", "detached": False, "head": ids[-1],
                                   "length": 3}


# Guards a past bug: HEAD unset in a fresh store means main.
def test_branch_delete_of_implicit_head_session_detaches_head(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "-d", "main")
    assert sess.json("status") == {"session": None, "detached": True, "head": ids[-1], "length": 3}


@pytest.mark.parametrize(("args", "needles"), [
    (("branch", "west"), ("'west'", "already exists")),
    (("branch", "../x"), ("'../x'", "..")),
    (("branch", "--", "-x"), ("'-x'", "starts with '-'")),
    (("branch", ""), ("''", "empty")),
    (("branch", "bad name"), ("'bad name'",)),
    (("branch", "HEAD"), ("'HEAD'", "reserved")),
    (("branch", "nosuch", "new"), ("'nosuch'", "unknown revision")),
    (("branch", "main~7", "new"), ("main~7", "cannot go back 7")),
    (("branch", "main", "west"), ("'west'", "already exists")),
    (("branch", "-d", "ghost"), ("'ghost'",)),
    (("branch", "-m", "ghost", "spirit"), ("'ghost'",)),
    (("branch", "-m", "main", "west"), ("'west'", "already exists")),
    (("branch", "-m", "main", "../up"), ("'../up'",)),
    (("branch", "-d"), ("usage: sess branch -d NAME",)),
    (("branch", "-m", "main"), ("usage: sess branch -m OLD NEW",)),
    (("branch", "a", "b", "c"), ("usage: sess branch [SOURCE] NEW",)),
])
def test_branch_user_errors(sess: Sess, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    sess.quest()
    sess.ok("branch", "west")
    before = sess.json("branch")
    sess.fail(*args, needles=needles)
    after = sess.json("branch")
    assert [(b["name"], b["head"]) for b in after] == [(b["name"], b["head"]) for b in before]


def test_branch_dash_name_without_separator_is_a_usage_error(sess: Sess) -> None:
    # click reads `-x` as an option: a usage error (exit 2), still no traceback.
    sess.quest()
    result = sess("branch", "-x")
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert result.stderr == "Error: No such option '-x'. (see 'sess branch --help')\n"
    assert [b["name"] for b in sess.json("branch")] == ["main"]


def test_branch_on_empty_store_names_the_problem(sess: Sess) -> None:
    sess.fail("branch", "x", needles=("HEAD (main) has no events yet",))


# -- checkout ------------------------------------------------------------------------------------


def test_checkout_session_prefix_and_new(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "main~1", "west")
    assert sess.ok("checkout", "west") == "Switched to session west\n"
    assert sess.json("status") == {"session": "west", "detached": False, "head": ids[1], "length": 2}
    sess.ok("append", "user/message", msg("user", "on west"))
    assert sess.head("main") == ids[2]  # main unchanged

    assert sess.ok("checkout", ids[0][:8]) == f"HEAD is now detached at {short(ids[0])}\n"
    assert sess.json("status")["detached"] is True

    assert sess.ok("checkout", "-b", "east", "main~1") == "Switched to a new session east\n"
    assert sess.json("status") == {"session": "east", "detached": False, "head": ids[1], "length": 2}
    sess.ok("checkout", "-b", "east2")  # default: HEAD
    assert sess.json("status") == {"session": "east2", "detached": False, "head": ids[1], "length": 2}
    assert sess.ok("checkout", "main") == "Switched to session main\n"
    assert sess.json("status")["head"] == ids[2]


def test_checkout_session_with_suffix_detaches(sess: Sess) -> None:
    ids = sess.quest()
    assert sess.ok("checkout", "main~2") == f"HEAD is now detached at {short(ids[0])}\n"
    sess.ok("checkout", "main")
    sess.ok("tag", "start", "main~2")
    assert sess.ok("checkout", "start") == f"HEAD is now detached at {short(ids[0])}\n"


@pytest.mark.parametrize(("args", "needles"), [
    (("checkout", "nosuch"), ("'nosuch'",)),
    (("checkout", "-b", "main"), ("'main'", "already exists")),
    (("checkout", "-b", "../x"), ("'../x'",)),
    (("checkout", "-b", "new", "nosuch"), ("'nosuch'",)),
    (("checkout",), ("usage: sess checkout REV",)),
])
def test_checkout_user_errors(sess: Sess, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    sess.quest()
    sess.fail(*args, needles=needles)
    assert sess.json("status")["session"] == "main"
    assert [b["name"] for b in sess.json("branch")] == ["main"]


# -- log -----------------------------------------------------------------------------------------


def test_log_default_oneline_reverse_limit_json(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "main~1", "west")
    lines = sess.lines("log")
    assert lines == [
        f"{short(ids[2])}  user/message       user: I go west. (HEAD -> main)",
        f"{short(ids[1])}  assistant/message  assistant: Go west past the old mill. (west)",
        f"{short(ids[0])}  user/message       user: I need to get into the Cave of Echoes.",
    ]
    assert sess.lines("log", "--oneline") == [
        f"{short(ids[2])} (HEAD -> main) user: I go west.",
        f"{short(ids[1])} (west) assistant: Go west past the old mill.",
        f"{short(ids[0])} user: I need to get into the Cave of Echoes.",
    ]
    assert [line[:SHORT] for line in sess.lines("log", "--reverse")] == [short(i) for i in ids]
    assert [line[:SHORT] for line in sess.lines("log", "-n", "2")] == [short(ids[2]), short(ids[1])]
    assert [line[:SHORT] for line in sess.lines("log", "-n", "2", "--reverse", "--oneline")] == [
        short(ids[1]), short(ids[2])]
    assert [line[:SHORT] for line in sess.lines("log", "west")] == [short(ids[1]), short(ids[0])]
    data = sess.json("log", "-n", "2")
    assert data == [
        {"id": ids[2], "parent": ids[1], "type": "user/message",
         "data": {"role": "user", "content": "I go west."}},
        {"id": ids[1], "parent": ids[0], "type": "assistant/message",
         "data": {"role": "assistant", "content": "Go west past the old mill."}},
    ]
    assert [n["id"] for n in sess.json("log", "main~1", "--reverse")] == ids[:2]


def test_log_shows_tags_and_detached_head(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("tag", "start", ids[0])
    sess.ok("checkout", "main~1")
    assert sess.lines("log", "--oneline", "main") == [
        f"{short(ids[2])} (main) user: I go west.",
        f"{short(ids[1])} (HEAD) assistant: Go west past the old mill.",
        f"{short(ids[0])} (tag: start) user: I need to get into the Cave of Echoes.",
    ]


def test_log_summaries_of_tool_calls_are_one_line(sess: Sess) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    sess.ok("append", "assistant/message", json.dumps(
        {"role": "assistant", "content": "Let me\nlook.", "tool_calls": [call]}))
    sess.ok("append", "tool/result", json.dumps(
        {"role": "tool", "tool_call_id": "c1", "content": "a dark cave"}))
    lines = sess.lines("log", "--oneline")
    assert lines[0].endswith("(HEAD -> main) tool c1: a dark cave")
    assert lines[1].endswith(" assistant: Let me look. [calls look]")


@pytest.mark.parametrize(("args", "needles"), [
    (("log", "nosuch"), ("'nosuch'",)),
    (("log", "main~5"), ("main~5", "cannot go back 5")),
    (("log", "main@{9}"), ("main@{9}", "reflog of main has only 3 entries")),
])
def test_log_user_errors(sess: Sess, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    sess.quest()
    sess.fail(*args, needles=needles)


def test_log_on_empty_session_and_bad_limit(sess: Sess) -> None:
    sess.fail("log", needles=("HEAD (main) has no events yet",))
    sess.quest()
    result = sess("log", "-n", "0")
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert "0 is not in the range" in result.stderr
    assert result.stderr.count("\n") == 1  # one line, like every user error


# -- log --graph ---------------------------------------------------------------------------------


def test_log_graph_draws_the_fork_newest_first(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("checkout", "-b", "west", "main~1")
    west = sess.ok("append", "user/message", msg("user", "I go east instead.")).split()[0]
    lines = sess.lines("log", "--graph", "--all", "--oneline")
    assert lines == [
        f"* {west} (HEAD -> west) user: I go east instead.",
        f"| * {short(ids[2])} (main) user: I go west.",
        "|/",
        f"* {short(ids[1])} assistant: Go west past the old mill.",
        f"* {short(ids[0])} user: I need to get into the Cave of Echoes.",
    ]
    # a newer event on main puts main on top
    sess.ok("append", "main", "assistant/message", msg("assistant", "The mill is closed."))
    lines = sess.lines("log", "--graph", "--all", "--oneline")
    assert lines[0].startswith("* ") and "(main) assistant: The mill is closed." in lines[0]
    assert lines[1] == f"* {short(ids[2])} user: I go west."
    assert lines[2].startswith("| * ") and "(HEAD -> west)" in lines[2]
    assert lines[3] == "|/"
    assert lines[4] == f"* {short(ids[1])} assistant: Go west past the old mill."
    # without --all: only the chain of REV (default HEAD), no fork drawn
    assert sess.lines("log", "--graph", "--oneline") == [
        f"* {west} (HEAD -> west) user: I go east instead.",
        f"* {short(ids[1])} assistant: Go west past the old mill.",
        f"* {short(ids[0])} user: I need to get into the Cave of Echoes.",
    ]
    assert [line[:12] for line in sess.lines("log", "--graph", "main")] == [
        "* " + n[:SHORT] for n in [sess.head("main"), *reversed(ids)]]
    assert len(sess.lines("log", "--graph", "--all", "-n", "2")) == 2


def test_log_graph_all_draws_unrelated_roots_apart(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("append", "other", "user/message", msg("user", "a new story"))
    sess.ok("tag", "v1", "main~2")
    lines = sess.lines("log", "--graph", "--all", "--oneline")
    other = sess.head("other")
    assert lines == [
        f"* {short(other)} (other) user: a new story",
        "",
        f"* {short(ids[2])} (HEAD -> main) user: I go west.",
        f"* {short(ids[1])} assistant: Go west past the old mill.",
        f"* {short(ids[0])} (tag: v1) user: I need to get into the Cave of Echoes.",
    ]
    assert not any(line.startswith("|") for line in lines)


def test_log_graph_all_three_way_fork(sess: Sess) -> None:
    ids = sess.quest()
    for name in ("a", "b"):
        sess.ok("branch", "main~2", name)
        sess.ok("append", name, "user/message", msg("user", f"path {name}"))
    lines = sess.lines("log", "--graph", "--all", "--oneline")
    assert lines[-1] == f"* {short(ids[0])} user: I need to get into the Cave of Echoes."
    assert sum(line.startswith("|/") for line in lines) == 2
    labels = " ".join(lines)
    assert "(b) user: path b" in labels and "(a) user: path a" in labels
    assert lines[0].startswith("* ") and "(b)" in lines[0]  # newest first


# -- show ----------------------------------------------------------------------------------------


def test_show_human_and_json(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("tag", "start", "main~2")
    out = sess.ok("show", "start")
    assert out.splitlines()[:6] == [
        f"node    {ids[0]}",
        "parent  (root)",
        "type    user/message",
        "depth   1",
        "refs    tag: start",
        "",
    ]
    assert json.loads(out.split("\n\n", 1)[1]) == {
        "role": "user", "content": "I need to get into the Cave of Echoes."}
    out = sess.ok("show", "HEAD")  # HEAD named: its node (no argument shows the session)
    assert out.startswith(f"node    {ids[2]}\nparent  {ids[1]}\ntype    user/message\ndepth   3\n"
                          "refs    HEAD -> main\n")
    assert sess.json("show", ids[1][:5]) == {
        "id": ids[1], "parent": ids[0], "type": "assistant/message",
        "data": {"role": "assistant", "content": "Go west past the old mill."}, "depth": 2}


@pytest.mark.parametrize(("rev", "needles"), [
    ("nosuch", ("unknown revision 'nosuch'",)),
    ("main~3", ("main~3", "cannot go back 3")),
    ("0000000000ff", ("'0000000000ff'",)),
    ("HEAD@{3}", ("HEAD@{3}", "only 3 entries")),
])
def test_show_user_errors(sess: Sess, rev: str, needles: tuple[str, ...]) -> None:
    sess.quest()
    sess.fail("show", rev, needles=needles)


# -- messages ------------------------------------------------------------------------------------


def test_messages_human_json_jsonl_and_rev(sess: Sess) -> None:
    sess.quest()
    sess.ok("append", "context/message", json.dumps({"content": "It is raining."}))
    sess.ok("append", "turn/start", "{}")
    assert sess.lines("messages", "--oneline") == [
        "user: I need to get into the Cave of Echoes.",
        "assistant: Go west past the old mill.",
        "user: I go west.",
        "user: <context> It is raining. </context>",
    ]
    expected = [
        {"role": "user", "content": "I need to get into the Cave of Echoes."},
        {"role": "assistant", "content": "Go west past the old mill."},
        {"role": "user", "content": "I go west."},
        {"role": "user", "content": "<context>\nIt is raining.\n</context>"},
    ]
    assert sess.json("messages") == expected
    out = sess.ok("messages", "--jsonl")
    assert [json.loads(line) for line in out.splitlines()] == expected
    assert sess.json("messages", "main~3") == expected[:2]


def test_messages_exact_and_sending_view(sess: Sess) -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}
    sess.ok("append", "assistant/message", json.dumps(asked))
    # at the tail, the call is pending: noted, and nothing is invented
    result = sess("messages", "--json")
    assert result.exit_code == 0
    assert result.stderr == "note: tool call c9 has no result yet (pending)\n"
    assert json.loads(result.stdout) == [asked]
    result = sess("messages", "--json", "--sending")
    assert json.loads(result.stdout)[1]["tool_call_id"] == "c9"
    # once something follows, it is an orphan: a warning, still nothing invented
    sess.ok("append", "user/message", json.dumps({"role": "user", "content": "well?"}))
    sess.ok("append", "user/message", json.dumps({"role": "user", "content": "hello?"}))
    result = sess("messages", "--oneline")
    assert result.exit_code == 0
    assert result.stderr == "warning: orphan-call c9: no result was recorded\n"
    assert result.stdout.splitlines()[0] == "assistant: [calls look]"
    assert len(result.stdout.splitlines()) == 3
    result = sess("messages", "--sending", "--jsonl")
    sent = [json.loads(line) for line in result.stdout.splitlines()]
    assert [m["role"] for m in sent] == ["assistant", "tool", "user"]
    assert sent[2]["content"] == "well?\n\nhello?"
    assert "note: two user messages in a row sent as one" in result.stderr


def test_messages_user_errors(sess: Sess) -> None:
    sess.fail("messages", needles=("HEAD (main) has no events yet",))
    sess.quest()
    sess.fail("messages", "nosuch", "--jsonl", needles=("'nosuch'",))


# -- append --------------------------------------------------------------------------------------


def test_append_from_argument_and_stdin(sess: Sess) -> None:
    out = sess.ok("append", "user/message", msg("user", "one"))
    first = sess.head()
    assert out == f"{short(first)} main (1 event)\n"
    out = sess.ok("append", "assistant/message", "-", input=msg("assistant", "two") + "\n")
    assert out.endswith(" main (2 events)\n")
    sess.ok("append", "user/message", input=msg("user", "three"))  # no JSON argument: stdin
    assert sess.json("messages") == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    assert [e["reason"] for e in sess.json("reflog")] == [
        "append: user/message", "append: assistant/message", "append: user/message"]


def test_append_to_named_session_creates_it(sess: Sess) -> None:
    sess.quest()
    out = sess.ok("append", "side", "user/message", msg("user", "aside"))
    assert out.endswith(" side (1 event)\n")
    sess.ok("append", "sessions/side", "assistant/message", "-", input=msg("assistant", "ok"))
    sess.ok("append", "side", "turn/end", input="{}")
    assert sess.json("messages", "side") == [{"role": "user", "content": "aside"},
                                            {"role": "assistant", "content": "ok"}]
    assert [b["name"] for b in sess.json("branch")] == ["main", "side"]
    assert sess.json("status")["session"] == "main"  # HEAD untouched
    assert sess.json("log", "side", "-n", "1")[0]["type"] == "turn/end"


def test_append_malformed_json_is_one_line_and_writes_nothing(sess: Sess) -> None:
    sess.quest()
    before = sess.head()
    line = sess.fail("append", "user/message", '{"role": "user", "content": ',
                     needles=("malformed JSON in argument", "line 1 column"))
    assert line.startswith("Error: ")
    sess.fail("append", "user/message", "-", input='{"role": "user"\n  "content": "x"}\n',
              needles=("malformed JSON in stdin", "line 2"))
    sess.fail("append", "side", "user/message", input="",
              needles=("malformed JSON in stdin",))
    assert sess.head() == before
    assert [b["name"] for b in sess.json("branch")] == ["main"]


@pytest.mark.parametrize(("args", "needles"), [
    (("append", "main", "bogus/type", "{}"), ("unknown event type 'bogus/type'",)),
    (("append", "a", "b", "c", "d"), ("usage: sess append [SESSION] TYPE [JSON|-]",)),
    (("append", "../x", "user/message", "{}"), ("'../x'",)),
    (("append", "user/message", "NaN"), ("nan, which JSON cannot hold",)),
])
def test_append_user_errors(sess: Sess, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    sess.quest()
    before = sess.json("stats")["nodes"]
    sess.fail(*args, needles=needles)
    assert sess.json("stats")["nodes"] == before


# Guards a past bug.
def test_append_unknown_type_names_the_type(sess: Sess) -> None:
    sess.quest()
    sess.fail("append", "bogus/type", '{"x": 1}', needles=("'bogus/type'",))


def test_append_on_detached_head_is_refused(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("checkout", "main~1")
    sess.fail("append", "user/message", msg("user", "x"),
              needles=(f"HEAD is detached at {short(ids[1])}", "sess checkout -b NAME"))
    assert sess.head("main") == ids[2]
    # an explicit session still works while detached
    sess.ok("append", "main", "user/message", msg("user", "x"))
    assert sess.json("status")["detached"] is True


def test_append_with_no_arguments_is_a_usage_error(sess: Sess) -> None:
    result = sess("append")
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert "Missing argument" in result.stderr
    assert result.stderr.count("\n") == 1


# -- reset and reflog ----------------------------------------------------------------------------


def test_reset_then_undo_through_reflog(sess: Sess) -> None:
    ids = sess.quest()
    assert sess.ok("reset", "main", "main~2") == (
        f"main: {short(ids[2])} -> {short(ids[0])} (1 event)\n")
    assert sess.json("messages") == [
        {"role": "user", "content": "I need to get into the Cave of Echoes."}]
    lines = sess.lines("reflog", "main")
    assert lines[0] == (f"{short(ids[0])} main@{{0}}: reset: moving to main~2 "
                        f"(from {short(ids[2])}, just now)")
    assert lines[1].startswith(f"{short(ids[2])} main@{{1}}: append: user/message (from {short(ids[1])}")
    assert lines[-1] == f"{short(ids[0])} main@{{3}}: append: user/message (from -, just now)"
    # undo: main@{1} is where main was before the reset
    assert sess.ok("reset", "main", "main@{1}") == (
        f"main: {short(ids[0])} -> {short(ids[2])} (3 events)\n")
    assert sess.head("main") == ids[2]
    entries = sess.json("reflog", "main")
    assert [e["reason"] for e in entries] == [
        "reset: moving to main@{1}", "reset: moving to main~2",
        "append: user/message", "append: assistant/message", "append: user/message"]
    assert entries[0]["ref"] == "sessions/main"
    assert (entries[0]["old"], entries[0]["new"]) == (ids[0], ids[2])
    assert entries[-1]["old"] is None
    assert entries[0]["time"] >= entries[-1]["time"]
    assert sess.json("reflog") == entries  # default: the HEAD session


def test_reset_fast_forwards_other_session(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "main~2", "west")
    assert sess.ok("reset", "west", "main") == f"west: {short(ids[0])} -> {short(ids[2])} (3 events)\n"
    assert sess.head("west") == ids[2]


@pytest.mark.parametrize(("args", "needles"), [
    (("reset", "ghost", "main"), ("no session named 'ghost'",)),
    (("reset", "main", "nosuch"), ("'nosuch'",)),
    (("reflog", "ghost"), ("'ghost'",)),
])
def test_reset_and_reflog_user_errors(sess: Sess, args: tuple[str, ...],
                                      needles: tuple[str, ...]) -> None:
    ids = sess.quest()
    sess.fail(*args, needles=needles)
    assert sess.head("main") == ids[2]
    assert len(sess.json("reflog", "main")) == 3


def test_reflog_on_detached_head_asks_for_a_name(sess: Sess) -> None:
    sess.quest()
    sess.ok("checkout", "main~1")
    sess.fail("reflog", needles=("HEAD is detached at", "name one",))
    assert len(sess.json("reflog", "main")) == 3
