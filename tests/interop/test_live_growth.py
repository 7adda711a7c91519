"""A transcript imported while its tool still writes it: every re-import fast-forwards.

Claude Code writes one model reply as several entries (one per content block) sharing
``message.id``, each appended as it streams. A nightly import can catch the file anywhere,
even in the middle of a line. Whatever the cut, the next import of the grown file must be a
fast-forward: no "rewritten" outcome, no false "was edited" reflog entry, no node left off
every session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sesstree import Store
from sesstree.interop import import_files

GROWING = ("Durban-Designer__vsla__raw_sessions__e80aa543-6eff-4cb5-91e0-6d4e8e7951e9.jsonl",
           "Durban-Designer__vsla__raw_sessions__069508a5-1193-487c-a9b5-a6f5f3ae4f98.jsonl")
BIG = "Durban-Designer__vsla__raw_sessions__f67ab274-e83b-41ac-ac85-77488d6b5c28.jsonl"


def _cuts(data: bytes, step: int) -> list[int]:
    """Byte offsets to cut at: after every ``step``-th line, and half-way into the line after."""
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    cuts: list[int] = []
    for n in range(0, len(ends), step):
        cuts.append(ends[n])
        if n + 1 < len(ends):
            cuts.append((ends[n] + ends[n + 1]) // 2)  # a line still being written
    return [*cuts, len(data)]


def _grow_and_import(store: Store, source: Path, live: Path, step: int,
                     format: str = "claude") -> None:
    data = source.read_bytes()
    for cut in _cuts(data, step):
        live.write_bytes(data[:cut])
        results = import_files(store, [live], format=format)
        outcomes = {r.outcome for r in results}
        # "empty": a pi file holding its header only, nothing to land yet
        assert outcomes <= {"created", "fast-forward", "up to date", "empty"}, (cut, results)
    reasons = [e.reason for e in store.reflog()]
    assert not any("edited" in r or "earlier point" in r for r in reasons), reasons
    reachable: set[str] = set()
    for s in store.sessions():
        reachable.update(store.chain(s.name).ids)
    assert store.backend.count_nodes() == len(reachable)  # nothing abandoned
    assert store.fsck() == []
    # and the whole file imported in one go lands on the very same nodes
    fresh_heads = {r.head for r in import_files(store, [source], format=format)}
    assert fresh_heads <= {s.head for s in store.sessions()}


@pytest.mark.parametrize("name", GROWING)
def test_claude_file_growing_mid_reply_fast_forwards(store: Store, samples: Path, tmp_path: Path,
                                                     name: str) -> None:
    _grow_and_import(store, samples / "claude-code" / name, tmp_path / name, step=1)


@pytest.mark.parametrize(("folder", "name", "format"), [
    ("pi", "kvsankar__agent-history__tests-fixtures-real_sessions-pi-session-01.REDACTED.jsonl",
     "pi"),
    ("codex", "kvsankar__agent-history__tests-fixtures-real_sessions-codex-session-01.REDACTED"
     ".jsonl", "codex"),
])
def test_pi_and_codex_files_growing_fast_forward(store: Store, samples: Path, tmp_path: Path,
                                                 folder: str, name: str, format: str) -> None:
    _grow_and_import(store, samples / folder / name, tmp_path / name, step=1, format=format)


@pytest.mark.stress
def test_big_pi_file_growing(store: Store, samples: Path, tmp_path: Path) -> None:
    name = "badlogic__pi-mono__test-fixtures-large-session.jsonl"
    _grow_and_import(store, samples / "pi" / name, tmp_path / name, step=5, format="pi")


@pytest.mark.stress
def test_big_claude_file_growing_line_by_line(store: Store, samples: Path,
                                              tmp_path: Path) -> None:
    _grow_and_import(store, samples / "claude-code" / BIG, tmp_path / BIG, step=1)


def test_a_reply_still_being_written_is_not_a_message_yet(store: Store, samples: Path,
                                                         tmp_path: Path) -> None:
    lines = (samples / "claude-code" / GROWING[0]).read_bytes().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    # line 6 is the first block of a reply whose second block is line 7
    live.write_bytes(b"".join(lines[:6]))
    result = import_files(store, [live], format="claude")[0]  # then the leading summaries
    assert store.chain(result.session).types[-3:] == [
        "claude/user", "user/message", "claude/assistant"]  # the block, but no message yet
    assert any(":6: " in p and "may still be being written" in p for p in result.problems)
    live.write_bytes(b"".join(lines[:7]))
    grown = import_files(store, [live], format="claude")[0]
    assert (grown.session, grown.outcome) == (result.session, "fast-forward")
    chain = store.chain(grown.session)
    assert chain.types[-3:] == ["claude/assistant", "claude/assistant", "assistant/message"]
    assert len(chain.datas[-1]["tool_calls"]) == 1 and chain.datas[-1]["content"]  # both blocks
