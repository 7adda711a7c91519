"""fsck while others write: one snapshot for the whole check, so no false alarms.

A writer process appends (and so creates nodes and moves refs) while fsck runs again and
again on a sound store; every run must find nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import open_store

CHILD = HELPERS / "store_child.py"


def fsck_during_writes(folder: Path, runs: int) -> int:
    with open_store(folder) as store:
        q = store.session("base")
        with store.batch():
            for i in range(1000):
                q.add_message({"role": "user", "content": f"base {i}"})
    writer = subprocess.Popen(
        [sys.executable, str(CHILD), "write", str(folder), "w", "1000000", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    alarms: list[list[str]] = []
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().startswith("ACK")  # it is writing
        with open_store(folder) as store:
            for _ in range(runs):
                faults = store.fsck()
                if faults:
                    alarms.append(faults)
    finally:
        writer.kill()
        writer.communicate(timeout=30)
    assert alarms == [], f"{len(alarms)} of {runs} runs raised false alarms: {alarms[0][:3]}"
    return runs


def test_fsck_while_a_writer_appends_raises_no_false_alarm(tmp_path: Path) -> None:
    fsck_during_writes(tmp_path / "s", runs=8)


@pytest.mark.stress
def test_fsck_while_a_writer_appends_many_runs(tmp_path: Path) -> None:
    fsck_during_writes(tmp_path / "s", runs=200)
