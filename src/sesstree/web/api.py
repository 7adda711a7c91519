"""The JSON API under ``/api/v1/web/``: what the pages read, for other tools too (docs/web.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..errors import SesstreeError
from .app import Web, json_error, json_response, read_body, status_of
from .catalog import SOURCES, Filter, parse_day
from .search import SearchPage, search
from .views import DEFAULT_EVENTS, DEFAULT_REFLOG, MAX_PAGE, MAX_REFLOG, items_json
from .writes import ACTIONS, perform

__all__ = ["ALL_EVENTS", "BadRequest", "all_events", "api_routes", "int_param", "read_filter",
           "reflog_page", "searching"]

PREFIX = "/api/v1/web"
# A write's body: names and plain values, so nothing in it nests (however deep a client
# nests a value, the decoder stops at its first bracket).
_fields = msgspec.json.Decoder(dict[str, str | int | float | bool | None])


class BadRequest(Exception):
    """A query parameter that cannot be used; its message is the one line the client sees."""


def int_param(request: Request, key: str, default: int, low: int, high: int) -> int:
    """An integer query parameter, clamped to ``[low, high]``."""
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"parameter {key}={raw[:40]!r} is not a whole number") from None
    return max(low, min(value, high))


#: The query parameter that unfolds a page's turns, as ``sess log --all-events`` does.
ALL_EVENTS = "all-events"


def all_events(request: Request) -> bool:
    """Whether the request asks for every event (``?all-events=1``) rather than the folded
    conversation."""
    return _flag(request.query_params.get(ALL_EVENTS, ""))


def reflog_page(request: Request) -> tuple[int, int]:
    """The ``offset`` and ``limit`` of a reflog page."""
    return (int_param(request, "offset", 0, 0, 10**9),
            int_param(request, "limit", DEFAULT_REFLOG, 1, MAX_REFLOG))


def read_filter(request: Request) -> Filter:
    """The forest's filter from ``name``, ``source``, ``since`` and ``until`` (YYYY-MM-DD)."""
    q = request.query_params
    source = q.get("source", "").strip()
    if source and source not in SOURCES:
        raise BadRequest(f"unknown source {source[:40]!r}: one of {', '.join(SOURCES)}")
    try:
        since = parse_day(q.get("since", ""))
        until = parse_day(q.get("until", ""), end=True)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return Filter(name=q.get("name", "").strip()[:200], source=source, since=since, until=until)


Handler = Callable[[Web, Request], Any]


def _endpoint(web: Web, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            result = await run_in_threadpool(handler, web, request)
        except BadRequest as exc:
            return json_error(400, str(exc))
        except SesstreeError as exc:
            return json_error(status_of(exc), str(exc))
        return result if isinstance(result, Response) else json_response(result)

    return endpoint


def _forest(web: Web, request: Request) -> Any:
    return web.views.forest(read_filter(request), int_param(request, "offset", 0, 0, 10**9),
                            int_param(request, "limit", 40, 1, MAX_PAGE))


def _session(web: Web, request: Request) -> Any:
    data = web.views.session(request.path_params["name"], request.query_params.get("end"),
                             int_param(request, "limit", DEFAULT_EVENTS, 1, 2000),
                             all_events(request))
    data["items"] = items_json(data["items"])
    return data


def _tail(web: Web, request: Request) -> Any:
    data = web.views.tail(request.path_params["name"], request.query_params.get("after", ""),
                          all_events=all_events(request))
    items = data["items"]
    data["html"] = web.fragment("items.html", items=items)
    data["items"] = items_json(items)
    return data


def searching(web: Web, request: Request, limit: int = 50) -> SearchPage:
    """The search a request asks for: ``q``, ``mode`` (words, phrase, substring), ``case=1``
    (match case), ``all=1`` (nodes no session reaches too) and ``cursor``; a query that
    cannot be searched or a malformed cursor is a 400 that says which."""
    q = request.query_params
    try:
        return search(web.store, q.get("q", ""), mode=q.get("mode", "") or "words",
                      case=_flag(q.get("case", "")), everything=_flag(q.get("all", "")),
                      cursor=q.get("cursor", ""), limit=limit)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _search(web: Web, request: Request) -> Any:
    return msgspec.to_builtins(searching(web, request, int_param(request, "limit", 50, 1, 500)))


def _diff(web: Web, request: Request) -> Any:
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    if not a or not b:
        raise BadRequest("a diff needs two revisions: ?a=REV&b=REV")
    data = web.views.diff(a, b, all_events(request))
    data["items_a"] = items_json(data["items_a"])
    data["items_b"] = items_json(data["items_b"])
    return data


def _write_endpoint(web: Web, action: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if not web.auth.writable:
            return json_error(403, "this server is read-only: it was started without a token")
        if not web.auth.bearer_ok(request):
            return json_error(401, "writing needs the server's token: Authorization: Bearer TOKEN")
        try:
            fields = _fields.decode(await read_body(request))
        except msgspec.ValidationError as exc:
            if " - at `$" not in str(exc):  # the body itself is no object
                return json_error(400, "the body must be a JSON object")
            return json_error(400, f"the body's fields must be text, not nested: {exc}")
        except msgspec.DecodeError:
            return json_error(400, "the body must be a JSON object")
        try:
            done, where = await run_in_threadpool(perform, web.store, action, fields)
        except SesstreeError as exc:
            return json_error(status_of(exc), str(exc))
        finally:
            web.views.forget_version()
        return json_response({"ok": True, "done": done, "next": where})

    return endpoint


def api_routes(web: Web) -> list[BaseRoute]:
    """The JSON API's routes."""
    v = web.views
    reads: list[tuple[str, Handler]] = [
        ("/forest", _forest),
        ("/version", lambda w, r: {"version": v.version()}),
        ("/sessions/{name:path}", _session),
        ("/tail/{name:path}", _tail),
        ("/reflog/{name:path}", lambda w, r: v.reflog(r.path_params["name"], *reflog_page(r))),
        ("/nodes/{rev:path}", lambda w, r: {k: x for k, x in v.node(r.path_params["rev"]).items()
                                             if k != "json"}),
        ("/diff", _diff),
        ("/search", _search),
    ]
    routes: list[BaseRoute] = [Route(PREFIX + path, _endpoint(web, h), methods=["GET"])
                               for path, h in reads]
    routes += [Route(f"{PREFIX}/{a}", _write_endpoint(web, a), methods=["POST"]) for a in ACTIONS]
    return routes
