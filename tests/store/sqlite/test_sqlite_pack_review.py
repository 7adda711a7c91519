"""Packs of a format-5 SQLite store where a review found them wrong: an append whose inline
packing fails after its commit."""

from __future__ import annotations

import random
from pathlib import Path

from sesstree import open_store

LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def test_an_append_whose_packing_fails_after_its_commit_is_not_reported_as_failed(
    tmp_path: Path,
) -> None:
    # The 256th append commits, then packs its tail in a transaction of its own; a disk too
    # full for the pack (its pages are new ones) must not make the committed append raise
    # "nothing was written": the caller would write it again.
    rng = random.Random(1)
    messages = [{"role": "user", "content": f"{i} " + "".join(rng.choices(LETTERS, k=500))}
                for i in range(256)]
    with open_store(tmp_path) as store:
        session = store.session("a")
        for m in messages[:255]:
            session.add_message(m)
        db = store.backend._db  # type: ignore[attr-defined]
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        db.execute(f"PRAGMA max_page_count={pages + 8}")  # room for an append, not a pack
        session.add_message(messages[255])
        db.execute("PRAGMA max_page_count=1073741823")
        assert store.messages("a") == messages
    with open_store(tmp_path, create=False) as store:
        assert store.messages("a") == messages
        assert store.fsck() == []
