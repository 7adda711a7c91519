"""Which requests the proxy serves: those sent to one of its own host names, and none from a
web page of another origin unless the user allowed that origin.

Any page the user visits can make the browser send requests to ``http://127.0.0.1:8787``: a
cross-site ``text/plain`` POST needs no CORS preflight, and would be forwarded upstream with
the credentials of ``--upstream`` and recorded. After DNS rebinding (``evil.example`` re-pointed
at 127.0.0.1) the page could even read the replies, paid for with the user's key. So, with
the same rules as ``sess serve`` (:mod:`sesstree.web.guard`):

- the ``Host`` must be one of the proxy's names: ``localhost``, ``127.0.0.1``, ``[::1]``, the
  address it was bound to (unless a wildcard), the local address the connection came in on
  (a proxy bound to ``0.0.0.0`` is reached by the machine's own IP), a name given with
  ``--allow-host`` or in ``$SESS_ALLOWED_HOSTS``;
- a request from a browser page (an ``Origin`` header, or ``Sec-Fetch-Site`` saying
  ``cross-site`` or ``same-site``) must come from the proxy's own origin or from one given
  with ``--allow-origin``. Programs (SDKs, curl, agents) send neither header.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..hosts import HOSTS_ENV, LOOPBACK_NAMES, header_host, local_name, served_names

__all__ = ["HOSTS_ENV", "LOOPBACK_NAMES", "Guard", "origin_of"]

_BROWSER_SITES = (b"cross-site", b"same-site")
_NULL = ("the origin 'null' cannot be allowed: it is the origin of local files, but also of "
         "every sandboxed frame of any web site; serve the page from an http:// origin "
         "(e.g. python -m http.server 3000) and allow that (--allow-origin "
         "http://localhost:3000)")


def origin_of(value: str) -> str:
    """``value`` as an origin is compared: ``scheme://host[:port]``, lowercase, without a
    trailing ``/``.

    Raises:
        ValueError: ``value`` is not an origin (no http(s) scheme or host, or a path, query
            or user name in it), or is ``null``: the origin of local files, but also of every
            sandboxed frame of any site (``<iframe sandbox srcdoc=...>``), so that allowing it
            would allow every web page.
    """
    text = value.strip().lower()
    if text == "null":
        raise ValueError(_NULL)
    parts = urlsplit(text.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or \
            parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"{value!r} is not an origin (scheme://host[:port], e.g. "
                         "http://localhost:3000)")
    return f"{parts.scheme}://{parts.netloc}"


class Guard:
    """The host names and origins one proxy serves (see the module's docstring)."""

    def __init__(self, host: str = "127.0.0.1", allowed_hosts: Iterable[str] = (),
                 allowed_origins: Iterable[str] = ()) -> None:
        """Raises:
            ValueError: an allowed origin is not an origin (see :func:`origin_of`).
        """
        self.hosts = served_names(host, allowed_hosts)
        self.origins = frozenset(origin_of(o) for o in allowed_origins)

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """Why the request of ``scope`` is not served (an HTTP status and a message a
        developer can act on), or None to serve it."""
        target = scope.get("raw_path") or str(scope.get("path", "")).encode("utf-8", "replace")
        if not target.startswith(b"/"):
            # An absolute-form target (``POST http://evil.example/v1/...``) names its host
            # itself, and HTTP has it override the Host header (RFC 9112, 3.2.2): checking the
            # Host alone would let it through, and forwarded as it came it would send the
            # call, credentials included, wherever an upstream that routes by target says.
            shown = target.decode("latin-1")[:100]
            return 400, (
                f"sess proxy: refused: the request target {shown!r} is not a path: the proxy "
                "is not an HTTP forward proxy; point the client's base URL at it (e.g. "
                "OPENAI_BASE_URL=http://127.0.0.1:8787/v1) instead of HTTP_PROXY")
        host_value = origin = site = None
        for key, value in scope.get("headers", ()):
            if key == b"host" and host_value is None:
                host_value = value.decode("latin-1")
            elif key == b"origin" and origin is None:
                origin = value.decode("latin-1")
            elif key == b"sec-fetch-site":
                site = value.strip().lower()
        given = header_host(host_value or "")
        local = local_name(scope.get("server"))
        if not given or (given not in self.hosts and given != local):
            shown = given[:80] or "(none)"
            return 400, (
                f"sess proxy: refused: this proxy does not answer to the host name {shown!r} "
                f"(it answers to {', '.join(sorted(self.hosts))}); send the request to one of "
                f"them, or start the proxy with --allow-host {shown} if that name is its own")
        if origin is not None:
            try:
                normalized = origin_of(origin)
            except ValueError as exc:
                normalized, how = origin.strip().lower(), str(exc)
            else:
                how = f"to allow this origin, start the proxy with --allow-origin {normalized}"
            own = f"{scope.get('scheme', 'http')}://{(host_value or '').strip().lower()}"
            if normalized in self.origins or normalized == own:
                return None
            shown = origin.strip()[:100] or "(empty)"
            return 403, (
                f"sess proxy: refused a request from the web page at {shown!r}: the proxy "
                "forwards no browser's cross-origin request (a page could spend your API key "
                f"and plant conversations in your store); {how[:200]}")
        if site in _BROWSER_SITES:
            return 403, (
                f"sess proxy: refused a request a web page made ({site.decode('latin-1')}, "
                "without an Origin header): the proxy forwards no browser's cross-origin "
                "request; a page of an origin allowed with --allow-origin must send its "
                "Origin (fetch() in cors mode does)")
        return None
