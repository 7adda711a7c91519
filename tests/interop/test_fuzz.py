"""Fuzzing the importers with mutants of the real sample transcripts.

Every mutant (lines truncated, bytes flipped, lines deleted, duplicated or reordered, deep
nesting, parent cycles, huge numbers, values of the wrong type, garbage) is imported into a
store that already holds sessions. Each import either succeeds or raises InputError naming
the file (and the line where there is one); never another exception. Nothing already stored
changes: every session present before an import points where it pointed.

A few dozen mutants run by default; several hundred under the ``stress`` marker.
"""

from __future__ import annotations

import collections
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_kit import Sess

from sesstree import InputError, Store
from sesstree.interop import import_files

# Real files, small enough to import hundreds of times; the large ones by their first lines.
BASES = {
    "claude-code": [
        ("Durban-Designer__vsla__raw_sessions__9b92ce83-1981-4cdc-9f5d-7f66c4b10389.jsonl", 0),
        ("Durban-Designer__vsla__raw_sessions__c001d2c0-fa59-4098-9d96-e46afcfa1170.jsonl", 0),
        ("Durban-Designer__vsla__raw_sessions__f6108699-47cc-4b21-8ca6-3223992990b3.jsonl", 0),
        ("Durban-Designer__vsla__raw_sessions__f67ab274-e83b-41ac-ac85-77488d6b5c28.jsonl", 60),
        ("kvsankar__agent-history__tests-fixtures-real_sessions-claude-session-01.REDACTED"
         ".jsonl", 0),
    ],
    "pi": [
        ("kvsankar__agent-history__tests-fixtures-real_sessions-pi-session-01.REDACTED.jsonl", 0),
        ("badlogic__pi-mono__test-fixtures-before-compaction.jsonl", 40),
        ("badlogic__pi-mono__test-fixtures-large-session.jsonl", 40),
    ],
    "codex": [
        ("kvsankar__agent-history__tests-fixtures-real_sessions-codex-session-01.REDACTED"
         ".jsonl", 0),
    ],
    "openai-messages": [
        ("SWE-agent__mini-swe-agent__pr854__astropy__astropy-12907.messages.DERIVED.jsonl", 20),
    ],
    "mini-swe-agent": [("SWE-agent__mini-swe-agent__tests-test_data__github_issue.traj.json", 0)],
}

_ODD_VALUES: list[Any] = [None, 0, -1, 1.5, "", "x", [], [1, "a"], {}, {"a": 1}, True,
                          2**63, -(2**63) - 1]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _records(lines: list[bytes]) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for i, line in enumerate(lines):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # a line an earlier mutation broke
            continue
        if isinstance(value, dict):
            out.append((i, value))
    return out


def _set_path(record: dict[str, Any], rng: random.Random, value: Any) -> None:
    """Replace one value somewhere in ``record`` (top level or one level down)."""
    target = record
    nested = [k for k, v in record.items() if isinstance(v, dict) and v]
    if nested and rng.random() < 0.5:
        target = record[rng.choice(nested)]
    keys = list(target) or ["extra"]
    target[rng.choice(keys)] = value


def _mutate_records(lines: list[bytes], rng: random.Random,
                    change: Callable[[dict[str, Any], list[dict[str, Any]]], str | None]) -> None:
    records = _records(lines)
    if not records:
        return
    i, record = rng.choice(records)
    raw = change(record, [r for _, r in records])
    lines[i] = (raw if raw is not None else json.dumps(record)).encode()


def _wrong_type(record: dict[str, Any], _: list[dict[str, Any]], rng: random.Random) -> None:
    _set_path(record, rng, rng.choice(_ODD_VALUES))


def _cycle(record: dict[str, Any], all_records: list[dict[str, Any]], rng: random.Random) -> None:
    for key, parent in (("uuid", "parentUuid"), ("id", "parentId")):
        if isinstance(record.get(key), str):
            others = [r[key] for r in all_records if isinstance(r.get(key), str)]
            record[parent] = rng.choice([record[key], *others])  # itself, or any other
            return
    record["parentUuid"] = record.get("uuid", "self")


def _deep_value(record: dict[str, Any], rng: random.Random) -> str:
    depth = rng.choice([400, 600, 1200, 50_000])
    body = json.dumps(record)
    return body[:-1] + (", " if len(body) > 2 else "") + f'"deep": {_deep(depth)}}}'


