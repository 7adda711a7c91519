"""Hostile structure in a transcript: cycles, long out-of-order chains, deep nesting, odd values.

Each is reported with the file and line and the import goes on (tolerant formats), or is one
InputError naming the file and line (strict formats); never another exception.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sesstree import InputError, Store
from sesstree.interop import import_files


def _claude(uuid: str, parent: str | None, text: str, kind: str = "user") -> dict[str, Any]:
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "h1",
            "message": {"role": kind, "content": text}}


def _write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    return path


# Guards a past bug: RuntimeError "dictionary changed size during iteration".
def test_parent_cycle_and_self_parent_become_roots(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path / "h1.jsonl", [
        _claude("a", "b", "one"),
        _claude("b", "a", "two"),
        _claude("c", "c", "three"),
        _claude("d", "c", "four"),
    ])
    results = import_files(store, [path])
    problems = results[0].problems
    assert any(f"{path}:1:" in p and "cycle" in p for p in problems), problems
    assert any(f"{path}:3:" in p and "cycle" in p for p in problems), problems
    texts = sorted(m["content"] for r in results for m in store.messages(r.session))
    assert texts == ["four", "one", "three", "two"]


# Guards a past bug: RecursionError for a chain of more than about 1,000 out-of-order records.
def test_long_chain_in_reverse_order(store: Store, tmp_path: Path) -> None:
    n = 3000
    records = [_claude(f"u{i}", f"u{i - 1}" if i else None, f"m{i}") for i in range(n)]
    path = _write(tmp_path / "h1.jsonl", list(reversed(records)))
    results = import_files(store, [path])
    messages = store.messages(results[0].session)
    assert [m["content"] for m in messages] == [f"m{i}" for i in range(n)]


@pytest.mark.parametrize("depth", [600, 5000, 200_000])
def test_deeply_nested_line_is_reported_and_skipped(store: Store, tmp_path: Path,
                                                    depth: int) -> None:
    deep = '{"type": "user", "uuid": "x", "deep": ' + "[" * depth + "]" * depth + "}\n"
    path = _write(tmp_path / "h1.jsonl", [_claude("a", None, "one"), deep,
                                          _claude("b", "a", "two")])
    results = import_files(store, [path])
    assert any(f"{path}:2:" in p and "nested" in p for p in results[0].problems), results
    assert [m["content"] for m in store.messages(results[0].session)] == ["one", "two"]


def test_values_a_store_cannot_hold_are_reported_and_skipped(store: Store,
                                                             tmp_path: Path) -> None:
    path = _write(tmp_path / "h1.jsonl", [
        _claude("a", None, "one"),
        # JSON can read it, the store cannot hold it (more than 500 levels)
        '{"type": "user", "uuid": "b", "parentUuid": "a", "x": ' + "[" * 600 + "]" * 600 + "}\n",
        _claude("c", "b", "two"),
        '{"type": "user", "uuid": "d", "parentUuid": "c", "n": ' + "9" * 40 + "}\n",
        '{"type": "user", "uuid": "e", "parentUuid": "c", "n": 1e999}\n',
        _claude("f", "c", "three"),
    ])
    results = import_files(store, [path])
    problems = results[0].problems
    assert any(f"{path}:2:" in p and "500 levels" in p for p in problems), problems
    assert any(f"{path}:4:" in p and "ints" in p for p in problems), problems
    assert any(f"{path}:5:" in p and "out of range" in p for p in problems), problems
    # a skipped record is transparent: its children keep their place on the path
    assert [m["content"] for m in store.messages(results[0].session)] == ["one", "two", "three"]
    assert len(results) == 1


def test_codex_replacement_history_of_the_wrong_type(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path / "rollout.jsonl", [
        {"type": "session_meta", "payload": {"id": "t1"}},
        {"type": "compacted", "payload": {"message": "sum", "replacement_history": 5}},
    ])
    [result] = import_files(store, [path])
    assert result.outcome == "created"


@pytest.mark.parametrize(("text", "line"), [
    ('{"role": "user", "content": "a"}\n' + '{"role": "user", "x": ' + "[" * 5000 + "]" * 5000
     + "}\n", 2),
    ('{"role": "user", "content": "a"}\n{"role": "user", "content": ' + "7" * 50 + "}\n", 2),
    ('{"role": "user", "content": "a"}\n{"role": "user", "content": ' + "[" * 700 + "]" * 700
     + "}\n", 2),
])
def test_strict_seed_file_names_the_line(store: Store, tmp_path: Path, text: str,
                                         line: int) -> None:
    path = tmp_path / "quest-1.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"quest-1.jsonl:{line}:"):
        import_files(store, [path], format="seed")
    assert store.sessions() == [] and store.backend.count_nodes() == 0


def test_openai_json_too_deep_or_too_big(store: Store, tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('[{"role": "user", "content": ' + "[" * 5000 + "]" * 5000 + "}]")
    with pytest.raises(InputError, match=r"deep\.json"):
        import_files(store, [deep], format="openai")
    big = tmp_path / "big.json"
    big.write_text('[{"role": "user", "content": "a"}, {"role": "user", "n": ' + "9" * 40 + "}]")
    with pytest.raises(InputError, match=r"big\.json: message 1"):
        import_files(store, [big])
    assert store.sessions() == []
