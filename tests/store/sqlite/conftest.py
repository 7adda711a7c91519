"""Fixtures of the SQLite engine's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from codec_kit import format4_long

from sesstree.store.sqlite import packing


@pytest.fixture
def loose_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers of this process pack no tail (neither inline nor at a pause or close): every
    row stays loose, one per node, as a tail shorter than PACK_MIN does, for the tests of
    what a loose row holds (its frame with the dictionary, its codec). ``repack``, and the
    packing an upgrade leaves pending, still pack (any tail, whatever its length).

    (Packer reads these module globals at each call: ``note``, ``after_commit``, ``at_pause``.)"""
    monkeypatch.setattr(packing, "PACK_AT", 10**9)
    monkeypatch.setattr(packing, "PACK_MIN", 10**9)


@pytest.fixture
def format4_rows(tmp_path: Path, loose_rows: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the long format-4 store (``codec_kit.format4_long``: rows that are zstd frames
    made with its dictionary, one per row, as only format 4 wrote them), for the tests of
    such frames. Opened here it is upgraded to format 5 and its history is left loose, to be
    packed later; in this process nothing packs it but ``repack``: no tail is packed
    (``loose_rows``), nor is the upgrade's pending packing run at a pause or close. (Giving
    it no time, UPGRADE_AT_PAUSE and UPGRADE_AT_CLOSE 0, is not enough: it packs one ref's
    tail before it looks at the clock, here ``bare``'s 1,000 rows at the first close.)"""
    monkeypatch.setattr(packing.Packer, "_pending", lambda self: None)
    return format4_long(tmp_path / "s4")
