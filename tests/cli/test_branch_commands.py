"""Git muscle memory on sessions: branch -v/-D/--list, checkout -, reset on HEAD's session,
emptying a session, tag -l, append of many events, reflog -n, completion, -h."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_kit import Sess, msg

from sesstree.fmt import short

CLAUDE = [
    {"type": "summary", "summary": "Someone else's talk", "leafUuid": "elsewhere"},
    {"type": "summary", "summary": "Finding the silver key", "leafUuid": "u2"},
    {"parentUuid": None, "isSidechain": False, "sessionId": "s1", "type": "user",
     "message": {"role": "user", "content": "Where is the key?"}, "uuid": "u1",
     "timestamp": "2025-01-01T00:00:00Z"},
    {"parentUuid": "u1", "isSidechain": False, "sessionId": "s1", "type": "assistant",
     "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "Here."}],
                 "stop_reason": "end_turn"}, "uuid": "u2", "timestamp": "2025-01-01T00:00:01Z"},
]
PI = [
    {"type": "session", "version": 3, "id": "pi-1", "timestamp": "2025-01-01T00:00:00Z",
     "cwd": "/w"},
    {"type": "session_info", "id": "e0", "parentId": None, "timestamp": "2025-01-01T00:00:00Z",
     "name": "Quest planning"},
    {"type": "message", "id": "e1", "parentId": "e0", "timestamp": "2025-01-01T00:00:01Z",
     "message": {"role": "user", "content": [{"type": "text", "text": "plan it"}],
                 "timestamp": 1}},
]


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_branch_verbose_shows_titles_and_sources(sess: Sess, tmp_path: Path) -> None:
    claude = _write(tmp_path / "claude-talk.jsonl", CLAUDE)
    pi = _write(tmp_path / "pi-talk.jsonl", PI)
    sess.ok("import", str(claude), "--as", "cc")
    sess.ok("import", str(pi), "--as", "pi")
    sess.ok("append", "by-hand", "user/message", msg("user", "First line\nsecond line"))
    rows = {r["name"]: r for r in sess.json("branch", "-v")}
    assert rows["cc"]["title"] == "Finding the silver key"  # not the other conversation's
    assert rows["cc"]["source"] == f"claude: {claude.resolve()}"
    assert rows["pi"]["title"] == "Quest planning"
    assert rows["pi"]["source"] == f"pi: {pi.resolve()}"
    assert rows["by-hand"]["title"] == "First line" and rows["by-hand"]["source"] is None
    assert "title" not in sess.json("branch")[0]  # plain --json is unchanged
    lines = {line.split()[0]: line for line in
             sess.ok("branch", "-v", env={"COLUMNS": "200"}).splitlines()}
    assert "Finding the silver key  [claude: " in lines["cc"]
    assert lines["cc"].endswith("claude-talk.jsonl]")
    assert "Quest planning  [pi: " in lines["pi"]
    assert lines["by-hand"].endswith("First line")


def test_branch_list_patterns_and_big_d(sess: Sess) -> None:
    sess.quest()
    for name in ("quest-1", "quest-2", "other"):
        sess.ok("branch", name)
    assert [line.split()[0] for line in sess.lines("branch", "--list", "quest-*")] == [
        "quest-1", "quest-2"]
    assert [b["name"] for b in sess.json("branch", "-l", "o*", "m*")] == ["main", "other"]
    assert sess.lines("branch", "--list", "nothing*") == []
    out = sess.ok("branch", "-D", "quest-1", "quest-2")
    assert out.count("Deleted session") == 2
    assert [b["name"] for b in sess.json("branch")] == ["main", "other"]
    # one unknown name: nothing is deleted
    sess.fail("branch", "-d", "other", "ghost", needles=("'ghost'",))
    assert [b["name"] for b in sess.json("branch")] == ["main", "other"]


def test_checkout_dash_goes_back(sess: Sess) -> None:
    ids = sess.quest()
    sess.fail("checkout", "-", needles=("no previous session",))
    sess.ok("branch", "west")
    assert sess.ok("checkout", "west") == "Switched to session west\n"
    assert sess.ok("checkout", "-") == "Switched to session main\n"
    assert sess.ok("checkout", "-") == "Switched to session west\n"
    sess.ok("checkout", "main~1")  # detached: - comes back to it too
    assert sess.ok("checkout", "-") == "Switched to session west\n"
    assert sess.ok("checkout", "-") == f"HEAD is now detached at {short(ids[1])}\n"
    sess.ok("checkout", "-b", "east", "main")
    assert sess.ok("checkout", "-") == f"HEAD is now detached at {short(ids[1])}\n"


def test_reset_the_head_session_without_naming_it(sess: Sess) -> None:
    ids = sess.quest()
    assert sess.ok("reset", "HEAD~2") == f"main: {short(ids[2])} -> {short(ids[0])} (1 event)\n"
    assert sess.ok("reset", "--hard", "main@{1}") == (
        f"main: {short(ids[0])} -> {short(ids[2])} (3 events)\n")
    sess.ok("branch", "main~1", "west")
    assert sess.ok("reset", "west", "main") == (  # the two-argument form still works
        f"west: {short(ids[1])} -> {short(ids[2])} (3 events)\n")
    sess.ok("checkout", "main~1")
    sess.fail("reset", "HEAD~1", needles=("HEAD is detached", "sess reset SESSION REV"))


def test_emptying_a_session_keeps_its_name_and_can_be_undone(sess: Sess) -> None:
    ids = sess.quest()
    with sess.store() as store:
        store.set_session_meta("main", {"title": "kept"})
    assert sess.ok("reset", "--empty") == (
        f"main: {short(ids[2])} -> (empty) ('sess reset main main@{{1}}' restores it)\n")
    assert sess.ok("status") == "On session main\nNo events yet\n"
    assert sess.json("branch") == []
    sess.fail("log", needles=("HEAD (main) has no events yet",))
    assert sess.json("reflog")[0]["reason"] == "reset: emptied"
    assert sess.ok("reset", "main", "main@{1}") == f"main: - -> {short(ids[2])} (3 events)\n"
    with sess.store() as store:
        assert store.get_session_meta("main") == {"title": "kept"}
    # HEAD's session, emptied, takes new events; and `reset REV` refills it too
    sess.ok("reset", "--empty", "main")
    sess.ok("append", "user/message", msg("user", "A fresh start."))
    assert len(sess.json("log")) == 1
    sess.fail("reset", "--empty", "ghost", needles=("'ghost'",))


def test_tag_list_pattern(sess: Sess) -> None:
    sess.quest()
    for name, rev in (("v1", "main~2"), ("v2", "main~1"), ("start", "main")):
        sess.ok("tag", name, rev)
    assert [line.split()[0] for line in sess.lines("tag", "-l", "v*")] == ["v1", "v2"]
    assert [t["name"] for t in sess.json("tag", "--list", "s*")] == ["start"]
    assert len(sess.lines("tag")) == 3


def test_append_many_events_from_stdin(sess: Sess) -> None:
    lines = [msg("user", "one"), msg("assistant", "two"), msg("user", "three")]
    out = sess.ok("append", "user/message", input="\n".join([lines[0], lines[2]]) + "\n")
    assert out.endswith("main (2 events; 2 appended)\n")
    sess.ok("append", "side", "--jsonl", input="\n".join(lines) + "\n"
            + json.dumps({"type": "turn/start", "data": {}}) + "\n")
    assert [n["type"] for n in sess.json("log", "side", "--reverse")] == [
        "user/message", "assistant/message", "user/message", "turn/start"]
    assert len(sess.json("reflog", "side")) == 1  # one transaction
    # a bad line: named, and nothing appended
    before = sess.json("log", "side")
    sess.fail("append", "side", "--jsonl", input=lines[0] + "\n{oops\n",
              needles=("stdin line 2",))
    sess.fail("append", "side", "--jsonl", input=json.dumps({"type": "nope/x", "data": 1}),
              needles=("stdin line 1", "unknown event type 'nope/x'", "user/message"))
    sess.fail("append", "side", "--jsonl", input="[1, 2]\n", needles=("stdin line 1",))
    assert sess.json("log", "side") == before


def test_unknown_type_lists_the_known_ones(sess: Sess) -> None:
    line = sess.fail("append", "usermessage", '{"content": "x"}',
                     needles=("unknown event type 'usermessage'", "known types:"))
    for known in ("user/message", "assistant/message", "tool/result", "turn/start"):
        assert known in line


def test_reflog_limit(sess: Sess) -> None:
    sess.quest()
    assert len(sess.lines("reflog", "-n", "2")) == 2
    assert len(sess.lines("reflog", "-1")) == 1
    assert sess.lines("reflog", "HEAD", "-2") == sess.lines("reflog", "main", "-n", "2")
    assert len(sess.json("reflog", "-n", "1")) == 1


def test_dash_h_is_help(sess: Sess) -> None:
    assert sess.ok("-h") == sess.ok("--help")
    assert "Usage: sess log" in sess.ok("log", "-h")


def test_completion_scripts_and_names(sess: Sess) -> None:
    sess.quest()
    sess.ok("branch", "quest-1")
    sess.ok("tag", "start", "main~2")
    assert "_SESS_COMPLETE=bash_complete" in sess.ok("completion", "bash")
    assert "compdef _sess_completion sess" in sess.ok("completion", "zsh")
    assert "complete --no-files --command sess" in sess.ok("completion", "fish")
    # what the shell asks, through the real entry point
    def complete(words: str) -> list[str]:
        cword = len(words.split()) - (0 if words.endswith(" ") else 1)
        env = {**os.environ, "_SESS_COMPLETE": "bash_complete", "COMP_WORDS": words,
               "COMP_CWORD": str(cword)}
        proc = subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()"],
                              env=env, capture_output=True, text=True, cwd=sess.root, timeout=60)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]

    assert complete("sess checkout q") == ["quest-1"]
    assert complete("sess log s") == ["start"]
    assert set(complete("sess show ")) >= {"HEAD", "main", "quest-1", "start"}
    assert complete("sess ch") == ["checkout"]
    assert "--oneline" in complete("sess log --on")
    # no store here: nothing offered, nothing said
    assert complete("sess --store /nonexistent log ") == []
