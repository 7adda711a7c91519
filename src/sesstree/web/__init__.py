"""The web view: the session forest, sessions, nodes, diffs, search and reflogs in a browser.

:func:`web_routes` gives the routes to mount in a Starlette app (``sess serve`` does);
:func:`create_web_app` makes a standalone app of them. Pages live at ``/``, the JSON API they
use under ``/api/v1/web/``, their assets under ``/static/``. See ``docs/web.md``.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from ..repo.store import Store
from .api import api_routes
from .app import Web
from .pages import page_routes
from .throttle import Throttle

__all__ = ["create_web_app", "web_routes"]


def web_routes(store: Store, *, token: str | None,
               throttle: Throttle | None = None) -> list[BaseRoute]:
    """The web view's routes over ``store``. Without ``token`` it only reads; with one, rename,
    delete and tag work for a client that presents it (see docs/web.md), and wrong tokens are
    counted per client by ``throttle`` (a new one if None)."""
    web = Web(store, token, throttle)
    return [*api_routes(web), *page_routes(web)]


def create_web_app(store: Store, *, token: str | None = None, host: str = "127.0.0.1",
                   allowed_hosts: Iterable[str] = (),
                   throttle: Throttle | None = None) -> Starlette:
    """A Starlette app serving only the web view (the store stays the caller's to close).

    It answers only requests whose ``Host`` is a loopback name, ``host`` (the address it is
    bound to), the local address of the connection, or one of ``allowed_hosts``; every
    response carries the security headers, and every error is one line. Wrong tokens are
    counted per client by ``throttle`` (a new :class:`~sesstree.web.throttle.Throttle` if
    None)."""
    from .guard import build_app

    return build_app(store, token=token, host=host, allowed_hosts=allowed_hosts,
                     throttle=throttle)
