"""Bodies nested past what a decoder takes, both ways: a client's request to every route of
``sess serve`` is a clean ``400`` that changes nothing, and a server's answer is one
RemoteError for the client. Real uvicorn servers on 127.0.0.1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from sync_kit import TOKEN, all_ids, grow, refs_of, served, serving

from sesstree import RemoteError, Store, open_store, sync
from sesstree.node import node_id_from_encoded
from sesstree.server.app import MAX_NODES, MAX_STARTS
from sesstree.store.base import RawNode
from sesstree.sync.http import HttpPeer
from sesstree.sync.pack import MAX_BODY, encode_pack
from sesstree.web.security import SECURITY_HEADERS

LEVELS = 100_000
DEEP = b"\x91" * LEVELS + b"\xc0"  # [[[...[nil]...]]] in msgpack
_encode = msgspec.msgpack.encode


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "origin")
    grow(s, "main", 5)
    yield s
    s.close()


def _map(*pairs: tuple[str, bytes]) -> bytes:
    """A msgpack map of already encoded values."""
    return bytes([0x80 | len(pairs)]) + b"".join(_encode(k) + v for k, v in pairs)


# What each route takes, and one valid value of its field.
ROUTES = {"has": ("ids", _encode(b"")), "walk": ("starts", _encode([])),
          "nodes": ("chains", _encode([])), "push": ("pack", _encode(encode_pack([])))}


def test_a_body_nested_deep_is_a_clean_400_on_every_route(origin: Store) -> None:
    before = refs_of(origin), all_ids(origin)
    with served(origin) as url, httpx.Client(base_url=url, timeout=60) as c:
        for route, (field, valid) in ROUTES.items():
            headers = {"authorization": f"Bearer {TOKEN}"} if route == "push" else {}
            for body in (DEEP,  # the whole body
                         _map((field, DEEP)),  # the route's own field
                         _map((field, valid), ("later", DEEP)),  # a field it does not know
                         _map((field, valid), ("updates", DEEP), ("reason", DEEP))):
                r = c.post(f"/api/v1/{route}", content=body, headers=headers)
                assert r.status_code == 400, (route, r.text[:200])
                error = r.json()["error"]
                assert "nested too deeply" in error or "msgpack map" in error, error
                assert all(r.headers.get(k) == v for k, v in SECURITY_HEADERS.items())
        assert c.get("/api/v1/refs").status_code == 200  # and the server goes on
    assert (refs_of(origin), all_ids(origin)) == before


def test_a_pushed_node_nested_past_the_limit_is_refused(origin: Store) -> None:
    head = origin.session_head("main")
    assert head is not None
    node = RawNode(node_id_from_encoded(head, "user/message", DEEP), head, "user/message", DEEP)
    body = _encode({"pack": encode_pack([node]), "updates": [
        {"ref": "sessions/main", "old": head, "new": node.id}]})
    before = all_ids(origin)
    with served(origin) as url:
        r = httpx.post(url + "/api/v1/push", content=body,
                       headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"] == (f"the client sent node {node.id[:12]} whose data is nested too "
                                 "deeply: refused, nothing stored")
    assert all_ids(origin) == before and origin.session_head("main") == head


async def _deep_server(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers every request with a body nested 100,000 levels: JSON for /refs and for the
    error of /push, msgpack for the others."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    json = path.endswith(("/refs", "/push"))
    body = b"[" * LEVELS + b"]" * LEVELS if json else DEEP
    await send({"type": "http.response.start", "status": 400 if path.endswith("/push") else 200,
                "headers": [(b"content-length", str(len(body)).encode()),
                            (b"content-type", b"application/json" if json else b"x")]})
    await send({"type": "http.response.body", "body": body})


def test_a_server_answering_nested_too_deep_is_one_error(tmp_path: Path) -> None:
    with serving(_deep_server) as url:
        peer = HttpPeer(url, token=TOKEN)
        try:
            with pytest.raises(RemoteError, match="is not a sesstree server"):
                peer.refs()
            with pytest.raises(RemoteError, match=r"answered /api/v1/has with garbage"):
                peer.has(["ab" * 32])  # type: ignore[list-item]
            with pytest.raises(RemoteError, match=r"answered /api/v1/walk with garbage"):
                peer.walk([("ab" * 32, 3)])  # type: ignore[list-item]
            with pytest.raises(RemoteError, match=r"refused /api/v1/push \(HTTP 400\)"):
                peer.receive([], [])
        finally:
            peer.close()
        with open_store(tmp_path / "mine") as mine:
            with pytest.raises(RemoteError):
                sync.fetch(mine, url)
            assert refs_of(mine) == {}


@pytest.mark.parametrize(("data", "why"), [
    (b"\x91" * 600 + b"\xc0", "nested more than 500 levels deep"),  # deeper than appends take
    (b"\x81\x01\xc0", "non-string key 1"),
    (b"\x81\xa1x\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00", "holds nan"),
    (b"\x81\xa1x\xc4\x01z", "bytes found"),
])
def test_a_pushed_node_the_store_cannot_hold_is_refused_saying_why(origin: Store, data: bytes,
                                                                    why: str) -> None:
    head = origin.session_head("main")
    assert head is not None
    node = RawNode(node_id_from_encoded(head, "user/message", data), head, "user/message", data)
    body = _encode({"pack": encode_pack([node]), "updates": [
        {"ref": "sessions/main", "old": head, "new": node.id}]})
    before = all_ids(origin)
    with served(origin) as url:
        r = httpx.post(url + "/api/v1/push", content=body,
                       headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error.startswith(f"the client sent node {node.id[:12]} whose data the store cannot "
                            "hold (") and error.endswith("): refused, nothing stored")
    assert why in error
    assert all_ids(origin) == before and origin.session_head("main") == head


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_body_of_millions_of_tiny_items_is_refused_before_they_are_made(tmp_path: Path) -> None:
    # 32 MiB (the body cap) of 4-byte [b"", 0] items: 8 million tuples, over half a gigabyte
    # if decoded, on routes that need no token. The list's header says how long it is.
    open_store(tmp_path / "served").close()
    server = subprocess.Popen(
        [sys.executable, "-c", "from sesstree.cli import main; main()", "serve", "--store",
         str(tmp_path / "served"), "--port", "0"],
        env={**os.environ, "SESS_HOME": str(tmp_path / "home")}, stderr=subprocess.PIPE,
        text=True)
    try:
        assert server.stderr is not None
        match = re.search(r"on (http://127\.0\.0\.1:\d+) ", server.stderr.readline())
        assert match
        before = _peak_rss_kib(server.pid)
        n = (MAX_BODY - 20) // 4
        errors = []
        for route, field in (("walk", "starts"), ("nodes", "chains")):
            body = _map((field, b"\xdd" + n.to_bytes(4, "big") + b"\x92\xc4\x00\x00" * n))
            r = httpx.post(f"{match.group(1)}/api/v1/{route}", content=body, timeout=120)
            assert r.status_code == 413, r.text[:200]
            errors.append(r.json()["error"])
        # The body itself is held (32 MiB, a copy or two), never millions of objects.
        assert _peak_rss_kib(server.pid) - before < 150 * 1024
        assert errors == [f"too many items in the request body: Expected `array` of length "
                          f"<= {most} - at `$.{field}`"
                          for most, field in ((MAX_STARTS, "starts"), (MAX_NODES, "chains"))]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(20)
        if server.stderr is not None:
            server.stderr.close()
