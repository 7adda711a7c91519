"""The README's example output of ``sess show`` is what the tool prints after the quest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_show_output_is_what_sess_prints(tmp_path: Path) -> None:
    text = README.read_text()
    command = "sess --store sessions show\nquest-2"
    assert command in text
    block = re.search(r"show\nquest-2` begins:\n\n```text\n(.*?)```", text, re.S)
    assert block is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSTREE_", "SESS_"))}
    subprocess.run([sys.executable, str(README.parent / "examples" / "quest.py")], cwd=tmp_path,
                   env=env, capture_output=True, text=True, timeout=60, check=True)
    shown = subprocess.run(
        [sys.executable, "-c", "from sesstree.cli import main; main()", "--store", "sessions",
         "show", "quest-2"], cwd=tmp_path, env={**env, "COLUMNS": "100"}, capture_output=True,
        text=True, timeout=60, check=True).stdout
    expected = block.group(1)
    assert shown.startswith(expected), (shown[: len(expected) + 200], expected)
