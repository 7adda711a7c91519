"""Fixtures of the SQLite engine's own tests."""

from __future__ import annotations

import pytest

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
