"""The README's Python example runs as written (a past version of it raised)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_store_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    names: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), names)
    store = names["store"]
    quest, west = names["quest"], names["west"]
    assert len(quest) == 1 and len(west) == 3  # type: ignore[arg-type]
    assert [m["role"] for m in west.messages()] == ["user", "assistant", "tool"]  # type: ignore[attr-defined]
    store.close()  # type: ignore[attr-defined]


def _sess(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()", *args],
                          cwd=root, capture_output=True, text=True, timeout=60)


def test_the_main_job_shows_a_fork_and_a_usable_head(tmp_path: Path) -> None:
    # Guards a past bug: the graph after the quest was one straight column (quest-1 never
    # moved after the fork) and HEAD was left on an empty `main`, so `sess log` failed.
    root = README.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSTREE_")}
    subprocess.run([sys.executable, str(root / "examples" / "quest.py")], cwd=tmp_path, env=env,
                   capture_output=True, text=True, timeout=60, check=True)
    main_job = re.search(r"```sh\n(.*?)\n```", README.read_text(), re.S)
    assert main_job is not None and "log quest-2" in main_job.group(1)
    assert _sess(tmp_path, "--store", "sessions", "log", "quest-2").returncode == 0
    graph = _sess(tmp_path, "--store", "sessions", "log", "--graph", "--all")
    assert graph.returncode == 0, graph.stderr
    lines = graph.stdout.splitlines()
    assert any(line.startswith("|/") for line in lines), graph.stdout  # the fork point
    assert any("(quest-2)" in line for line in lines)
    assert any("(HEAD -> quest-1)" in line for line in lines)
    log = _sess(tmp_path, "--store", "sessions", "log")
    assert log.returncode == 0 and "HEAD -> quest-1" in log.stdout, log.stderr
