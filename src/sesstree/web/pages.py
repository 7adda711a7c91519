"""The HTML pages: the forest, a session, a node, a diff, search, a reflog, and the login form
that lets a browser write."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import SesstreeError
from ..repo.folding import CONVERSATION_TYPES
from .api import BadRequest, all_events, int_param, read_filter, reflog_page, searching
from .app import Web, read_body, status_of
from .search import MODES
from .security import COOKIE, SECURITY_HEADERS, same_origin
from .views import DEFAULT_EVENTS, MAX_EVENTS, MAX_PAGE
from .writes import ACTIONS, perform

__all__ = ["page_routes"]

_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon"}

Page = Callable[[Web, Request], Response]


def _page(web: Web, handler: Page) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await run_in_threadpool(handler, web, request)
        except BadRequest as exc:
            return web.error_page(request, 400, str(exc))
        except SesstreeError as exc:
            return web.error_page(request, status_of(exc), str(exc))

    return endpoint


def _forest(web: Web, request: Request) -> Response:
    f = read_filter(request)
    data = web.views.forest(f, int_param(request, "offset", 0, 0, 10**9),
                            int_param(request, "limit", 40, 1, MAX_PAGE))
    return web.page(request, "forest.html", f=f, q=request.query_params, **data)


def _session(web: Web, request: Request) -> Response:
    data = web.views.session(request.path_params["name"], request.query_params.get("end"),
                             int_param(request, "limit", DEFAULT_EVENTS, 1, MAX_EVENTS),
                             all_events(request))
    return web.page(request, "session.html", **data)


def _node(web: Web, request: Request) -> Response:
    return web.page(request, "node.html", **web.views.node(request.path_params["rev"]))


def _reflog(web: Web, request: Request) -> Response:
    data = web.views.reflog(request.path_params["name"], *reflog_page(request))
    return web.page(request, "reflog.html", q=request.query_params, **data)


def _diff(web: Web, request: Request) -> Response:
    a, b = request.query_params.get("a", "").strip(), request.query_params.get("b", "").strip()
    data: dict[str, Any] = web.views.diff(a, b, all_events(request)) if a and b else {}
    return web.page(request, "diff.html", a=a, b=b, d=data)


def _search(web: Web, request: Request) -> Response:
    q = request.query_params
    context: dict[str, Any] = {"q": q.get("q", ""), "mode": q.get("mode", "words"),
                               "case": q.get("case", ""), "all": q.get("all", ""),
                               "modes": MODES, "page": None, "error": None,
                               "shown_types": CONVERSATION_TYPES}
    if not context["q"].strip():
        return web.page(request, "search.html", **context)
    try:
        context["page"] = searching(web, request)
    except BadRequest as exc:  # the form again, saying what to change
        context["error"] = str(exc)
        return web.page(request, "search.html", status=400, **context)
    return web.page(request, "search.html", **context)


def _login_form(web: Web, request: Request) -> Response:
    return web.page(request, "login.html", failed=False,
                    next=_local(request.query_params.get("next", "/")))


async def _login(web: Web, request: Request) -> Response:
    if not web.auth.writable:
        return web.error_page(request, 403, "this server is read-only: it was started without a token")
    form = await _form(request)
    token = form.get("token")
    # Another site's login is refused before its token is counted as a guess of this address.
    if (not same_origin(request) or not isinstance(token, str)
            or not web.auth.try_token(request, token)):
        return web.page(request, "login.html", status=401, failed=True,
                        next=_local(str(form.get("next") or "/")))
    response = RedirectResponse(_local(str(form.get("next") or "/")), status_code=303,
                                headers=dict(SECURITY_HEADERS))
    response.set_cookie(COOKIE, web.auth.cookie_value(), httponly=True, samesite="strict", path="/")
    return response


async def _logout(web: Web, request: Request) -> Response:
    form = await _form(request)
    if not web.auth.form_ok(request, str(form.get("csrf", ""))):
        return web.error_page(request, 403, "log out from this server's own page")
    response = RedirectResponse("/", status_code=303, headers=dict(SECURITY_HEADERS))
    response.delete_cookie(COOKIE, path="/")
    return response


async def _form(request: Request) -> FormData:
    """The request's form, read within MAX_WEB_BODY (413 past it); a body that cannot be parsed
    is a 400 (one line), not a 500."""
    await read_body(request)
    try:
        return await request.form()
    except HTTPException:
        raise  # Starlette's own 400 for a malformed multipart body
    except (ValueError, UnicodeDecodeError, AssertionError) as exc:
        raise HTTPException(400, f"the form body cannot be read: {type(exc).__name__}") from None


def _local(path: str) -> str:
    """Only a path on this server (never ``//elsewhere``) is a place to go back to."""
    # Browsers read "/\\host" as "//host": another site. Control characters are refused too.
    ok = (path.startswith("/") and path[1:2] not in ("/", "\\")
          and all(" " < c != "\x7f" for c in path))
    return path if ok else "/"


def _action(web: Web, action: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if not web.auth.writable:
            return web.error_page(request, 403,
                                  "this server is read-only: it was started without a token")
        form = await _form(request)
        if not web.auth.form_ok(request, str(form.get("csrf", ""))):
            return web.error_page(request, 403, "writing needs the server's token: log in first")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        try:
            _, where = await run_in_threadpool(perform, web.store, action, fields)
        except SesstreeError as exc:
            return web.error_page(request, status_of(exc), str(exc))
        finally:
            web.views.forget_version()
        return RedirectResponse(quote(where, safe="/"), status_code=303, headers=dict(SECURITY_HEADERS))

    return endpoint


_STATIC = resources.files("sesstree.web") / "static"


async def _static(request: Request) -> Response:
    name = request.path_params["file"]
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in _TYPES:
        return Response("not found", status_code=404, headers=dict(SECURITY_HEADERS))
    file = _STATIC / name
    if not file.is_file():
        return Response("not found", status_code=404, headers=dict(SECURITY_HEADERS))
    return Response(file.read_bytes(), media_type=_TYPES[suffix],
                    headers={**SECURITY_HEADERS, "cache-control": "no-cache"})


def page_routes(web: Web) -> list[BaseRoute]:
    """The pages' routes, the login and the forms that write, and the static files."""
    pages: list[tuple[str, Page]] = [
        ("/", _forest), ("/session/{name:path}", _session), ("/node/{rev:path}", _node),
        ("/reflog/{name:path}", _reflog), ("/diff", _diff), ("/search", _search),
        ("/login", _login_form),
    ]
    routes: list[BaseRoute] = [Route(p, _page(web, h), methods=["GET"]) for p, h in pages]

    async def login(request: Request) -> Response:
        return await _login(web, request)

    async def logout(request: Request) -> Response:
        return await _logout(web, request)

    routes.append(Route("/login", login, methods=["POST"]))
    routes.append(Route("/logout", logout, methods=["POST"]))
    routes += [Route(f"/actions/{a}", _action(web, a), methods=["POST"]) for a in ACTIONS]
    routes.append(Route("/static/{file:path}", _static, methods=["GET", "HEAD"]))
    return routes
