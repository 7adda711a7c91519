"""Who may use the proxy: requests sent to its own host names only, and no web page of
another origin unless allowed (a regression: any Host and any Origin were forwarded with the
upstream URL's credentials, and recorded)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from click.testing import CliRunner
from fake_upstream import FakeUpstream
from proxy_server import RunningProxy

from sesstree import Store
from sesstree.cli import cli
from sesstree.proxy.guard import Guard

BODY = {"model": "m", "messages": [{"role": "user", "content": "planted by a page"}]}
CHROMIUM = os.environ.get("SESS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def post(proxy: RunningProxy, path: str = "/v1/chat/completions",
         **headers: str) -> httpx.Response:
    # text/plain: the content type a page may send cross-site without a CORS preflight
    return httpx.post(proxy.url + path, content=httpx.Request("POST", "/", json=BODY).content,
                      headers={"content-type": "text/plain", **headers})


def nothing_passed(upstream: FakeUpstream, store: Store, proxy: RunningProxy) -> None:
    proxy.flush()
    assert upstream.requests == [] and upstream.paths == []
    assert list(store.sessions()) == []


def test_a_foreign_host_is_refused_and_nothing_is_forwarded(
        upstream: FakeUpstream, store: Store) -> None:
    # The upstream URL carries credentials: a forwarded request would be sent with them.
    secret_url = upstream.url.replace("http://", "http://user:hunter2secret@")
    with RunningProxy(store, secret_url) as proxy:
        reply = post(proxy, Host="evil.example", Origin="http://evil.example")
        assert reply.status_code == 400
        message = reply.json()["error"]["message"]
        assert "does not answer to the host name 'evil.example'" in message
        assert "--allow-host evil.example" in message and "127.0.0.1" in message
        # Anthropic's path: the error in Anthropic's shape
        reply = post(proxy, "/v1/messages", Host="evil.example:8787")
        assert reply.status_code == 400 and reply.json()["type"] == "error"
        # the counters are not for other names either (DNS rebinding would read them)
        stats = httpx.get(proxy.url + "/_sess/stats", headers={"Host": "evil.example"})
        assert stats.status_code == 400 and "requests" not in stats.text
        assert httpx.get(proxy.url + "/_sess/stats", headers={"Host": ""}).status_code == 400
        nothing_passed(upstream, store, proxy)
        assert httpx.get(proxy.url + "/_sess/stats").json()["refused"] == 4



def raw_request(port: int, request_line: bytes, host: bytes) -> tuple[int, bytes]:
    """The status and body of one request sent as written (httpx always sends a path)."""
    body = httpx.Request("POST", "/", json=BODY).content
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request_line + b"\r\nHost: " + host + b"\r\nContent-Type: "
                     b"application/json\r\nConnection: close\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def test_an_absolute_form_target_is_refused(upstream: FakeUpstream, store: Store) -> None:
    # HTTP has the host of an absolute-form target override the Host header: it is not
    # served whatever the Host says, nor forwarded as it came (an upstream that routes by
    # target would send the call, and the upstream URL's credentials, to evil.example).
    secret_url = upstream.url.replace("http://", "http://user:hunter2secret@")
    with RunningProxy(store, secret_url) as proxy:
        for line in (b"POST http://evil.example/v1/chat/completions HTTP/1.1",
                     b"POST http://127.0.0.1/v1/chat/completions HTTP/1.1",
                     b"OPTIONS * HTTP/1.1"):
            status, body = raw_request(proxy.port, line, f"127.0.0.1:{proxy.port}".encode())
            assert status == 400, line
            message = msgspec.json.decode(body)["error"]["message"]
            assert "is not a path" in message and "OPENAI_BASE_URL" in message, message
        nothing_passed(upstream, store, proxy)
        # an ordinary request on the same proxy is served
        assert raw_request(proxy.port, b"POST /v1/chat/completions HTTP/1.1",
                           b"localhost")[0] == 200

def test_a_page_of_another_origin_is_refused(upstream: FakeUpstream, store: Store) -> None:
    with RunningProxy(store, upstream.url) as proxy:
        # the Host is right (the page posts to http://127.0.0.1:PORT), the Origin is not
        for origin in ("http://evil.example", "null", f"http://localhost:{proxy.port}",
                       "not an origin"):
            reply = post(proxy, Origin=origin)
            assert reply.status_code == 403, origin
            message = reply.json()["error"]["message"]
            assert f"refused a request from the web page at {origin!r}" in message
            # the way to allow it, and no advice to allow what cannot be (see below)
            allowable = origin.startswith("http")
            assert (f"--allow-origin {origin}" in message) == allowable, message
        # no Origin, but the browser says the request comes from another site's page
        reply = httpx.get(proxy.url + "/v1/models", headers={"Sec-Fetch-Site": "cross-site"})
        assert reply.status_code == 403 and "Origin" in reply.json()["error"]["message"]
        nothing_passed(upstream, store, proxy)


def test_the_proxys_own_names_and_origin_are_served(upstream: FakeUpstream,
                                                    store: Store) -> None:
    with RunningProxy(store, upstream.url) as proxy:
        port = proxy.port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", f"[::1]:{port}"):
            assert post(proxy, Host=host).status_code == 200, host
        # a page the proxy itself served, and a request the user typed in the address bar
        own = post(proxy, Origin=f"http://127.0.0.1:{port}", **{"Sec-Fetch-Site": "same-origin"})
        assert own.status_code == 200
        typed = httpx.get(proxy.url + "/_sess/stats", headers={"Sec-Fetch-Site": "none"})
        assert typed.status_code == 200 and typed.json()["refused"] == 0
        proxy.flush()
        assert len(upstream.requests) == 5


def test_hosts_and_origins_the_user_allows(monkeypatch: pytest.MonkeyPatch,
                                           upstream: FakeUpstream, store: Store) -> None:
    monkeypatch.setenv("SESS_ALLOWED_HOSTS", "behind.proxy, other.name")
    with RunningProxy(store, upstream.url, allowed_hosts=["llm.box"],
                      allowed_origins=["http://LOCALHOST:3000/"]) as proxy:
        for host in ("llm.box", "behind.proxy:443", "other.name"):
            assert post(proxy, Host=host).status_code == 200, host
        assert post(proxy, Origin="http://localhost:3000").status_code == 200
        assert post(proxy, Origin="http://localhost:3001").status_code == 403
        assert post(proxy, Origin="https://localhost:3000").status_code == 403
        assert post(proxy, Host="evil.example").status_code == 400


def test_a_proxy_on_every_address_answers_the_address_it_is_reached_by() -> None:
    guard = Guard("0.0.0.0")
    scope: dict[str, Any] = {"type": "http", "scheme": "http", "path": "/v1/models",
                             "server": ("192.168.1.5", 8787)}
    assert guard.refusal({**scope, "headers": [(b"host", b"192.168.1.5:8787")]}) is None
    assert guard.refusal({**scope, "headers": [(b"host", b"0.0.0.0:8787")]}) is not None
    refused = guard.refusal({**scope, "headers": [(b"host", b"evil.example")]})
    assert refused is not None and refused[0] == 400
    assert Guard("10.0.0.7").refusal({**scope, "headers": [(b"host", b"10.0.0.7")]}) is None


def test_a_bad_allowed_origin_is_one_error_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "proxy", "--upstream",
                                       "http://127.0.0.1:9", "--allow-origin", "localhost:3000"],
                                prog_name="sess")
    assert result.exit_code != 0
    assert "--allow-origin: 'localhost:3000' is not an origin" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "s").exists()


def test_the_null_origin_cannot_be_allowed(tmp_path: Path, upstream: FakeUpstream,
                                           store: Store) -> None:
    # 'null' is the Origin of a local file, but also of a sandboxed frame that any site can
    # open (<iframe sandbox="allow-scripts" srcdoc=...>): allowing it allows every web page.
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "other"), "proxy", "--upstream",
                                       "http://127.0.0.1:9", "--allow-origin", "NULL"],
                                prog_name="sess")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "--allow-origin: the origin 'null' cannot be allowed" in result.output
    assert "sandboxed frame of any web site" in result.output
    assert not (tmp_path / "other").exists()
    with pytest.raises(ValueError, match="cannot be allowed"):
        Guard(allowed_origins=["null"])
    # and a page sending it is not told to allow it
    with RunningProxy(store, upstream.url) as proxy:
        reply = post(proxy, Origin="null")
        assert reply.status_code == 403
        message = reply.json()["error"]["message"]
        assert "--allow-origin null" not in message and "cannot be allowed" in message
        nothing_passed(upstream, store, proxy)


class _Page(BaseHTTPRequestHandler):
    """A web page on another origin that posts a conversation to the proxy."""

    target = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        page = ("<!doctype html><title>evil</title><script>"
                f"fetch({self.target!r}, {{method: 'POST', mode: 'no-cors', "
                "headers: {'content-type': 'text/plain'}, body: JSON.stringify("
                "{model: 'm', messages: [{role: 'user', content: 'planted by a page'}]})})"
                ".then(() => { document.title = 'sent' }, () => { document.title = 'failed' })"
                "</script>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


@pytest.fixture
def page_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _need_browser() -> None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed: pip install -e '.[web-test]'")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}")


@pytest.mark.parametrize("allowed", [False, True])
def test_a_real_browser_page_cannot_plant_a_conversation(
        allowed: bool, upstream: FakeUpstream, store: Store,
        page_server: ThreadingHTTPServer) -> None:
    _need_browser()
    from playwright.sync_api import sync_playwright

    page_origin = f"http://127.0.0.1:{page_server.server_address[1]}"
    options = {"allowed_origins": [page_origin]} if allowed else {}
    with RunningProxy(store, upstream.url, **options) as proxy:
        _Page.target = proxy.url + "/v1/chat/completions"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=["--no-sandbox"])
            try:
                tab = browser.new_page()
                tab.goto(page_origin + "/")
                tab.wait_for_function("document.title !== 'evil'", timeout=10_000)
            finally:
                browser.close()
        proxy.flush()
        if allowed:  # the user allowed that page's origin: forwarded and recorded
            assert [s.name for s in store.sessions()] == ["planted-by-a-page"]
            assert upstream.headers[0].get("origin") == page_origin
        else:
            assert upstream.requests == [] and list(store.sessions()) == []
            assert httpx.get(proxy.url + "/_sess/stats").json()["refused"] == 1


HOST_FORMS = ["localhost", "LOCALHOST.:8787", "127.0.0.1:8787", "[::1]:8787", "[::1]", "::1",
              "127.0.0.2", "0.0.0.0:8787", "0x7f.1", "2130706433", "evil.example",
              "localhost.evil.example", "", "llm.box:443", "a:b:c"]


def web_serves(scope: dict[str, Any], bound: str, allowed: list[str] | None = None) -> bool:
    """Whether ``sess serve``'s Host check, bound to ``bound``, lets ``scope`` through."""
    import asyncio

    from sesstree.hosts import served_names
    from sesstree.web.guard import HostCheck

    served: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(True)

    async def send(message: Any) -> None:
        pass

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    asyncio.run(HostCheck(app, served_names(bound, allowed or []))(scope, receive, send))
    return bool(served)


