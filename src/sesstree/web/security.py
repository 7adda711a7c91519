"""Headers every response carries, and who may write.

Reading is open (the server binds 127.0.0.1 unless told otherwise). Writing (rename, delete,
tag) needs the server's token, and a server started without one is read-only:

- programs send ``Authorization: Bearer TOKEN`` to the JSON API;
- a browser enters the token once on ``/login``. The page answers with an ``HttpOnly``,
  ``SameSite=Strict`` cookie holding a value derived from the token (never the token itself),
  and every form that writes carries a second derived value (the CSRF field). A write from
  a form needs the cookie, the field, and an ``Origin`` (or ``Referer``) of this server, so
  another site can neither read the field nor make the browser send the cookie.

Every comparison with a value a client sent (the token, the cookie, the CSRF field) goes
through :func:`secret_matches`: constant time on bytes, whatever the value holds (non-ASCII
text, nothing, megabytes), and never an exception. Token guesses (``/login``, a Bearer header)
are counted per client address by a :class:`~sesstree.web.throttle.Throttle`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from starlette.requests import Request

from .throttle import Throttle, client_key

__all__ = ["COOKIE", "CSP", "MIN_TOKEN", "SECURITY_HEADERS", "Auth", "bearer_token", "same_origin",
           "secret_matches"]

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
#: The shortest token ``sess serve`` accepts (16 random letters and digits are over 80 bits).
MIN_TOKEN = 16


def _bytes(value: str | bytes) -> bytes:
    # surrogatepass: a lone surrogate (which a str may hold) encodes instead of raising.
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")


def secret_matches(given: str | bytes, secret: bytes) -> bool:
    """True if ``given`` (a value a client sent) is ``secret``, in constant time.

    Never raises: text is compared as its UTF-8 bytes (lone surrogates included), and both
    sides are hashed first, so neither the comparison's time nor an exception says anything
    about the secret's length or content."""
    return hmac.compare_digest(hashlib.sha256(_bytes(given)).digest(),
                               hashlib.sha256(secret).digest())


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header; None without one."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


class Auth:
    """The server's token, the values derived from it for a browser, and the throttle that
    counts wrong guesses of it."""

    def __init__(self, token: str | None, throttle: Throttle | None = None) -> None:
        self._token = _bytes(token) if token else None
        self.throttle = throttle or Throttle()

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
        """True if ``given`` is the token (constant time; not counted: see :meth:`try_token`)."""
        return self._token is not None and secret_matches(given, self._token)

    def try_token(self, request: Request, given: str) -> bool:
        """:meth:`check_token` as a guess by the request's client: raises
        :class:`~sesstree.web.throttle.Throttled` (a 429) while that client must wait, and
        counts a wrong token against it. An empty ``given`` is no guess: False, not counted."""
        if self._token is None or not given:
            return False
        return self.throttle.attempt(client_key(request), lambda: self.check_token(given))

    def bearer_ok(self, request: Request) -> bool:
        """True if the request carries ``Authorization: Bearer TOKEN`` (a guess: see
        :meth:`try_token`)."""
        given = bearer_token(request)
        return given is not None and self.try_token(request, given)

    def logged_in(self, request: Request) -> bool:
        """True if the browser holds the login cookie. Not counted as a guess: the cookie is a
        256-bit value no one guesses, and a stale one is sent with every page."""
        if self._token is None:
            return False
        return secret_matches(request.cookies.get(COOKIE, ""), self.cookie_value().encode())

    def form_ok(self, request: Request, field: str) -> bool:
        """A write from a form: cookie, CSRF field and same origin."""
        return (self.logged_in(request) and same_origin(request)
                and secret_matches(field, self.csrf().encode()))


def same_origin(request: Request) -> bool:
    """True if the request's ``Origin`` (or else ``Referer``) is this server."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return False
    try:
        parts = urlsplit(source)
    except ValueError:  # "http://[" and the like: not this server, and no reason to fail
        return False
    return parts.netloc == request.headers.get("host", "") and parts.scheme in ("http", "https")
