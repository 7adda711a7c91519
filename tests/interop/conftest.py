"""Shared fixtures of the importer tests: a real SQLite store, the fixtures and the samples."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sesstree import Store, open_store
from sesstree.interop import claude

DATA = Path(__file__).parent / "data"
# Real files of other tools, kept in the repository with their licences (samples/SOURCES.md).
SAMPLES = Path(__file__).parent / "samples"


@pytest.fixture(autouse=True)
def every_claude_file_may_be_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a Claude file's last reply may still be streaming depends on how recently the
    file was written; the samples' times differ between machines (CI lays them anew), so
    tests take every file as recent unless they set a time themselves."""
    monkeypatch.setattr(claude, "LIVE_WINDOW", float("inf"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "s")
    yield s
    s.close()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A writable copy of the hand-made fixtures (tests grow and edit them)."""
    return Path(shutil.copytree(DATA, tmp_path / "data"))


@pytest.fixture
def samples() -> Path:
    """The real sample files (tests/interop/samples), part of every clone."""
    return SAMPLES
