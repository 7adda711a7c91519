"""What every response of a served store holds up against: stored content nested past what a
JSON decoder takes, unknown paths and methods, malformed and oversized bodies, clients that
go away mid-body, internal errors (one line, the security headers) and requests for another
host name (DNS rebinding)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from forest_kit import TOKEN, serve

from sesstree import Store
from sesstree.server import create_app
from sesstree.web.app import MAX_WEB_BODY
from sesstree.web.guard import HostCheck
from sesstree.web.security import CSP, SECURITY_HEADERS
from sesstree.web.views import Views

DEEP = "[" * 100_000 + "]" * 100_000


def _secured(r: httpx.Response) -> None:
    for key, value in SECURITY_HEADERS.items():
        assert r.headers.get(key) == value, (r.status_code, r.request.url, key)


@pytest.fixture
def sync_url(forest_store: Store) -> Iterator[str]:
    """``sess serve``'s whole app (sync API and web view) over the demo forest, with a token."""
    with serve(forest_store, app=create_app(forest_store, token=TOKEN)) as base:
        yield base


def test_tool_call_arguments_nested_too_deep_show_as_text(forest_store: Store, url: str) -> None:
    s = forest_store.session("deep")
    s.add_message({"role": "user", "content": "go"})
    before = forest_store.session_head("deep")
    s.add_message({"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_d", "type": "function", "function": {"name": "nest", "arguments": DEEP}}]})
    s.append("tool/call", {"id": "call_d", "name": "nest", "arguments": DEEP})
    with httpx.Client(base_url=url, timeout=30) as c:
        page = c.get("/session/deep")
        assert page.status_code == 200
        assert "[[[[[[[[" in page.text and "more characters" in page.text
        data = c.get("/api/v1/web/sessions/deep").json()
        calls = [call for item in data["items"] for call in item["calls"]]
        assert calls[0]["name"] == "nest" and calls[0]["arguments"].startswith("[" * 100)
        assert c.get("/api/v1/web/diff", params={"a": "deep", "b": "scratch"}).status_code == 200
        assert c.get("/diff", params={"a": "deep", "b": "scratch"}).status_code == 200
        tail = c.get("/api/v1/web/tail/deep", params={"after": before})
        assert tail.status_code == 200 and tail.json()["reset"] is False
        assert c.get("/search", params={"q": "[[[["}).status_code == 200


def test_a_write_body_nested_too_deep_is_a_clean_400(writable_url: str) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{writable_url}/api/v1/web/tag", content=DEEP, headers=auth)
    assert r.status_code == 400 and r.json() == {"error": "the body must be a JSON object"}
    _secured(r)
    for body in ('{"name": "t", "rev": ' + DEEP + "}", '{"name": "t", "later": {"a": ' + DEEP + "}}"):
        r = httpx.post(f"{writable_url}/api/v1/web/tag", content=body, headers=auth)
        assert r.status_code == 400 and "fields must be text, not nested" in r.json()["error"]
        _secured(r)


def test_form_and_json_bodies_are_bounded_before_they_are_read(sync_url: str,
                                                               forest_store: Store) -> None:
    big = b"token=" + b"x" * MAX_WEB_BODY
    here = {"origin": sync_url, "content-type": "application/x-www-form-urlencoded"}
    bearer = {"authorization": f"Bearer {TOKEN}"}

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b"token="
        for _ in range(MAX_WEB_BODY // 65536 + 1):
            yield b"x" * 65536

    with httpx.Client(base_url=sync_url, timeout=60) as c:
        for path in ("/login", "/logout", "/actions/rename", "/actions/tag"):
            for body in (big, chunked()):
                r = c.post(path, content=body, headers=here)
                assert r.status_code == 413, (path, r.status_code)
                assert "the request body is over 1024 KiB" in r.text
                _secured(r)
        for action in ("rename", "delete", "tag", "untag"):
            r = c.post(f"/api/v1/web/{action}", content=b" " * MAX_WEB_BODY + b"{}",
                       headers=bearer)
            assert r.status_code == 413 and r.json() == {
                "error": "the request body is over 1024 KiB"}
        r = c.post("/api/v1/web/tag", json={"name": "t1", "rev": "quest-1"}, headers=bearer)
        assert r.status_code == 200 and forest_store.resolve("t1")


def _leave_mid_body(url: str, path: str, headers: str) -> None:
    """Send ``path`` the start of a 100 kB body, once the server asks for it, and hang up."""
    with socket.create_connection((httpx.URL(url).host, httpx.URL(url).port or 80)) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
                  f"Expect: 100-continue\r\n{headers}\r\n".encode())
        # The server says "100 Continue" when the route starts reading the body.
        assert s.recv(100).startswith(b"HTTP/1.1 100"), path
        s.sendall(b"x" * 1000)


def test_a_client_gone_mid_body_is_one_log_line(sync_url: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    bearer = f"Authorization: Bearer {TOKEN}\r\n"
    form = f"Origin: {sync_url}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    routes = {"/api/v1/has": "", "/api/v1/walk": "", "/api/v1/nodes": "",
              "/api/v1/push": bearer, "/api/v1/web/rename": bearer, "/login": form,
              "/actions/tag": form}
    for path, headers in routes.items():
        _leave_mid_body(sync_url, path, headers)
    deadline = time.monotonic() + 30  # the server logs once it sees the connection close

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name.startswith(("sesstree", "uvicorn"))]

    while len(lines()) < len(routes) and time.monotonic() < deadline:
        time.sleep(0.05)
    for path in routes:
        mine = [r for r in lines() if path in r.getMessage()]
        assert len(mine) == 1, (path, [r.getMessage() for r in lines()])
        assert "went away before sending its whole request" in mine[0].getMessage()
        assert mine[0].exc_info is None and mine[0].levelno == logging.WARNING
    assert len(lines()) == len(routes)


