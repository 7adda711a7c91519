"""The web view reads a bounded amount of the store per request: search answers a page of the
index's hits and goes on from its cursor, the reflog and the diff come in bounded pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from forest_kit import serve

from sesstree import Store, open_store


@pytest.fixture
def long_store(tmp_path: Path) -> Iterator[Store]:
    """``long``: 3,000 events, every 100th holding ``needle-N``; ``short`` after it."""
    store = open_store(tmp_path / "s")
    events = [("user/message", {"role": "user",
                                "content": f"needle-{i}" if i % 100 == 0 else f"filler {i}"})
              for i in range(3000)]
    store.session("long").extend(events)
    store.session("short").extend([("user/message", {"role": "user", "content": "needle-short"})])
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def long_client(long_store: Store) -> Iterator[httpx.Client]:
    with serve(long_store) as base, httpx.Client(base_url=base, timeout=30) as c:
        yield c


def test_search_pages_go_on_from_their_cursor_newest_first(long_client: httpx.Client) -> None:
    found: list[str] = []
    cursor = ""
    pages = 0
    while True:
        r = long_client.get("/api/v1/web/search",
                            params={"q": "needle", "limit": 7, "cursor": cursor})
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["hits"]) <= 7
        found += [(h["match"] + h["after"]).rstrip("…") for h in page["hits"]]
        pages += 1
        if page["cursor"] is None:
            break
        cursor = page["cursor"]
        assert pages < 20
    assert pages == 5  # 31 hits at 7 a page
    # Every hit once, newest first: the short session's, then the long one's from its head.
    assert found == ["needle-short"] + [f"needle-{i}" for i in range(2900, -1, -100)]
    first = long_client.get("/api/v1/web/search", params={"q": "needle", "limit": 2}).json()
    assert [(h["match"] + h["after"]).rstrip("…") for h in first["hits"]] == [
        "needle-short", "needle-2900"]
    assert [h["sessions"] for h in first["hits"]] == [[{"name": "short", "back": 0}],
                                                      [{"name": "long", "back": 99}]]
    # The page follows the cursor too.
    html = long_client.get("/search", params={"q": "needle", "cursor": first["cursor"]})
    assert html.status_code == 200 and "<mark>needle</mark>-2800" in html.text
    assert "<mark>needle</mark>-2900" not in html.text
    bad = long_client.get("/api/v1/web/search", params={"q": "needle", "cursor": "1.zz"})
    assert bad.status_code == 400 and "cursor '1.zz'" in bad.json()["error"]
    assert long_client.get("/search", params={"q": "x", "cursor": "nope"}).status_code == 400


def test_the_reflog_comes_in_pages_newest_first(long_store: Store) -> None:
    for i in range(450):
        long_store.tag(f"t{i}", "short")  # (tags do not move the session)
    for i in range(449):  # (a handle each: one handle's appends are one entry)
        long_store.session("short").add_message({"role": "user", "content": f"move {i}"})
    total = len(long_store.reflog("short"))
    assert total == 450
    with serve(long_store) as base, httpx.Client(base_url=base, timeout=30) as c:
        first = c.get("/api/v1/web/reflog/short").json()
        assert (first["offset"], first["limit"], first["total"], first["more"]) == (0, 200, 450, True)
        assert len(first["entries"]) == 200
        assert first["entries"][0]["n"] == 0
        assert first["entries"][0]["new"] == long_store.session_head("short")
        last = c.get("/api/v1/web/reflog/short", params={"offset": 400, "limit": 5000}).json()
        assert last["limit"] == 2000 and last["more"] is False
        assert [e["n"] for e in last["entries"]] == list(range(400, 450))
        assert last["entries"][-1]["old"] is None  # the creation, oldest
        every = c.get("/api/v1/web/reflog/short", params={"limit": 2000}).json()["entries"]
        assert [e["new"] for e in every] == [e.new for e in reversed(long_store.reflog("short"))]
        page = c.get("/reflog/short")
        assert page.status_code == 200
        assert page.text.count("short@{") == 200 and 'id="older"' in page.text
        assert "?offset=200" in page.text and "rel=\"prev\"" not in page.text
        page = c.get("/reflog/short", params={"offset": 200})
        assert "short@{200}" in page.text and "short@{199}" not in page.text
        assert 'rel="prev" href="?"' in page.text
        bad = c.get("/api/v1/web/reflog/short", params={"offset": "x"})
        assert bad.status_code == 400


def test_the_diff_reads_a_bounded_stretch_of_each_side(
        long_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import sesstree.web.diffing as diffing

    long_store.fork("near", "long~3").extend([("user/message", {"role": "user", "content": "x"})] * 2)
    long_store.fork("early", "long~2990").extend([("user/message", {"role": "user", "content": "e"})])
    reads: list[int | None] = []
    chain = Store.chain

    def counting(self: Store, rev: str, limit: int | None = None) -> object:
        reads.append(limit)
        return chain(self, rev, limit)

    monkeypatch.setattr(Store, "chain", counting)
    monkeypatch.setattr(diffing, "DIFF_READ", 1000)
    with serve(long_store) as base, httpx.Client(base_url=base, timeout=30) as c:
        # A deep common node, close to both ends: found with small reads.
        d = c.get("/api/v1/web/diff", params={"a": "long", "b": "near"}).json()
        assert d["base"] == long_store.resolve("long~3") and d["cut"] is False
        assert reads and all(r is not None and r <= 1000 for r in reads)
        assert (d["only_a"], d["only_b"]) == (3, 2)
        assert [i["id"] for i in d["items_a"]] == [n.id for n in reversed(long_store.log("long")[:3])]
        # One side added more than the bound: cut, each side's newest shown.
        reads.clear()
        d = c.get("/api/v1/web/diff", params={"a": "long", "b": "early"}).json()
        assert all(r is not None and r <= 1000 for r in reads)
        assert d["cut"] is True and d["base"] is None
        assert 1000 <= d["only_a"] <= 2989 and 0 <= d["only_b"] <= 1  # at least; truly 2989, 1
        assert d["items_a"][-1]["id"] == long_store.session_head("long")
        assert len(d["items_a"]) == 500 and d["items_b"][-1]["id"] == long_store.session_head("early")
        page = c.get("/diff", params={"a": "long", "b": "early"})
        assert page.status_code == 200 and "more than 1,000 events back" in page.text
        # Unrelated roots, both short: no common node, nothing cut.
        d = c.get("/api/v1/web/diff", params={"a": "short", "b": "near~2990"}).json()
        assert d["base"] is None and d["cut"] is False and (d["only_a"], d["only_b"]) == (1, 9)
        # One an ancestor of the other.
        d = c.get("/api/v1/web/diff", params={"a": "long~10", "b": "long"}).json()
        assert d["base"] == long_store.resolve("long~10") and (d["only_a"], d["only_b"]) == (0, 10)
