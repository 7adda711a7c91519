"""The pieces every route shares: the store's views, the templates, responses with the
security headers, and errors turned into one clear line."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import msgspec
from jinja2 import Environment, PackageLoader
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..errors import (
    AmbiguousPrefixError,
    ConflictError,
    InvalidRefNameError,
    RefExistsError,
    SesstreeError,
    StoreFullError,
    StoreLockedError,
    UnknownRevisionError,
)
from ..repo.store import Store
from .catalog import SOURCES
from .security import SECURITY_HEADERS, Auth
from .throttle import Throttle
from .views import Views

__all__ = ["MAX_WEB_BODY", "Web", "json_error", "json_response", "read_body", "status_of"]

#: Largest body a page's form or a JSON write may have (they hold a few names): ``413`` past it.
MAX_WEB_BODY = 1024 * 1024


def _when(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%H:%M:%S")


def _ago(ts: float | None) -> str:
    if ts is None:
        return ""
    s = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _pager(query: Any, offset: int) -> str:
    """The query string of another page of the same listing."""
    params = [(k, v) for k, v in query.multi_items() if k != "offset" and v]
    if offset > 0:
        params.append(("offset", str(offset)))
    return urlencode(params)


def status_of(exc: SesstreeError) -> int:
    """The HTTP status that says what went wrong."""
    if isinstance(exc, UnknownRevisionError):
        return 404
    if isinstance(exc, (RefExistsError, ConflictError)):
        return 409
    if isinstance(exc, (InvalidRefNameError, AmbiguousPrefixError)):
        return 400
    if isinstance(exc, StoreLockedError):
        return 503
    if isinstance(exc, StoreFullError):
        return 507  # Insufficient Storage: the server's disk, as sync's routes answer it
    return 500


class Web:
    """Everything a route needs: the store's views, the token's rules, the templates."""

    def __init__(self, store: Store, token: str | None, throttle: Throttle | None = None) -> None:
        self.store = store
        self.views = Views(store)
        self.auth = Auth(token, throttle)
        env = Environment(loader=PackageLoader("sesstree.web", "templates"), autoescape=True,
                          trim_blocks=True, lstrip_blocks=True)
        env.filters["when"] = _when
        env.filters["ago"] = _ago
        env.filters["clock"] = _clock
        env.filters["seconds"] = _seconds
        env.filters["short"] = lambda v: (v or "")[:12]
        env.filters["path"] = lambda v: quote(str(v), safe="/")
        env.filters["pager"] = _pager
        env.globals["sources"] = SOURCES
        self.env = env

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        """A page, with the login state every template shows."""
        html = self.env.get_template(template).render(
            request=request, writable=self.auth.writable,
            logged_in=self.auth.logged_in(request),
            csrf=self.auth.csrf() if self.auth.logged_in(request) else "",
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=dict(SECURITY_HEADERS))

    def error_page(self, request: Request, status: int, message: str) -> Response:
        """One line saying what is wrong, in the site's frame."""
        return self.page(request, "error.html", status=status, message=message)

    def fragment(self, template: str, **context: Any) -> str:
        """Rendered HTML of a partial template (for the JSON API's live updates)."""
        return self.env.get_template(template).render(**context)


def json_response(data: Any, status: int = 200) -> Response:
    """JSON with the security headers; never cached (it is live data)."""
    headers = {**SECURITY_HEADERS, "cache-control": "no-store"}
    return Response(msgspec.json.encode(data), status_code=status, media_type="application/json",
                    headers=headers)


def json_error(status: int, message: str) -> Response:
    """``{"error": "one line"}``."""
    return json_response({"error": message}, status)


async def read_body(request: Request, limit: int = MAX_WEB_BODY) -> bytes:
    """The request's body, refused (``413``, before more is read) past ``limit`` bytes, by its
    ``Content-Length`` or as it arrives. Later ``request.form()`` and ``request.body()`` read
    the same bytes."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise HTTPException(413, f"the request body is over {limit // 1024} KiB")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"the request body is over {limit // 1024} KiB")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # what Request.body() and Request.form() read from now on
    return body
