"""The README's Python example runs as written (a past version of it raised)."""

from __future__ import annotations

import re
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