def _huge(record: dict[str, Any], rng: random.Random) -> str:
    number = rng.choice(["9" * 40, "-" + "9" * 30, "1e999", "-1e999", "1" + "0" * 5000])
    body = json.dumps(record)
    return body[:-1] + (", " if len(body) > 2 else "") + f'"n": {number}}}'


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """One mutant of ``data`` and the names of the mutations applied."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    applied: list[str] = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(["truncate", "flip", "delete", "duplicate", "reorder", "reverse",
                           "deep", "cycle", "huge", "wrong-type", "garbage", "crlf", "empty",
                           "not-object"])
        applied.append(kind)
        n = len(lines)
        i = rng.randrange(n) if n else 0
        if kind == "truncate" and n:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
            if rng.random() < 0.5:
                del lines[i + 1:]  # a file cut mid-write
        elif kind == "flip" and n:
            blob = bytearray(b"\n".join(lines))
            for _ in range(rng.randint(1, 6)):
                if blob:
                    blob[rng.randrange(len(blob))] ^= rng.randint(1, 255)
            lines = bytes(blob).split(b"\n")
        elif kind == "delete" and n:
            del lines[i]
        elif kind == "duplicate" and n:
            lines.insert(rng.randrange(n + 1), lines[i])
        elif kind == "reorder" and n > 1:
            j = rng.randrange(n)
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "reverse":
            lines.reverse()
        elif kind == "deep":
            _mutate_records(lines, rng, lambda r, _: _deep_value(r, rng))
        elif kind == "cycle":
            _mutate_records(lines, rng, lambda r, a: _cycle(r, a, rng))
        elif kind == "huge":
            _mutate_records(lines, rng, lambda r, _: _huge(r, rng))
        elif kind == "wrong-type":
            _mutate_records(lines, rng, lambda r, a: _wrong_type(r, a, rng))
        elif kind == "garbage":
            lines.insert(i, bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))))
        elif kind == "crlf":
            lines = [line + b"\r" for line in lines]
        elif kind == "empty":
            lines = [] if rng.random() < 0.5 else [b"", b"  "]
        elif kind == "not-object":
            lines.insert(i, rng.choice([b"[]", b"null", b"42", b'"text"', b"[1, {}]"]))
    return b"\n".join(lines) + (b"\n" if lines else b""), applied


def _bases(samples: Path) -> list[tuple[str, bytes]]:
    out = []
    for folder, files in BASES.items():
        for name, keep in files:
            data = (samples / folder / name).read_bytes()
            if keep:
                data = b"".join(data.splitlines(keepends=True)[:keep])
            out.append((name, data))
    return out


def run_campaign(store: Store, samples: Path, tmp: Path, mutants: int,
                 seed: int) -> collections.Counter[str]:
    """Import ``mutants`` mutants; returns how many ended how. Asserts the promises."""
    rng = random.Random(seed)
    bases = _bases(samples)
    # What is stored before: the real files and a hand-made session taking one of their names
    store.session("kvsankar__agent-history__tests-fixtures-real_sessions-claude-session-01."
                  "REDACTED").add_message({"role": "user", "content": "mine"})
    originals = tmp / "originals"
    originals.mkdir()
    for name, data in bases:
        (originals / name).write_bytes(data)
    import_files(store, [originals], recursive=True)
    outcomes: collections.Counter[str] = collections.Counter()
    for n in range(mutants):
        name, data = bases[n % len(bases)]
        mutant, applied = mutate(data, rng)
        # Mostly a new file; every fifth, the imported original edited in place (its own
        # sessions may then move, the old head kept in the reflog).
        in_place = n % 5 == 4
        path = originals / name if in_place else tmp / f"m{n}" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(mutant)
        before = {s.name: s.head for s in store.sessions()}
        own: set[str] = set()
        try:
            results = import_files(store, [path])
        except InputError as exc:
            assert str(path) in str(exc) or str(path.resolve()) in str(exc), (applied, exc)
            outcomes["InputError"] += 1
        except Exception as exc:  # the promise under test: no other exception type
            pytest.fail(f"mutant {n} of {name} ({', '.join(applied)}): "
                        f"{type(exc).__name__}: {exc}")
        else:
            for r in results:
                outcomes[r.outcome] += 1
            own = {r.session for r in results if in_place}
        after = {s.name: s.head for s in store.sessions()}
        changed = {k for k, v in before.items() if after.get(k) != v}
        assert changed <= own, (n, applied, changed)
        for name_ in changed:  # nothing lost: the previous head is in the reflog
            assert store.reflog(name_)[-1].old == before[name_], (n, applied, name_)
        if in_place:
            path.write_bytes(data)  # back to the original for the next round
    assert store.fsck() == []
    return outcomes


def test_mutants_of_real_transcripts(store: Store, samples: Path, tmp_path: Path) -> None:
    outcomes = run_campaign(store, samples, tmp_path, mutants=40, seed=1)
    assert sum(outcomes.values()) >= 40


@pytest.mark.stress
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_many_mutants_of_real_transcripts(store: Store, samples: Path, tmp_path: Path,
                                          seed: int) -> None:
    outcomes = run_campaign(store, samples, tmp_path, mutants=300, seed=seed)
    print(f"seed {seed}: 300 mutants: {dict(outcomes)}")


def test_mutants_through_the_command_line(sess: Sess, samples: Path, tmp_path: Path) -> None:
    """What the user sees: every mutant prints its results and warnings, or one error line."""
    rng = random.Random(7)
    bases = _bases(samples)
    for n in range(24):
        name, data = bases[n % len(bases)]
        mutant, applied = mutate(data, rng)
        path = tmp_path / f"m{n}" / name
        path.parent.mkdir()
        path.write_bytes(mutant)
        for args in (("import", str(path)), ("import", str(path), "--json")):
            result = sess(*args)
            assert isinstance(result.exception, (SystemExit, type(None))), (applied, result)
            assert "Traceback" not in result.output
            if result.exit_code:
                assert len(result.stderr.strip().splitlines()) == 1, (applied, result.stderr)
            elif "--json" in args:
                assert isinstance(json.loads(result.stdout), list)
