"""A page of a long reflog is read as a page: ``sess reflog -n``, the web view's reflog and
the timings of a conversation page read the moves they show, not every move of the session."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sesstree import Store, open_store
from sesstree.cli import cli
from sesstree.repo.scan import reflog_page, reflog_times


def grow(store: Store, name: str, moves: int) -> list[str]:
    # A handle per append: one handle's appends would be one run, logged as one entry.
    return [store.session(name).add_message({"role": "user", "content": f"{name} {i}"}).id
            for i in range(moves)]


def test_pages_and_times_agree_with_the_whole_log_on_every_backend(store: Store) -> None:
    ids = grow(store, "a", 30)
    grow(store, "b", 5)  # another ref's moves interleave
    store.reset("a", ids[9], reason="rewind")  # a move back to a node it had reached before
    ids += grow(store, "a", 3)
    whole = store.backend.reflog("sessions/a")
    newest_first = whole[::-1]
    for limit, offset in [(1, 0), (7, 0), (7, 7), (10, 30), (100, 0), (5, 40)]:
        page, total = reflog_page(store.backend, "sessions/a", limit, offset)
        assert total == len(whole)
        assert page == newest_first[offset:offset + limit]
    assert store.reflog_page("a", 3) == (newest_first[:3], len(whole))
    assert reflog_page(store.backend, "sessions/nobody", 5) == ([], 0)
    wanted = [ids[0], ids[9], ids[-1], "0" * 64]
    expect = {e.new: e.time for e in whole if e.new in wanted}  # the newest move wins
    assert reflog_times(store.backend, "sessions/a", wanted) == expect
    assert reflog_times(store.backend, "sessions/b", wanted) == {}


def test_a_page_never_reads_the_whole_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.web.views import Views

    with open_store(tmp_path / "s") as store:
        grow(store, "long", 300)
        expected = store.reflog("long")[::-1][:5]

        def whole(*args: object, **kw: object) -> None:
            raise AssertionError("the whole reflog was read")

        monkeypatch.setattr(type(store.backend), "reflog", whole)
        views = Views(store)
        got = views.reflog("long", 0, 5)
        assert [e["new"] for e in got["entries"]] == [e.new for e in expected]
        assert got["total"] == 300 and got["more"]
        chat = views.session("long", None, 50)
        assert chat["items"]  # the conversation page's timings come from the index too
        result = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "reflog", "-n", "2",
                                          "long"])
        assert result.exit_code == 0, result.output
        assert len(result.output.splitlines()) == 2 and "long@{1}" in result.output


def test_a_negative_page_is_refused_the_same_on_every_backend(store: Store) -> None:
    grow(store, "a", 3)
    for limit, offset in [(-1, 0), (2, -1)]:
        with pytest.raises(ValueError, match="0 or more"):
            store.reflog_page("a", limit, offset)
