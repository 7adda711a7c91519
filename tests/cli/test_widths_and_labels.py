"""Width and labels: lines fitted in screen cells (CJK takes two), ``branch -v`` giving the
title its room and keeping a run's model in view, every import of a file keeping its source
label, ``stats`` saying which way its ratio goes, and a "no store found" that names the store
a user most likely meant."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from cli_kit import Sess, drain, msg

from sesstree import open_store
from sesstree.fmt import cells, fit, fit_left
from sesstree.store.base import RUN_KEY

ANSI = re.compile(r"\x1b\[[0-9;]*m")
CHINESE = "请问去回声洞穴的路怎么走？我听说要先经过老磨坊，然后一直向西走到河边再过桥。" * 2
JAPANESE = "洞窟の鍵は宿屋の主人が持っています。夜明けにだけ開くそうです。" * 2


def test_cells_count_wide_characters_twice_and_marks_not_at_all() -> None:
    assert cells("abc") == 3
    assert cells("洞穴") == 4 and cells("ｶﾞ") == 2 and cells("ＡＢ") == 4  # half/fullwidth
    assert cells("e\u0301") == 1 and cells("a\u200bb") == 2  # a combining mark, a ZWSP
    assert fit("洞穴洞穴", 5) == "洞穴…" and cells(fit("洞穴洞穴", 5)) == 5
    assert fit("abc", 3) == "abc" and fit("abcd", 3) == "ab…"
    assert fit("e\u0301e\u0301e\u0301", 2) == "e\u0301…"  # the mark stays with its letter
    assert fit_left("/a/洞穴/x.jsonl", 11) == "…穴/x.jsonl"
    assert fit_left("/a/洞穴/x.jsonl", 10) == "…/x.jsonl"  # (no half of a wide one)
    # An emoji selector makes its letter two cells wide, as terminals draw "⚠️" and "❤️".
    assert cells("\u26a0\ufe0f") == 2 and cells("\u2764\ufe0f ok") == 5
    assert cells(fit("\u26a0\ufe0f" * 5, 5)) <= 5


def _on_terminal(args: list[str], columns: int) -> str:
    """What ``sess ARGS`` shows on a pseudo-terminal ``columns`` wide."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "SESS_STORE")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sesstree.cli import main; main()", "--no-pager", *args],
        stdin=slave, stdout=slave, stderr=slave, env={**env, "TERM": "xterm"}, close_fds=True)
    os.close(slave)
    out = drain(master)
    assert proc.wait(timeout=60) == 0, out
    return ANSI.sub("", out.decode().replace("\r\n", "\n"))


def test_lines_fit_the_terminal_in_screen_cells(tmp_path: Path) -> None:
    """A line of Chinese is twice as wide as its length: fitted by length it wrapped."""
    with open_store(tmp_path / "s") as store:
        main = store.session("main")
        main.add_message({"role": "user", "content": CHINESE})
        main.add_message({"role": "assistant", "content": JAPANESE})
        store.fork("洞穴", "main")
        store.session("洞穴").add_message({"role": "user", "content": "好的，" + CHINESE})
    store = ["--store", str(tmp_path / "s")]
    runs = [(columns, args) for columns in (60, 100) for args in (
        ["log"], ["log", "--oneline"], ["messages", "--oneline"], ["branch", "-v"],
        ["diff", "main", "洞穴"])]
    runs.append((100, ["log", "--graph", "--all"]))  # (its labels keep 30 cells at least)
    for columns, args in runs:
        shown = _on_terminal([*store, *args], columns)
        lines = [line for line in shown.splitlines() if line]
        assert lines, args
        for line in lines:
            assert cells(line) <= columns, (args, columns, cells(line), line)
        assert "请问" in shown or "洞窟" in shown, (args, shown)  # cut, not dropped


def _run_session(sess: Sess, name: str, title: str) -> None:
    sess.ok("append", name, "user/message", msg("user", title))
    with sess.store() as store:
        store.set_session_meta(name, {RUN_KEY: {"model": "qwen2.5-0.5b-instruct-q4_k_m",
                                                "base_url": "http://127.0.0.1:8080/v1"}})


def test_branch_verbose_gives_the_title_room_and_keeps_the_model(sess: Sess, tmp_path: Path
                                                                 ) -> None:
    title = "What is the weather like in Lisbon this weekend, and should I pack an umbrella?"
    _run_session(sess, "weather", title)
    seed = tmp_path / "projects" / "cave-of-echoes" / "quest-notes.jsonl"
    seed.parent.mkdir(parents=True)
    seed.write_text(msg("user", "Suppose the key does not fit the lock of the cave door") + "\n")
    sess.ok("import", str(seed), "--as", "quest-1")
    shown = {line.split()[0].lstrip("*"): line
             for line in sess.ok("branch", "-v", env={"COLUMNS": "100"}).splitlines()}
    weather = shown["weather"]
    assert len(weather) <= 100
    assert "What is the weather like" in weather  # 24 characters of the title at least
    assert "[run: qwen2.5-0.5b" in weather  # the model, not the end of its URL
    quest = shown["quest-1"]
    assert len(quest) <= 100 and "Suppose the key does" in quest
    assert "[seed: …" in quest and "notes.jsonl]" in quest  # a path keeps its end
    wide = sess.ok("branch", "-v", env={"COLUMNS": "220"})
    assert f"{title}  [run: qwen2.5-0.5b-instruct-q4_k_m at http://127.0.0.1:8080/v1]" in wide