def test_every_error_carries_the_security_headers(sync_url: str) -> None:
    with httpx.Client(base_url=sync_url) as c:
        r = c.get("/no/such/page")
        assert r.status_code == 404 and "nothing here: /no/such/page" in r.text
        assert "text/html" in r.headers["content-type"]
        _secured(r)
        r = c.get("/api/v1/web/nowhere")
        assert r.status_code == 404 and r.json() == {"error": "nothing here: /api/v1/web/nowhere"}
        _secured(r)
        r = c.delete("/")
        assert r.status_code == 405 and "DELETE is not allowed on /" in r.text
        assert "GET" in r.headers["allow"]
        _secured(r)
        r = c.get("/api/v1/push")
        assert r.status_code == 405 and "error" in r.json()
        _secured(r)
        # The sync API's own answers carry them too.
        _secured(c.get("/api/v1/refs"))
        origin = {"origin": sync_url}
        for path in ("/login", "/logout", "/actions/rename", "/actions/tag"):
            r = c.post(path, content=b"token=x", headers={**origin,
                                                           "content-type": "multipart/form-data"})
            assert r.status_code == 400, (path, r.status_code, r.text)
            assert "Missing boundary in multipart" in r.text and "Traceback" not in r.text
            _secured(r)
            r = c.post(path, content=b"--xx\r\nContent-Disposition: form-data\r\n\r\nbroken",
                       headers={**origin, "content-type": "multipart/form-data; boundary=xx"})
            assert r.status_code in (400, 401, 403), (path, r.status_code, r.text)
            _secured(r)


def test_an_unexpected_error_is_one_line_with_the_headers(
        forest_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Views, name: str, offset: int = 0, limit: int = 0) -> None:
        raise RuntimeError("secret detail /home/someone/.sess")

    monkeypatch.setattr(Views, "reflog", broken)
    with serve(forest_store, app=create_app(forest_store, token=None)) as base, \
            httpx.Client(base_url=base) as c:
        r = c.get("/reflog/quest-1")
        assert r.status_code == 500
        assert "internal error (RuntimeError)" in r.text
        assert "secret" not in r.text and "Traceback" not in r.text
        assert r.headers["content-security-policy"] == CSP
        _secured(r)
        r = c.get("/api/v1/web/reflog/quest-1")
        assert r.status_code == 500
        assert r.json() == {"error": "internal error (RuntimeError): the server could not "
                                     "answer this request"}
        _secured(r)
        assert c.get("/api/v1/web/sessions/quest-1").status_code == 200  # the server lives on


def test_another_host_name_is_refused(sync_url: str) -> None:
    port = httpx.URL(sync_url).port
    with httpx.Client(base_url=sync_url) as c:
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example",
                     f"localhost.evil.example:{port}", "[::2]"):
            r = c.get("/api/v1/refs", headers={"host": host})
            assert r.status_code == 400 and "does not answer to the host name" in r.text, host
            _secured(r)
            assert c.get("/", headers={"host": host}).status_code == 400
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}",
                     "localhost."):
            r = c.get("/api/v1/refs", headers={"host": host})
            assert r.status_code == 200, host


def test_more_host_names_come_from_the_environment(
        forest_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESS_ALLOWED_HOSTS", "sessions.example.org, box.lan")
    app = create_app(forest_store, token=None, allowed_hosts=["other.lan"])
    with serve(forest_store, app=app) as base, httpx.Client(base_url=base) as c:
        for host in ("sessions.example.org", "BOX.LAN:443", "other.lan"):
            assert c.get("/api/v1/refs", headers={"host": host}).status_code == 200, host
        assert c.get("/api/v1/refs", headers={"host": "example.org"}).status_code == 400


async def _asgi_status(app: HostCheck, host: str, server: tuple[str, int]) -> int:
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "query_string": b"",
             "headers": [(b"host", host.encode())], "server": server, "http_version": "1.1",
             "scheme": "http", "root_path": ""}
    await app(scope, receive, send)  # type: ignore[arg-type]
    return int(sent[0]["status"])  # type: ignore[call-overload]


def test_the_bound_address_and_the_connection_address_are_accepted() -> None:
    import asyncio

    async def ok(scope: object, receive: object, send: object) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b""})  # type: ignore[operator]

    check = HostCheck(ok, ["localhost", "10.1.2.3", "box.lan", "fe80::1"])  # type: ignore[arg-type]

    def status(host: str, server: tuple[str, int] = ("127.0.0.1", 8765)) -> int:
        return asyncio.run(_asgi_status(check, host, server))

    assert status("10.1.2.3:8765") == 200
    assert status("BOX.lan") == 200
    assert status("[fe80::1]:8765") == 200
    # A server bound to 0.0.0.0 is reached by the machine's own address.
    assert status("192.168.7.7:8765", ("192.168.7.7", 8765)) == 200
    assert status("192.168.7.7:8765") == 400
    assert status("evil.example", ("192.168.7.7", 8765)) == 400
    assert status("") == 400
