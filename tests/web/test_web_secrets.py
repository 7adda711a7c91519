"""What a client may send where a secret is expected (the login cookie, the CSRF field, a
Bearer header, the login form's token): anything at all (non-ASCII text, nothing, kilobytes)
is refused cleanly, never a 500, on every page and route of ``sess serve``'s app."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from forest_kit import TOKEN, serve
from starlette.requests import Request

from sesstree import Store
from sesstree.server import create_app
from sesstree.web.security import COOKIE, Auth

# Raw header values a browser or a script may send: UTF-8 bytes (read by the server as
# Latin-1 text, so non-ASCII), Latin-1, nothing, a lot, a zero-width space.
ODD = [b"\xc3\xa9t\xc3\xa9", b"\xe9", b"", b"x" * 6000, b"\xff\xfe", b"\xe2\x80\x8b"]


@pytest.fixture
def app_url(forest_store: Store) -> Iterator[str]:
    """``sess serve``'s whole app (sync API and web view) with a token."""
    with serve(forest_store, app=create_app(forest_store, token=TOKEN)) as base:
        yield base


def _request(cookie: bytes) -> Request:
    return Request({"type": "http", "headers": [(b"cookie", COOKIE.encode() + b"=" + cookie)]})


def test_the_checks_take_any_text_and_never_raise() -> None:
    auth = Auth(TOKEN)
    assert auth.check_token(TOKEN)
    for given in ["é", "\udcff", "\ud800" + TOKEN, "", "x" * 10**6, TOKEN + "é", TOKEN[:-1],
                  "\x00", TOKEN.upper()]:
        assert auth.check_token(given) is False, given[:20]
    assert Auth(None).check_token(TOKEN) is False
    for value in ODD:
        assert auth.logged_in(_request(value)) is False
    assert auth.logged_in(_request(auth.cookie_value().encode()))


def test_any_cookie_leaves_every_page_answering(app_url: str, forest_store: Store) -> None:
    with httpx.Client(base_url=app_url, timeout=30) as c:
        for value in ODD:
            headers = {"cookie": COOKIE.encode() + b"=" + value}
            for path in ("/", "/session/quest-1", "/login", "/search?q=x", "/nothing"):
                r = c.get(path, headers=headers)
                assert r.status_code == (404 if path == "/nothing" else 200), (value[:10], path)
                assert "log in to write" in r.text or path == "/nothing"
            assert c.get("/api/v1/web/forest", headers=headers).status_code == 200
            assert c.get("/api/v1/refs", headers=headers).status_code == 200


def test_any_csrf_field_bearer_or_login_token_is_refused_cleanly(app_url: str,
                                                                 forest_store: Store) -> None:
    here = {"origin": app_url}
    before = [s.name for s in forest_store.sessions()]
    with httpx.Client(base_url=app_url, timeout=30) as c:
        for value in ODD:
            text = value.decode("latin-1")
            # A guess in the login form (sent as UTF-8 form data).
            r = c.post("/login", data={"token": text}, headers=here)
            assert r.status_code == 401 and "not the server" in r.text
            # A logged-in browser whose CSRF field is anything but the one it was given.
            ok = c.post("/login", data={"token": TOKEN}, headers=here)
            assert ok.status_code == 303
            r = c.post("/actions/rename", data={"csrf": text, "session": "quest-1", "new": "q"},
                       headers=here)
            assert r.status_code == 403 and "log in first" in r.text
            c.cookies.clear()
            # A Bearer header holding anything, on the web view's writes and on /push.
            auth = {"authorization": (b"Bearer " + value).strip()}  # h11 sends no trailing space
            r = c.post("/api/v1/web/rename", json={"session": "quest-1", "new": "q"},
                       headers=auth)
            assert r.status_code == 401, value[:10]
            r = c.post("/api/v1/push", content=b"\x80", headers=auth)
            assert r.status_code == 401 and "bearer token" in r.json()["error"]
    assert [s.name for s in forest_store.sessions()] == before


def test_any_origin_or_referer_is_only_another_site(app_url: str, forest_store: Store) -> None:
    with httpx.Client(base_url=app_url, timeout=30) as c:
        assert c.post("/login", data={"token": TOKEN}, headers={"origin": app_url}).status_code == 303
        for header in ("origin", "referer"):
            for value in (b"http://[", b"http://[::1", b"http://\xc3\xa9", b"\x01", b"x" * 6000):
                odd = {header: value}
                r = c.post("/login", data={"token": TOKEN}, headers=odd)
                assert r.status_code == 401, (header, value[:10])
                csrf = {"csrf": "x", "session": "quest-1", "new": "q"}
                assert c.post("/actions/rename", data=csrf, headers=odd).status_code == 403
                assert c.post("/logout", data={"csrf": "x"}, headers=odd).status_code == 403
    assert forest_store.has_session("quest-1")
