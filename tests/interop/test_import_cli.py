"""``sess import`` and ``sess export`` from the command line: what they say and refuse."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

from cli_kit import Sess

from sesstree import open_store

MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def _seed(path: Path, messages: list[dict[str, str]] = MESSAGES) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


# Guards a past bug: an empty folder printed nothing and exited 0.
def test_import_of_a_folder_with_nothing_to_import_says_so(sess: Sess, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    sess.fail("import", "-r", "empty", needles=("empty", "nothing to import",
                                                "no .jsonl or .json file"))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "notes.json").write_text('{"hello": 1}')
    (tmp_path / "odd" / "blank.jsonl").write_text("\n")
    sess.fail("import", "-r", "odd", needles=("nothing to import", "none a transcript"))
    assert sess.json("branch") == []


# Guards a past bug: an empty file was "format not recognised".
def test_import_of_an_empty_file_says_empty(sess: Sess, tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_text("")
    sess.fail("import", "e.jsonl", needles=("e.jsonl", "empty file"))
    (tmp_path / "w.jsonl").write_text("\n \n")
    sess.fail("import", "w.jsonl", "--format", "claude", needles=("w.jsonl", "empty file"))


def test_import_as_refuses_another_history_unless_forced(sess: Sess, tmp_path: Path) -> None:
    a = _seed(tmp_path / "a.jsonl")
    b = _seed(tmp_path / "b.jsonl", [{"role": "user", "content": "other"}])
    sess.ok("import", str(a), "--as", "quest")
    sess.fail("import", str(b), "--as", "quest", needles=("'quest' holds the import of",
                                                          "--force"))
    out = sess.ok("import", str(b), "--as", "quest", "--force")
    assert out.startswith("quest: replaced, ")
    reflog = sess.json("reflog", "quest")
    assert "replaced this session's history (--force)" in json.dumps(reflog)


def _imported(sess: Sess, tmp_path: Path) -> Path:
    src = _seed(tmp_path / "in" / "quest-1.jsonl")
    sess.ok("import", str(src))
    return src


# Guards a past bug: `-o -` wrote files named `-` and `-.meta.json`.
def test_export_to_standard_output(sess: Sess, tmp_path: Path) -> None:
    _imported(sess, tmp_path)
    result = sess("export", "quest-1", "-o", "-")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout_bytes.splitlines()] == MESSAGES
    openai = sess("export", "quest-1", "-o", "-", "--format", "openai")
    assert json.loads(openai.stdout_bytes) == MESSAGES
    assert not (tmp_path / "-").exists() and not (tmp_path / "-.meta.json").exists()


# Guards a past bug: export followed a dangling link and created its target, and wrote
# through a link with --force.
def test_export_never_writes_through_a_symbolic_link(sess: Sess, tmp_path: Path) -> None:
    _imported(sess, tmp_path)
    target = tmp_path / "elsewhere" / "victim.jsonl"
    target.parent.mkdir()
    (tmp_path / "link.jsonl").symlink_to(target)  # dangling
    sess.fail("export", "quest-1", "-o", "link.jsonl", needles=("link.jsonl",
                                                                "symbolic link"))
    sess.fail("export", "quest-1", "-o", "link.jsonl", "--force",
              needles=("symbolic link",))
    assert not target.exists()
    (tmp_path / "quest-1.jsonl").symlink_to(target)  # the default name
    sess.fail("export", "quest-1", needles=("quest-1.jsonl", "symbolic link"))
    assert not target.exists()
    target.write_text("precious\n")
    sess.fail("export", "quest-1", "-o", "link.jsonl", "--force", needles=("symbolic link",))
    assert target.read_text() == "precious\n"
    assert (tmp_path / "link.jsonl").is_symlink()


def test_forced_export_replaces_atomically(sess: Sess, tmp_path: Path) -> None:
    _imported(sess, tmp_path)
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    out.chmod(0o640)
    sess.ok("export", "quest-1", "-o", str(out), "--force")
    assert [json.loads(line) for line in out.read_text().splitlines()] == MESSAGES
    assert out.stat().st_mode & 0o777 == 0o640  # the replaced file's mode is kept
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


def _limited(limit: int) -> None:
    # Files may not grow past `limit` bytes: a write past it fails (EFBIG), as on a full disk.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


# Guards a past bug: a failed --force export left the old file truncated.
def test_a_failed_forced_export_leaves_the_old_file_whole(tmp_path: Path) -> None:
    store_dir = tmp_path / "s"
    with open_store(store_dir) as store:
        store.session("big").add_message({"role": "user", "content": "x" * 300_000})
    out = tmp_path / "big.jsonl"
    out.write_text("old\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = subprocess.run(
        [sys.executable, "-c", "from sesstree.cli import main; main()", "--store",
         str(store_dir), "export", "big", "-o", str(out), "--force"],
        capture_output=True, text=True, preexec_fn=lambda: _limited(100_000), timeout=60,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "big.jsonl" in result.stderr
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporary file left


def test_nightly_import_follows_renames_and_deletes(sess: Sess, tmp_path: Path) -> None:
    folder = tmp_path / "transcripts"
    _seed(folder / "quest-1.jsonl")
    _seed(folder / "quest-2.jsonl", [{"role": "user", "content": "other"}])
    sess.ok("import", "-r", str(folder))
    sess.ok("branch", "-m", "quest-1", "renamed")
    sess.ok("branch", "-d", "quest-2")
    with sess.store() as store:  # a new, unrelated session takes the deleted one's name
        store.session("quest-2").add_message({"role": "user", "content": "by hand"})
    out = sess.ok("import", "-r", str(folder))
    assert "renamed: up to date" in out
    assert "quest-2-2: created" in out  # not "rewritten" over the unrelated session
    names = sorted(b["name"] for b in sess.json("branch"))
    assert names == ["quest-2", "quest-2-2", "renamed"]
    assert sess.ok("import", "-r", str(folder)).count("up to date") == 2
    assert sorted(b["name"] for b in sess.json("branch")) == names


def test_warnings_quoting_the_file_are_one_printable_line_each(sess: Sess, tmp_path: Path) -> None:
    path = tmp_path / "h1.jsonl"
    path.write_text(json.dumps({"type": "user", "uuid": "a", "parentUuid": "x\n\x1b[31mred",
                                "sessionId": "h1",
                                "message": {"role": "user", "content": "hi"}}) + "\n")
    result = sess("import", str(path))
    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    assert "\x1b" not in warning and "\\x1b[31mred" in warning and "is not in this file" in warning


def test_json_report_of_a_file_quoting_lone_surrogates(sess: Sess, tmp_path: Path) -> None:
    path = tmp_path / "h1.jsonl"
    record = ('{"type": "user", "uuid": "%s", "parentUuid": %s, "sessionId": "h1", '
              '"message": {"role": "user", "content": "hi"}}')
    # msgspec refuses a lone surrogate; the recovery of glued objects (Python's json) takes it
    path.write_text(record % ("a", "null") + "\n" + record % ("b", '"a"')
                    + record % ("c", '"\\ud800"') + "\n")
    [report] = sess.json("import", str(path))
    assert report["outcome"] == "created"
    assert any("\\ud800" in p and "is not in this file" in p for p in report["problems"])
    assert "\\ud800" in sess("import", str(path)).stderr  # and the warning line, escaped


def test_a_folder_import_says_what_it_skipped(sess: Sess, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    _seed(folder / "quest-1.jsonl")
    (folder / "blank.jsonl").write_text("")
    (folder / "settings.json").write_text('{"theme": "dark"}')
    result = sess("import", "-r", str(folder))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("quest-1: created")
    warnings = result.stderr.splitlines()
    assert any("blank.jsonl: empty file; skipped" in w for w in warnings), warnings
    assert any("settings.json: format not recognised; skipped" in w for w in warnings), warnings
    outcomes = sorted(r["outcome"] for r in sess.json("import", "-r", str(folder)))
    assert outcomes == ["skipped", "skipped", "up to date"]


def test_concurrent_imports_of_one_folder_land_each_session_once(tmp_path: Path,
                                                                 samples: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    for f in sorted((samples / "claude-code").iterdir())[:4]:
        (folder / f.name).write_bytes(f.read_bytes())
    store_dir = tmp_path / "s"
    open_store(store_dir).close()
    run = [sys.executable, "-c", "from sesstree.cli import main; main()", "--store",
           str(store_dir), "import", "-r", str(folder), "--json"]
    procs = [subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    landed = [[r["session"] for r in json.loads(out)] for out, _ in outputs]
    assert landed[0] == landed[1] == landed[2]
    with open_store(store_dir) as store:
        assert sorted(s.name for s in store.sessions()) == sorted(landed[0])
        assert store.fsck() == []
