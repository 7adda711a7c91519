"""The HTTP API of a served store (Starlette): refs, negotiation, node batches, ref CAS.

Reads need nothing; every write needs ``Authorization: Bearer TOKEN``, and a server started
without a token is read-only; wrong tokens are counted per client, with the web view's
(:mod:`sesstree.web.throttle`). Bodies are capped before they are read, compressed ones also
once inflated, and decoded into a fixed shape per route, so no body nests deeper than its
shape (the value of a field the route does not know is skipped, and one nested past
msgspec's recursion limit is a ``400``, not a ``RecursionError``). Every pushed node is
verified (:func:`sesstree.sync.pack.verify`) and every pushed ref name checked before
anything is stored. The routes sit under ``/api/v1``; the browser view of :mod:`sesstree.web`
is mounted into the same app, at ``/`` and ``/api/v1/web/``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import (
    InvalidRefNameError,
    RemoteError,
    SesstreeError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from ..node import NodeId
from ..repo.store import Store
from ..sync import pack
from ..sync.pack import (
    MAX_BODY,
    MAX_STARTS,
    MAX_WALK,
    MAX_WALK_IDS,
    decode_pack,
    encode_pack,
    pack_ids,
    unpack_ids,
)
from ..sync.peer import Update, apply_push, listed_refs, read_chains, walk_store
from ..web.guard import build_app
from ..web.security import Auth
from ..web.throttle import Throttle

__all__ = [
    "MAX_HAS", "MAX_NODES", "MAX_STARTS", "MAX_WALK", "MAX_WALK_IDS", "create_app", "serve",
]

#: Most ids one /has request may ask about.
MAX_HAS = 200_000
#: Most nodes one /nodes request may ask for.
MAX_NODES = 20_000
API = "/api/v1"

_Handler = Callable[[Request], Awaitable[Response]]
_Body = TypeVar("_Body", bound=msgspec.Struct)
#: A start of /walk or a chain of /nodes: [32-byte id, count] (the id's length checked after).
_Start = tuple[bytes, int]
# The longest list each route takes, checked by the decoder on the list's header, before any
# item is made: 32 MiB of 4-byte [b"", 0] items would be 8 million tuples, half a gigabyte.
_Starts = Annotated[list[_Start], msgspec.Meta(max_length=MAX_STARTS)]
_Chains = Annotated[list[_Start], msgspec.Meta(max_length=MAX_NODES)]


# The shape of each route's body: what a field holds is decoded only as deep as its type.
class _Has(msgspec.Struct):
    ids: bytes


class _Walk(msgspec.Struct):
    starts: _Starts


class _Nodes(msgspec.Struct):
    chains: _Chains


class _Push(msgspec.Struct):
    pack: bytes
    updates: list[Update] = []
    reason: str = "push"


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(store: Store, *, token: str | None, host: str = "127.0.0.1",
               allowed_hosts: Iterable[str] = (), throttle: Throttle | None = None) -> Starlette:
    """The ASGI app serving ``store``: the sync API under ``/api/v1`` and the browser view at
    ``/`` (see docs/web.md). With ``token`` None the store is served read-only. The app does
    not close the store.

    Against DNS rebinding it answers only requests whose ``Host`` is ``localhost``,
    ``127.0.0.1``, ``[::1]``, ``host`` (the address it is bound to), the local address the
    connection came in on, or one of ``allowed_hosts``. Every response carries the web view's
    security headers, and an unexpected error is one line (JSON under ``/api/``). Wrong tokens,
    on ``/push`` and the web view's routes alike, are counted per client by ``throttle`` (a
    new :class:`~sesstree.web.throttle.Throttle` if None)."""
    throttle = throttle or Throttle()
    auth = Auth(token, throttle)

    def handler(fn: Callable[[Request], Awaitable[Response]]) -> _Handler:
        async def run(request: Request) -> Response:
            try:
                return await fn(request)
            except _Refused as exc:
                return _error(exc.status, exc.message)
            except (RemoteError, InvalidRefNameError) as exc:
                return _error(400, str(exc))
            except StoreLockedError as exc:
                return _error(503, str(exc))
            except StoreFullError as exc:
                # 507 Insufficient Storage: the server's disk, not the request nor a damaged
                # store; the client shows the one line as it is.
                return _error(507, str(exc))
            except StoreError as exc:
                return _error(500, f"the store cannot be used: {exc}")
            except SesstreeError as exc:
                return _error(400, str(exc))
        return run

    async def refs(request: Request) -> Response:
        refs = await run_in_threadpool(listed_refs, store)
        return JSONResponse({"version": 1, "refs": refs})

    async def has(request: Request) -> Response:
        ids = unpack_ids((await _msgpack_body(request, _Has)).ids)
        if len(ids) > MAX_HAS:
            raise _Refused(413, f"at most {MAX_HAS} ids per request")
        have = await run_in_threadpool(store.has, ids)
        return _msgpack({"have": pack_ids(i for i in ids if i in have)})

    async def walk(request: Request) -> Response:
        starts = _starts((await _msgpack_body(request, _Walk)).starts, "starts", MAX_STARTS)
        # Each start may list up to MAX_WALK ids: bound the answer as a whole, or a small
        # request (20,000 starts) could ask for an answer of over a billion ids.
        if sum(min(limit, MAX_WALK) for _, limit in starts) > MAX_WALK_IDS:
            raise _Refused(413, f"at most {MAX_WALK_IDS} ids per /walk answer (the sum of "
                                f"the starts' limits, each counted up to {MAX_WALK})")

        def read() -> list[list[Any]]:
            out: list[list[Any]] = []
            with store.snapshot():
                for start, limit in starts:
                    w = walk_store(store, start, min(limit, MAX_WALK))
                    out.append([w.depth, pack_ids(w.ids),
                                None if w.base is None else bytes.fromhex(w.base)])
            return out
        return _msgpack({"walks": await run_in_threadpool(read)})

    async def nodes(request: Request) -> Response:
        chains = _starts((await _msgpack_body(request, _Nodes)).chains, "chains", MAX_NODES)
        if sum(n for _, n in chains) > MAX_NODES:
            raise _Refused(413, f"at most {MAX_NODES} nodes per request")

        def read() -> bytes:
            with store.snapshot():
                # Cut at about PACK_BYTES (read now, not at import): the client asks again for
                # the rest, so large nodes never make an answer too big to accept.
                return encode_pack(read_chains(store, chains, max_bytes=pack.PACK_BYTES))
        return Response(await run_in_threadpool(read), media_type="application/x-sesstree-pack")

    async def push(request: Request) -> Response:
        _authorize(request, auth)
        body = await _msgpack_body(request, _Push)
        reason, updates = body.reason, body.updates
        if len(reason) > 200 or not reason.isprintable():
            reason = "push"
        received = decode_pack(body.pack, "pack")
        results = await run_in_threadpool(
            lambda: apply_push(store, received, updates, peer="the client", reason=reason))
        return JSONResponse({"results": [msgspec.to_builtins(r) for r in results]})

    routes = [
        Route(API + "/refs", handler(refs), methods=["GET"]),
        Route(API + "/has", handler(has), methods=["POST"]),
        Route(API + "/walk", handler(walk), methods=["POST"]),
        Route(API + "/nodes", handler(nodes), methods=["POST"]),
        Route(API + "/push", handler(push), methods=["POST"]),
    ]
    # The browser view (pages at /, its JSON under /api/v1/web) shares the server and token.
    app = build_app(store, token=token, routes=routes, host=host, allowed_hosts=allowed_hosts,
                    throttle=throttle)
    app.state.store = store
    return app


def _authorize(request: Request, auth: Auth) -> None:
    if not auth.writable:
        raise _Refused(403, "this server is read-only (started without --token-file)")
    # Counted as a guess of this client's; raises Throttled (a 429) while it must wait.
    if not auth.bearer_ok(request):
        raise _Refused(401, "a valid bearer token is needed to write")


async def _msgpack_body(request: Request, shape: type[_Body]) -> _Body:
    """The body, bounded by MAX_BODY before it is read, decoded as ``shape``: anything else
    (not msgpack, another shape, nested past the recursion limit) is a 400."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        raise _Refused(413, f"request body over {MAX_BODY // 2**20} MiB")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise _Refused(413, f"request body over {MAX_BODY // 2**20} MiB")
        chunks.append(chunk)
    route = request.url.path.removeprefix(API)
    try:
        return msgspec.msgpack.decode(b"".join(chunks), type=shape)
    except msgspec.ValidationError as exc:
        if "of length <=" in str(exc):  # a list longer than its route takes
            raise _Refused(413, f"too many items in the request body: {exc}") from None
        raise _Refused(400, f"the request body is not the msgpack map {route} takes: {exc}"
                       ) from None
    except msgspec.DecodeError:
        raise _Refused(400, "the request body is not msgpack") from None
    except RecursionError:  # a field this route does not know, nested thousands deep
        raise _Refused(400, "the request body is nested too deeply") from None


def _starts(items: list[_Start], key: str, most: int) -> list[tuple[NodeId, int]]:
    if len(items) > most:
        raise _Refused(413, f"at most {most} {key} per request")
    out = []
    for id_, count in items:
        if len(id_) != 32 or count < 0:
            raise _Refused(400, f"malformed {key}: expected [32-byte id, count] pairs")
        out.append((NodeId(id_.hex()), count))
    return out


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def _msgpack(value: Any) -> Response:
    return Response(msgspec.msgpack.encode(value), media_type="application/x-msgpack")


def serve(store: Store, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          app: Starlette | None = None) -> None:
    """Serve ``store`` (or a ready ``app`` over it) with uvicorn until interrupted."""
    import uvicorn

    # proxy_headers off: wrong tokens are counted per connection address, which a client's
    # own X-Forwarded-For must not choose (see sess serve).
    uvicorn.run(app or create_app(store, token=token, host=host), host=host, port=port,
                log_level="warning", server_header=False, proxy_headers=False)
