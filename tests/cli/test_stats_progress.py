"""The first ``stats`` of a large store (which fills its index of path sizes, reading each row
once) reports its progress; a usual ``stats``, with little to catch up on, reports nothing."""

from __future__ import annotations

from pathlib import Path

from sesstree import open_store


def test_the_first_stats_of_a_large_store_reports_progress(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        session = store.session("long")
        with store.batch():
            for i in range(4500):  # more than two slices of rows
                session.add_message({"role": "user", "content": f"m {i}"})
    with open_store(tmp_path / "s") as store:
        calls: list[tuple[int, int]] = []
        first = store.stats(progress=lambda done, total: calls.append((done, total)))
        assert calls and calls[-1][0] == calls[-1][1] >= 4500
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)  # it only goes forward
        again: list[tuple[int, int]] = []
        second = store.stats(progress=lambda done, total: again.append((done, total)))
        assert again == []  # nothing to catch up on: no line drawn
        assert second.logical_bytes == first.logical_bytes > 0
        store.session("long").add_message({"role": "user", "content": "one more"})
        assert store.stats(progress=lambda d, t: again.append((d, t))).nodes == 4501
        assert again == []
