"""``HttpPeer(transport=...)``: a server's refusals and garbage answers through
``httpx.MockTransport``, no network; each ends in one RemoteError naming the server."""

from __future__ import annotations

import re

import httpx
import msgspec
import pytest

from sesstree import RemoteError
from sesstree.node import NodeId
from sesstree.sync.http import HttpPeer

TOKEN = "tok-transport-secret-987"
URL = "http://peer.invalid:8765"


def answering(response: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return response

    return httpx.MockTransport(handle), seen


def test_requests_go_through_the_transport_with_the_token_and_api_prefix() -> None:
    transport, seen = answering(httpx.Response(200, json={"version": 1, "refs": {
        "sessions/a": "ab" * 32}}))
    peer = HttpPeer(URL, token=TOKEN, transport=transport)
    assert peer.refs() == {"sessions/a": NodeId("ab" * 32)}
    (request,) = seen
    assert str(request.url) == f"{URL}/api/v1/refs"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["user-agent"] == "sesstree-sync/1"
    peer.close()
    # Closing the peer left the lent transport open: a new peer over it still works.
    assert HttpPeer(URL, transport=transport).refs()


@pytest.mark.parametrize(("token", "expected"), [
    (TOKEN, "refused the token (HTTP 401)"), (None, "needs a token to write")])
def test_a_401_says_what_to_do_about_the_token(token: str | None, expected: str) -> None:
    transport, _ = answering(httpx.Response(401, json={"error": f"bad token {TOKEN}"}))
    with pytest.raises(RemoteError, match=re.escape(expected)) as info:
        HttpPeer(URL, token=token, transport=transport).receive([], [])
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize(("status", "error"), [(413, "body too large"),
                                               (429, "too many wrong tokens: wait")])
def test_a_refusal_names_the_server_the_route_and_its_reason(status: int, error: str) -> None:
    transport, _ = answering(httpx.Response(status, json={"error": error}))
    with pytest.raises(RemoteError) as info:
        HttpPeer(URL, token=TOKEN, transport=transport).receive([], [])
    assert str(info.value) == f"{URL} refused /api/v1/push (HTTP {status}): {error}"


@pytest.mark.parametrize(("body", "expected"), [
    (b"<html>hello</html>", "is not a sesstree server (no JSON from /api/v1/refs)"),
    (b'{"version": 2, "refs": {}}', "is not a sesstree server speaking API v1"),
])
def test_a_malformed_refs_answer_is_one_error(body: bytes, expected: str) -> None:
    transport, _ = answering(httpx.Response(200, content=body))
    with pytest.raises(RemoteError, match=re.escape(expected)):
        HttpPeer(URL, transport=transport).refs()


def test_a_garbage_msgpack_answer_is_one_error() -> None:
    transport, _ = answering(httpx.Response(200, content=b"\xc1\xc1\xc1"))
    with pytest.raises(RemoteError, match="answered /api/v1/has with garbage"):
        HttpPeer(URL, transport=transport).has([NodeId("ab" * 32)])
    transport, _ = answering(httpx.Response(200, content=msgspec.msgpack.encode({"x": 1})))
    with pytest.raises(RemoteError, match="answered with garbage \\(no 'have'\\)"):
        HttpPeer(URL, transport=transport).has([NodeId("ab" * 32)])