@pytest.mark.parametrize("host", HOST_FORMS)
def test_the_proxy_and_the_web_view_answer_the_same_host_names(host: str) -> None:
    scope: dict[str, Any] = {"type": "http", "scheme": "http", "method": "GET", "path": "/",
                             "server": ("127.0.0.1", 8787), "headers": [(b"host", host.encode())]}
    proxy_serves = Guard("127.0.0.1", ["llm.box"]).refusal(scope) is None
    assert proxy_serves == web_serves(scope, "127.0.0.1", ["llm.box"])
    assert proxy_serves == (host in ("localhost", "LOCALHOST.:8787", "127.0.0.1:8787",
                                     "[::1]:8787", "[::1]", "llm.box:443"))


def test_a_server_on_every_ipv6_address_answers_the_ipv4_address_it_is_reached_by() -> None:
    # Bound to "::", the socket takes IPv4 connections too, and the local address of one is
    # IPv4-mapped (::ffff:192.168.1.5) while the client's Host says 192.168.1.5: refused, on
    # the proxy and on the web view, for the machine's own address.
    scope: dict[str, Any] = {"type": "http", "scheme": "http", "method": "GET",
                             "path": "/v1/models", "server": ("::ffff:192.168.1.5", 8787)}
    for host, served in ((b"192.168.1.5:8787", True), (b"192.168.1.6:8787", False),
                         (b"evil.example", False)):
        asked = {**scope, "headers": [(b"host", host)]}
        assert (Guard("::").refusal(asked) is None) == served, host
        assert web_serves(asked, "::") == served, host
    # an IPv6 local address is still named as a Host names it
    six = {**scope, "server": ("fe80::1", 8787), "headers": [(b"host", b"[fe80::1]:8787")]}
    assert Guard("::").refusal(six) is None and web_serves(six, "::")


def test_the_proxys_host_check_loads_no_web_application() -> None:
    import subprocess
    import sys

    code = ("import sys, sesstree.proxy.app\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'starlette' "
            "or m.startswith('sesstree.web')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"
