"""The HTML pages over HTTP: every page answers, escapes what it shows, and sets a strict CSP."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from sesstree import Store

PAGES = ["/", "/?source=agent", "/session/quest-1", "/session/notes", "/node/before-answer",
         "/reflog/quest-1", "/diff?a=quest-1&b=notes", "/diff", "/search?q=script",
         "/search", "/login", "/session/nobody"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_sets_a_strict_csp_and_has_no_inline_script_or_style(
        shared_client: httpx.Client, path: str) -> None:
    response = shared_client.get(path)
    assert response.status_code in (200, 404)
    csp = response.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'self'" and directives["script-src"] == "'self'"
    assert "unsafe" not in csp and "object-src 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    page = response.text
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts == ['<script src="/static/app.js" defer>']
    assert page.count("</script>") == 1
    assert " style=" not in page and "<style" not in page
    assert not re.search(r"<[^>]+\son[a-z]+\s*=", page), "no event handler attribute anywhere"


def test_a_hostile_message_renders_as_text(shared_client: httpx.Client) -> None:
    client = shared_client
    page = client.get("/session/notes").text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=&quot;window.__pwned = 2&quot;&gt;" in page
    assert "<img" not in page and 'href="javascript' not in page
    for path in ("/search?q=pwned", "/", "/diff?a=quest-1&b=notes", "/node/notes~2"):
        page = client.get(path).text
        assert "<script>window" not in page and "<img" not in page, path


def test_names_and_queries_are_escaped_too(client: httpx.Client, forest_store: Store) -> None:
    forest_store.fork('x"><b>bold', "quest-1")
    page = client.get("/").text
    assert "<b>bold" not in page and "&lt;b&gt;bold" in page
    assert 'href="/session/x%22%3E%3Cb%3Ebold"' in page
    assert client.get("/session/x%22%3E%3Cb%3Ebold").status_code == 200
    search = client.get("/search", params={"q": "<svg onload=alert(1)>"}).text
    assert "<svg onload" not in search and "&lt;svg onload=alert(1)&gt;" in search
    error = client.get("/node/<script>")
    assert error.status_code == 404 and "<script>" not in error.text.split("<main>")[1]


def test_pages_show_the_forest_session_node_diff_search_and_reflog(client: httpx.Client,
                                                                   forest_store: Store) -> None:
    forest = client.get("/").text
    for name in ("quest-1", "quest-2", "notes", "scratch", "before-answer"):
        assert name in forest
    assert forest.count("<svg") == len(client.get("/api/v1/web/forest").json()["rows"])
    session = client.get("/session/quest-1").text
    assert "read_file" in session and "missing symbol" in session and "took" in session
    head = forest_store.session_head("quest-1")
    assert f'href="/node/{head}"' in session
    node = html.unescape(client.get(f"/node/{head}").text)
    assert head in node and "turn/end" in node and '"kind": "done"' in node
    diff = client.get("/diff?a=quest-1&b=quest-2").text
    assert "Common ancestor" in diff and forest_store.resolve("before-answer")[:12] in diff
    search = client.get("/search?q=frobnicate").text
    assert "2 hits, newest first" in search and "<mark>frobnicate</mark>" in search
    reflog = client.get("/reflog/quest-2").text
    head2 = forest_store.session_head("quest-2")
    assert "quest-2@{0}" in reflog and f"/session/quest-2?end={head2}" in reflog
    unknown = client.get("/session/nobody")
    assert unknown.status_code == 404 and "no session named &#39;nobody&#39;" in unknown.text


def test_static_assets_are_served_and_nothing_else(shared_client: httpx.Client) -> None:
    client = shared_client
    css = client.get("/static/app.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    js = client.get("/static/app.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    for bad in ("/static/../pages.py", "/static/%2e%2e/pages.py", "/static/nope.css",
                "/static/templates/base.html", "/static/.hidden.css"):
        assert client.get(bad).status_code == 404, bad
    for path in ("/", "/session/quest-1"):
        page = client.get(path).text
        assert "http://" not in page and "https://" not in page


def test_forest_pages_are_bounded_at_many_sessions(tmp_path: object, forest_store: Store,
                                                   client: httpx.Client) -> None:
    base = forest_store.resolve("quest-1")
    with forest_store.batch():
        for i in range(600):
            forest_store.fork(f"many-{i:04d}", base).add_message({"role": "user", "content": f"n{i}"})
    first = client.get("/api/v1/web/forest").json()
    assert len(first["sessions"]) == 40 and first["total"] is None and first["more"]
    assert len(first["rows"]) <= 3 * 40
    big = client.get("/api/v1/web/forest", params={"limit": 100000}).json()
    assert len(big["sessions"]) == 200 and big["limit"] == 200
    last = client.get("/api/v1/web/forest", params={"offset": 600}).json()
    assert len(last["sessions"]) == 4 and not last["more"] and last["total"] == 604
    seen = set()
    for offset in range(0, 604, 200):
        page = client.get("/api/v1/web/forest", params={"offset": offset, "limit": 200}).json()
        seen.update(s["name"] for s in page["sessions"])
    assert len(seen) == 604
    page = client.get("/?offset=40").text
    assert 'href="?offset=80"' in page and 'rel="prev" href="?"' in page
    assert len(page) < 80_000
