"""Who may write: nobody on a server without a token; with one, a Bearer client or a browser
that logged in, from this server's own pages only."""

from __future__ import annotations

import re

import httpx
from forest_kit import TOKEN

from sesstree import Store


def _state(store: Store) -> tuple[list[str], list[str]]:
    return [s.name for s in store.sessions()], [t.name for t in store.tags()]


def test_a_server_without_a_token_refuses_every_write(client: httpx.Client, forest_store: Store) -> None:
    before = _state(forest_store)
    for action, body in (("rename", {"session": "quest-1", "new": "q"}), ("delete", {"session": "notes"}),
                         ("tag", {"name": "t", "rev": "quest-1"}), ("untag", {"name": "before-answer"})):
        r = client.post(f"/api/v1/web/{action}", json=body, headers={"authorization": "Bearer x"})
        assert r.status_code == 403 and "read-only" in r.json()["error"]
        r = client.post(f"/actions/{action}", data=body, headers={"origin": str(client.base_url)})
        assert r.status_code == 403
    assert client.post("/login", data={"token": "x"}).status_code == 403
    assert _state(forest_store) == before
    assert "read-only" in client.get("/").text


def test_the_api_needs_the_bearer_token(writable_url: str, forest_store: Store) -> None:
    before = _state(forest_store)
    with httpx.Client(base_url=writable_url) as c:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN},
                        {"authorization": f"Basic {TOKEN}"}):
            r = c.post("/api/v1/web/rename", json={"session": "quest-1", "new": "q"}, headers=headers)
            assert r.status_code == 401 and "Bearer" in r.json()["error"]
        assert _state(forest_store) == before
        auth = {"authorization": f"Bearer {TOKEN}"}
        r = c.post("/api/v1/web/rename", json={"session": "quest-1", "new": "renamed"}, headers=auth)
        assert r.status_code == 200 and r.json()["done"] == "renamed session quest-1 to renamed"
        assert forest_store.has_session("renamed") and not forest_store.has_session("quest-1")
        r = c.post("/api/v1/web/tag", json={"name": "v1", "rev": "renamed~2"}, headers=auth)
        assert r.status_code == 200 and forest_store.resolve("v1") == forest_store.resolve("renamed~2")
        r = c.post("/api/v1/web/tag", json={"name": "v1", "rev": "renamed"}, headers=auth)
        assert r.status_code == 409 and r.json() == {"error": "tag 'v1' already exists"}
        r = c.post("/api/v1/web/rename", json={"session": "renamed", "new": "../x"}, headers=auth)
        assert r.status_code == 400 and "../x" in r.json()["error"]
        r = c.post("/api/v1/web/delete", json={"session": "nobody"}, headers=auth)
        assert r.status_code == 404
        r = c.post("/api/v1/web/delete", content=b"not json", headers=auth)
        assert r.status_code == 400 and r.json() == {"error": "the body must be a JSON object"}
        r = c.post("/api/v1/web/delete", json={"session": "notes"}, headers=auth)
        assert r.status_code == 200 and not forest_store.has_session("notes")
        r = c.post("/api/v1/web/untag", json={"name": "v1"}, headers=auth)
        assert r.status_code == 200 and [t.name for t in forest_store.tags()] == ["before-answer"]
        # The deleted session's reflog is still there to restore it from.
        assert c.get("/api/v1/web/reflog/notes").json()["exists"] is False


def test_a_browser_logs_in_once_and_writes_only_from_this_server(writable_url: str,
                                                                 forest_store: Store) -> None:
    here = {"origin": writable_url}
    with httpx.Client(base_url=writable_url) as c:
        assert "log in to write" in c.get("/").text
        bad = c.post("/login", data={"token": "wrong"}, headers=here)
        assert bad.status_code == 401 and "not the server" in bad.text and not c.cookies
        # A login posted from another site is refused even with the right token.
        evil = {"origin": "http://evil.test"}
        assert c.post("/login", data={"token": TOKEN}, headers=evil).status_code == 401
        for elsewhere in ("//evil.test/x", "/\\evil.test", "https://evil.test", "/\tx"):
            away = c.post("/login", data={"token": TOKEN, "next": elsewhere}, headers=here)
            assert away.status_code == 303 and away.headers["location"] == "/", elsewhere
        ok = c.post("/login", data={"token": TOKEN, "next": "/session/quest-1"}, headers=here)
        assert ok.status_code == 303 and ok.headers["location"] == "/session/quest-1"
        cookie = ok.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert TOKEN not in cookie
        page = c.get("/session/quest-1").text
        assert TOKEN not in page
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        form = {"csrf": csrf.group(1), "session": "quest-1", "new": "quest-one"}
        # Without the CSRF field, or from another origin, or without the cookie: refused.
        assert c.post("/actions/rename", data={**form, "csrf": ""}, headers=here).status_code == 403
        assert c.post("/actions/rename", data=form, headers={"origin": "http://evil.test"}).status_code == 403
        assert c.post("/actions/rename", data=form).status_code == 403  # no Origin, no Referer
        with httpx.Client(base_url=writable_url) as stranger:
            assert stranger.post("/actions/rename", data=form, headers=here).status_code == 403
        # The cookie is no Bearer token for the API.
        r = c.post("/api/v1/web/delete", json={"session": "notes"},
                   headers={"authorization": f"Bearer {c.cookies['sesstree_web']}"})
        assert r.status_code == 401
        assert forest_store.has_session("quest-1") and forest_store.has_session("notes")
        done = c.post("/actions/rename", data=form, headers=here)
        assert done.status_code == 303 and done.headers["location"] == "/session/quest-one"
        assert forest_store.has_session("quest-one")
        taken = c.post("/actions/rename", data={**form, "session": "quest-2", "new": "quest-one"},
                       headers={"referer": writable_url + "/session/quest-2"})
        assert taken.status_code == 409 and "already exists" in taken.text
        tag = c.post("/actions/tag", data={"csrf": csrf.group(1), "name": "good", "rev": "quest-one~1"},
                     headers=here)
        assert tag.status_code == 303 and forest_store.resolve("good") == forest_store.resolve("quest-one~1")
        out = c.post("/logout", data={"csrf": csrf.group(1)}, headers=here)
        assert out.status_code == 303
        assert c.post("/actions/delete", data={"csrf": csrf.group(1), "session": "quest-2"},
                      headers=here).status_code == 403
        assert forest_store.has_session("quest-2")
