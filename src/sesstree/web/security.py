"""Headers every response carries, and who may write.

Reading is open (the server binds 127.0.0.1 unless told otherwise). Writing (rename, delete,
tag) needs the server's token, and a server started without one is read-only:

- programs send ``Authorization: Bearer TOKEN`` to the JSON API;
- a browser enters the token once on ``/login``. The page answers with an ``HttpOnly``,
  ``SameSite=Strict`` cookie holding a value derived from the token (never the token itself),
  and every form that writes carries a second derived value (the CSRF field). A write from
  a form needs the cookie, the field, and an ``Origin`` (or ``Referer``) of this server, so
  another site can neither read the field nor make the browser send the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["COOKIE", "CSP", "SECURITY_HEADERS", "Auth", "same_origin"]

#: The Content-Security-Policy of every response: nothing inline, nothing from elsewhere.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS: Mapping[str, str] = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
COOKIE = "sesstree_web"


class Auth:
    """The server's token, and the values derived from it for a browser."""

    def __init__(self, token: str | None) -> None:
        self._token = token.encode() if token else None

    @property
    def writable(self) -> bool:
        """True if the server was given a token (writes are possible at all)."""
        return self._token is not None

    def _derive(self, purpose: str) -> str:
        assert self._token is not None
        return hmac.new(self._token, purpose.encode(), hashlib.sha256).hexdigest()

    def cookie_value(self) -> str:
        """What the login cookie holds: derived from the token, useless as a Bearer token."""
        return self._derive("sesstree-web-cookie")

    def csrf(self) -> str:
        """The field every writing form carries."""
        return self._derive("sesstree-web-csrf")

    def check_token(self, given: str) -> bool:
        """True if ``given`` is the token (compared in constant time)."""
        return self._token is not None and hmac.compare_digest(given.encode(), self._token)

    def bearer_ok(self, request: Request) -> bool:
        """True if the request carries ``Authorization: Bearer TOKEN``."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.check_token(value.strip())

    def logged_in(self, request: Request) -> bool:
        """True if the browser holds the login cookie."""
        value = request.cookies.get(COOKIE, "")
        return self._token is not None and hmac.compare_digest(value, self.cookie_value())

    def form_ok(self, request: Request, field: str) -> bool:
        """A write from a form: cookie, CSRF field and same origin."""
        return (self.logged_in(request) and same_origin(request)
                and hmac.compare_digest(field, self.csrf()))


def same_origin(request: Request) -> bool:
    """True if the request's ``Origin`` (or else ``Referer``) is this server."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return False
    parts = urlsplit(source)
    return parts.netloc == request.headers.get("host", "") and parts.scheme in ("http", "https")
