"""Claude Code transcripts for the Claude Agent SDK adapter's tests, and how `sess import` reads them."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

INTEROP = Path(__file__).resolve().parents[1] / "interop"
#: Transcripts with a tree (branches, a dangling parent, sidechains), a compaction, and real
#: Claude Code sessions (tool calls, split replies, summaries, queue operations).
TRANSCRIPTS = [
    INTEROP / "data" / "claude_tree.jsonl",
    INTEROP / "data" / "claude_compact.jsonl",
    *sorted((INTEROP / "samples" / "claude-code").glob("*.jsonl"))[:5],
]


def lines_of(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a transcript."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def session_id_of(lines: list[dict[str, Any]], path: Path) -> str:
    """The session id ``sess import`` reads from a transcript: its file name's if the lines
    carry it, else the most common."""
    ids = collections.Counter(d["sessionId"] for d in lines if isinstance(d.get("sessionId"), str))
    stem = path.name.removesuffix(".jsonl")
    if stem in ids:
        return stem
    return ids.most_common(1)[0][0] if ids else stem
