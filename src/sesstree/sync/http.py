"""The client of a store served by ``sess serve``: the five peer requests over HTTP.

Every failure becomes one :class:`~sesstree.errors.RemoteError` line naming the server: it is
down, it is not a sesstree server, the token is missing or refused, a body was too large. The
token travels only in the ``Authorization`` header and appears in no message.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any, NoReturn

import httpx
import msgspec

from ..errors import RemoteError
from ..node import NodeId
from ..store.base import RawNode
from .pack import (
    MAX_STARTS,
    MAX_UNPACKED,
    MAX_WALK,
    MAX_WALK_IDS,
    decode_pack,
    encode_pack,
    pack_ids,
    unpack_ids,
)
from .peer import RefResult, Update, Walk
from .shown import shown_url, url_problem
from .token import sendable_token

__all__ = ["API", "HttpPeer", "shown_url", "url_problem"]

#: Where the sync API lives on a server (versioned: a change of wire format is a new prefix).
API = "/api/v1"
_msgpack = msgspec.msgpack.Encoder()
MSGPACK = "application/x-msgpack"
PACK = "application/x-sesstree-pack"


class HttpPeer:
    """A store served over HTTP by ``sess serve``.

    ``transport`` is an httpx transport that carries every request instead of the peer's
    own (an ``httpx.MockTransport`` in tests, a transport with its own TLS settings). Nothing
    else changes: the URL, token, timeouts, bounds and error messages are the same. The peer
    never closes a transport it is given; whoever made it does.
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        try:
            base = httpx.URL(url)
        except (httpx.InvalidURL, ValueError) as exc:
            raise RemoteError(f"invalid URL {shown_url(url)!r}: {url_problem(url, exc)}"
                              ) from None
        if base.scheme not in ("http", "https") or not base.host:
            raise RemoteError(f"invalid URL {shown_url(url)!r}: expected http(s)://HOST[:PORT]")
        self.name = shown_url(url)
        self.round_trips = 0
        self._token = token
        headers = {"User-Agent": "sesstree-sync/1"}
        if token:
            headers["Authorization"] = f"Bearer {sendable_token(token, 'the token')}"
        # Small requests go out at once (no Nagle delay waiting for an ACK: without it every
        # request with a body costs a delayed-ACK timeout, ~40 ms). Plain http never uses
        # TLS, so it skips loading the CA bundle; https verifies certificates as usual.
        own: httpx.BaseTransport = _Borrowed(transport) if transport is not None else (
            httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                                verify=base.scheme == "https"))
        self._client = httpx.Client(base_url=self.name + API, headers=headers, transport=own,
                                    timeout=httpx.Timeout(timeout, connect=10.0))

    # -- the five requests --------------------------------------------------------------------

    def refs(self) -> dict[str, NodeId]:
        """Every session and tag."""
        body = self._json(self._send("GET", "/refs"), "/refs")
        refs = body.get("refs") if isinstance(body, dict) else None
        if not isinstance(refs, dict) or body.get("version") != 1:
            raise RemoteError(f"{self.name} is not a sesstree server speaking API v1")
        return {str(k): NodeId(str(v)) for k, v in refs.items()}

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        """Which of ``ids`` the server stores."""
        if not ids:
            return set()
        reply = self._msgpack(self._send("POST", "/has", _msgpack.encode({"ids": pack_ids(ids)}),
                                         MSGPACK), "/has")
        return set(unpack_ids(_field(reply, "have", bytes, self.name)))

    def walk(self, starts: Sequence[tuple[NodeId, int]]) -> list[Walk]:
        """Ids back from each start, on the server (in as many requests as its bounds need:
        at most MAX_STARTS starts and MAX_WALK_IDS ids per answer)."""
        out: list[Walk] = []
        group: list[tuple[NodeId, int]] = []
        room = MAX_WALK_IDS
        for start, n in starts:
            n = min(n, MAX_WALK)
            if group and (len(group) == MAX_STARTS or n > room):
                out += self._walk(group)
                group, room = [], MAX_WALK_IDS
            group.append((start, n))
            room -= n
        if group:
            out += self._walk(group)
        return out

    def _walk(self, starts: list[tuple[NodeId, int]]) -> list[Walk]:
        body = _msgpack.encode({"starts": [[bytes.fromhex(s), n] for s, n in starts]})
        reply = self._msgpack(self._send("POST", "/walk", body, MSGPACK), "/walk")
        out = []
        for item in _field(reply, "walks", list, self.name):
            try:
                depth, ids, base = item
                out.append(Walk(int(depth), unpack_ids(ids),
                                None if base is None else NodeId(bytes(base).hex())))
            except (TypeError, ValueError, RemoteError):
                raise RemoteError(f"{self.name} answered /walk with garbage") from None
        if len(out) != len(starts):
            raise RemoteError(f"{self.name} answered /walk with garbage")
        for w, (start, n) in zip(out, starts, strict=True):
            if len(w.ids) > n:
                raise RemoteError(f"{self.name} listed {len(w.ids)} ids back from "
                                  f"{start[:12]} when asked for at most {n}: refused")
        return out

    def nodes(self, chains: Sequence[tuple[NodeId, int]]) -> list[RawNode]:
        """Chains of nodes from the server (verified by the caller before storing)."""
        body = _msgpack.encode({"chains": [[bytes.fromhex(t), n] for t, n in chains]})
        response = self._send("POST", "/nodes", body, MSGPACK)
        self.last_bytes = len(response.content)
        return decode_pack(response.content, f"pack from {self.name}")

    def receive(self, nodes: Sequence[RawNode], updates: Sequence[Update],
                reason: str = "push") -> list[RefResult]:
        """Send nodes and ref updates; the server verifies and applies them."""
        body = _msgpack.encode({"pack": encode_pack(nodes), "reason": reason,
                                "updates": [msgspec.to_builtins(u) for u in updates]})
        self.last_bytes = len(body)
        reply = self._json(self._send("POST", "/push", body, MSGPACK, write=True), "/push")
        try:
            return msgspec.convert(reply["results"], list[RefResult])
        except (KeyError, TypeError, msgspec.ValidationError):
            raise RemoteError(f"{self.name} answered /push with garbage") from None

    def close(self) -> None:
        """Close the connections."""
        self._client.close()

    # -- plumbing ------------------------------------------------------------------------------

    last_bytes = 0

    def _send(self, method: str, path: str, body: bytes | None = None,
              content_type: str | None = None, *, write: bool = False) -> _Answer:
        self.round_trips += 1
        headers = {"Content-Type": content_type} if content_type else None
        try:
            request = self._client.build_request(method, path, content=body, headers=headers)
            response = self._client.send(request, stream=True)
            try:
                # Read with a bound: a broken or hostile server cannot make this client hold
                # more than MAX_UNPACKED of one answer in memory.
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_UNPACKED:
                        raise RemoteError(f"{self.name} answered {API}{path} with more than "
                                          f"{MAX_UNPACKED // 2**20} MiB")
                    chunks.append(chunk)
            finally:
                response.close()
            answer = _Answer(response.status_code, response.reason_phrase, b"".join(chunks))
        except httpx.TimeoutException:
            raise RemoteError(f"{self.name} did not answer in time ({path})") from None
        except httpx.TransportError as exc:
            raise RemoteError(f"cannot reach {self.name}: {_reason(exc)}") from None
        if answer.status_code >= 400:
            self._fail(answer, path, write)
        return answer

    def _fail(self, response: _Answer, path: str, write: bool) -> NoReturn:
        status = response.status_code
        message = ""
        try:
            message = str(response.json().get("error", ""))[:300]
        except (ValueError, AttributeError):
            pass
        if status == 401:
            if self._token:
                raise RemoteError(f"{self.name} refused the token (HTTP 401): check SESS_TOKEN "
                                  "or --token-file")
            raise RemoteError(f"{self.name} needs a token to write: set SESS_TOKEN or pass "
                              "--token-file")
        if status == 404 and not message:
            raise RemoteError(f"{self.name} is not a sesstree server (HTTP 404 on {API}{path})")
        detail = message or response.reason_phrase
        raise RemoteError(f"{self.name} refused {API}{path} (HTTP {status}): {detail}")

    def _json(self, response: _Answer, path: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise RemoteError(f"{self.name} is not a sesstree server (no JSON from {API}{path})"
                              ) from None

    def _msgpack(self, response: _Answer, path: str) -> Any:
        try:
            return msgspec.msgpack.decode(response.content)
        except (msgspec.DecodeError, RecursionError):  # RecursionError: nested too deeply
            raise RemoteError(f"{self.name} answered {API}{path} with garbage") from None


class _Answer:
    """A server's answer, read whole (within the bound) and already decoded."""

    __slots__ = ("content", "reason_phrase", "status_code")

    def __init__(self, status_code: int, reason_phrase: str, content: bytes) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.content = content

    def json(self) -> Any:
        """The body as JSON (ValueError if it is not, or nests too deeply to decode)."""
        try:
            return msgspec.json.decode(self.content)
        except RecursionError:
            raise ValueError("the JSON nests too deeply") from None


class _Borrowed(httpx.BaseTransport):
    """A transport the peer was given: its client's ``close`` leaves it open."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self.transport = transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """The request, through the lent transport."""
        return self.transport.handle_request(request)

    def close(self) -> None:
        """Nothing: whoever made the transport closes it."""


def _field(reply: Any, key: str, kind: type, name: str) -> Any:
    value = reply.get(key) if isinstance(reply, dict) else None
    if not isinstance(value, kind):
        raise RemoteError(f"{name} answered with garbage (no {key!r})")
    return value


def _reason(exc: httpx.TransportError) -> str:
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused (is 'sess serve' running?)"
    return text.splitlines()[0][:200]
