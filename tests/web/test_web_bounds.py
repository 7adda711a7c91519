"""The web view reads a bounded amount of the store per request: search stops at its budget
inside a long session and goes on from there, the reflog and the diff come in bounded pages."""

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


def test_search_stops_at_its_budget_inside_a_session_and_goes_on(long_client: httpx.Client) -> None:
    found: list[str] = []
    cursor = ""
    pages = 0
    while True:
        r = long_client.get("/api/v1/web/search",
                            params={"q": "needle", "budget": 700, "cursor": cursor})
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["events_searched"] <= 700
        found += [(h["match"] + h["after"]).rstrip("…") for h in page["hits"]]
        pages += 1
        if page["cursor"] is None:
            break
        cursor = page["cursor"]
        assert pages < 20
    assert pages == 5  # 3,001 events at 700 a page
    assert sorted(found) == sorted([f"needle-{i}" for i in range(0, 3000, 100)] + ["needle-short"])
    # Newest first: the first page holds the newest of the long session.
    first = long_client.get("/api/v1/web/search", params={"q": "needle", "budget": 700}).json()
    assert [(h["match"] + h["after"]).rstrip("…") for h in first["hits"]][:2] == [
        "needle-short", "needle-2900"]
    # The page follows the cursor too.
    html = long_client.get("/search", params={"q": "needle", "cursor": first["cursor"]})
    assert html.status_code == 200 and "<mark>needle</mark>-2200" in html.text
    bad = long_client.get("/api/v1/web/search", params={"q": "needle", "cursor": "1.zz"})
    assert bad.status_code == 400 and "cursor '1.zz'" in bad.json()["error"]
    assert long_client.get("/search", params={"q": "x", "cursor": "nope"}).status_code == 400
