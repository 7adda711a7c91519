"""Import provenance: a re-import finds its earlier import wherever it landed, and only there."""

from __future__ import annotations

from pathlib import Path

from sesstree import open_store


def test_list_meta_reads_one_prefix_on_every_backend(tmp_path: Path) -> None:
    for store in (open_store(":memory:"), open_store(tmp_path / "s")):
        with store:
            b = store.backend
            b.set_meta("session:a", "1")
            b.set_meta("session:b_%", "2")
            b.set_meta("sessionx", "3")
            b.set_meta("HEAD", "ref: sessions/a")
            assert b.list_meta("session:") == {"session:a": "1", "session:b_%": "2"}
            assert b.list_meta("nothing:") == {}