# (A folder named like the words an import's reflog line puts after the path.)
@pytest.mark.parametrize("folder", ["", "how it grew", "x extends this session; y"])
def test_every_import_of_a_file_keeps_its_source(sess: Sess, tmp_path: Path,
                                                 folder: str) -> None:
    """The file's main line is held by one session (the one a re-import updates); a second
    import under another name takes it over, and the first still says where it came from."""
    (tmp_path / folder).mkdir(exist_ok=True)
    seed = tmp_path / folder / "quest-notes.jsonl"
    seed.write_text(msg("user", "Where is the key?") + "\n")
    sess.ok("import", str(seed))
    sess.ok("import", str(seed), "--as", "imported")
    sess.ok("import", str(seed), "--as", "again")
    rows = {r["name"]: r for r in sess.json("branch", "-v")}
    for name in ("quest-notes", "imported", "again"):
        assert rows[name]["source"] == f"seed: {seed.resolve()}", (name, rows[name])
        assert f"source  seed: {seed.resolve()}" in sess.ok("show", name)
    sess.ok("branch", "quest-notes", "copy")  # a fork was not imported
    sess.ok("branch", "-m", "imported", "renamed")  # a rename keeps the label
    rows = {r["name"]: r for r in sess.json("branch", "-v")}
    assert rows["copy"]["source"] is None
    assert rows["renamed"]["source"] == f"seed: {seed.resolve()}"
    sess.ok("branch", "-d", "renamed")
    sess.ok("append", "renamed", "user/message", msg("user", "by hand"))  # the name reused
    assert {r["name"]: r for r in sess.json("branch", "-v")}["renamed"]["source"] is None
    assert "up to date" in sess.ok("import", str(seed))  # the holder is still the holder


@pytest.mark.parametrize(("forks", "way"), [(0, "larger"), (40, "smaller")])
def test_stats_says_which_way_the_ratio_goes(sess: Sess, forks: int, way: str) -> None:
    """One short session takes more room in the store than as JSONL; forty sessions sharing
    its history take less (logical bytes count each session's path)."""
    lines = "".join(msg("user", f"{i} the innkeeper said the cave opens at dawn") + "\n"
                    for i in range(200))
    sess.ok("append", "main", "user/message", "-", input=lines)
    for k in range(forks):
        sess.ok("branch", f"fork-{k}")
    data = sess.json("stats")
    ratio = data["logical_bytes"] / data["physical_bytes"]
    line = sess.lines("stats")[6]
    assert line.startswith(f"ratio           {ratio:.1f}x  (JSONL bytes per byte on disk")
    assert f"the store is {max(ratio, 1 / ratio):.1f}x {way})" in line
    assert (ratio > 1) == (way == "smaller")


def test_stats_ratio_of_a_tiny_store_is_a_number(sess: Sess) -> None:
    """One short message in a store of fixed pages: far below 0.1, shown as what it is."""
    sess.ok("append", "user/message", msg("user", "hi"))
    data = sess.json("stats")
    ratio = data["logical_bytes"] / data["physical_bytes"]
    assert ratio < 0.05
    line = sess.lines("stats")[6]
    assert line.startswith(f"ratio           {ratio:.2g}x  (") and "0.0x" not in line, line
    assert f"the store is {1 / ratio:.1f}x larger)" in line


def test_no_store_found_names_the_store_beside(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """After the README's quest (a store in ./sessions), a plain command in that folder."""
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    line = s.fail("log")
    assert "no store found" in line and "sess init" in line and "SESS_STORE" in line
    assert "--store PATH" in line
    with open_store(tmp_path / "sessions") as store:
        store.session("quest-1").add_message({"role": "user", "content": "hi"})
    (tmp_path / "notes").mkdir()  # a folder that holds no store is not suggested
    (tmp_path / "notes" / "store.db").write_text("not a database")
    line = s.fail("log")
    assert "sessions/ here holds one: pass --store sessions" in line, line
    assert "SESS_STORE=sessions" in line and "sess init" in line and "notes" not in line
    assert "hi" in s.ok("--store", "sessions", "log", "quest-1")  # the hint works


def test_the_store_hint_passes_over_what_is_no_store(tmp_path: Path) -> None:
    """Looking for a store beside, the hint opens regular files only: a ``store.db`` that is
    a named pipe (reading it would wait for a writer for ever), a folder or a symlink loop is
    passed over, and the command still ends at once with its one line."""
    with open_store(tmp_path / "sessions") as store:
        store.session("quest-1").add_message({"role": "user", "content": "hi"})
    (tmp_path / "pipe").mkdir()
    os.mkfifo(tmp_path / "pipe" / "store.db")
    (tmp_path / "dir" / "store.db").mkdir(parents=True)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    env = {k: v for k, v in os.environ.items() if k != "SESS_STORE"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()", "log"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    line, = done.stderr.splitlines()
    assert "pass --store sessions" in line and "pipe" not in line and "loop" not in line, line
