"""``sess import`` and ``sess export`` from the command line: what they say and refuse."""

from __future__ import annotations

import json
from pathlib import Path

from cli_kit import Sess

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
