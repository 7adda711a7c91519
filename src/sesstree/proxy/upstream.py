"""Where a request goes, and which of the values it carries are secrets.

The upstream URL given to the proxy may carry a path (``https://openrouter.ai/api``), a query
(``?api-version=...``, ``?key=...``) and credentials (``https://user:pw@host``). A request is
forwarded to the upstream's path followed by the request's path, with both queries merged;
the credentials become an ``Authorization: Basic`` header when the client sent none.

A secret is any value of a credential header, of a query parameter or of the upstream URL's
password that is at least :data:`MIN_SECRET_LENGTH` characters long. A credential header is
one whose name says so (it contains ``auth``, ``token``, ``key``, ``secret``, ``passw``,
``pwd``, ``signature``, ``cookie`` or ``credential``: ``Authorization``, ``X-Auth-Token``,
``Ocp-Apim-Subscription-Key``, ``Cookie``, ...) or whose value does (``Bearer ...``,
``Basic ...`` followed by one token), whatever the provider; a fixed list of names let
every other provider's key through. A shorter value is taken
for a placeholder (Ollama's ``ollama``, vLLM's ``EMPTY``, a test's ``x``): replacing it
wherever it appears would corrupt the recording (every ``x`` of every message), and it
protects nothing.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus

import httpcore
import httpx

__all__ = ["MIN_SECRET_LENGTH", "Upstream", "header_secrets", "hide_userinfo",
           "query_secrets", "strip_header_values"]

#: Shorter values of a key header, query parameter or password are not treated as secrets.
MIN_SECRET_LENGTH = 8

_CREDENTIAL_NAME = re.compile(
    rb"auth|token|key|secret|passw|pwd|signature|cookie|credential", re.IGNORECASE)
#: ``Scheme credentials`` values (RFC 9110 11.4): the credentials are the secret.
_SCHEMED = re.compile(r"([A-Za-z][A-Za-z0-9_.+-]*)[ \t]+(\S.*)", re.DOTALL)
_SCHEMES = ("bearer", "basic", "token", "apikey", "api-key", "key", "sso-key", "otp")
#: Auth parameters that name how, not who: not secrets (redacting ``host;x-amz-date``
#: everywhere would only blank text).
_PUBLIC_PARAMS = frozenset({"signedheaders", "realm", "uri", "qop", "algorithm", "nc"})
_PARAM = re.compile(r"""([A-Za-z0-9_.-]+)[ \t]*=[ \t]*("(?:[^"\\]|\\.)*"|[^,; \t]*)""")
_BLANK = b" \t"
_ONE_TOKEN = re.compile(r"[^\s,]+")


def _meaningful(values: Iterable[str]) -> list[str]:
    found = {v for v in values if len(v) >= MIN_SECRET_LENGTH}
    # Longest first: a key that contains another is replaced whole, not around the shorter.
    return sorted(found, key=len, reverse=True)


def header_secrets(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The secrets in the request's credential headers (see the module's docstring),
    longest first: the whole value, or the credentials alone for ``Scheme credentials``
    (``Bearer``, ``Basic``, with the user name and password a Basic value encodes), each
    value of an auth-parameter list (``Credential=...``, ``Signature=...``) and of a
    ``Cookie``."""
    found: list[str] = []
    for key, raw in headers:
        text = raw.decode("latin-1").strip(" \t")
        if not text:
            continue
        scheme = _SCHEMED.fullmatch(text)
        # By its value, a header is a credential only if that value is a scheme and ONE
        # token ("Bearer abc..."): text that merely starts with the word ("X-Title: Token
        # Counter App", an app's name) is no key, and blanking "Counter App" in every
        # message of the recording would only corrupt it.
        schemed = scheme is not None and scheme.group(1).lower() in _SCHEMES and \
            _ONE_TOKEN.fullmatch(scheme.group(2).strip(" \t")) is not None
        if not schemed and _CREDENTIAL_NAME.search(key) is None:
            continue
        found += _credential_parts(key.lower(), text)
    return _meaningful(found)


def _credential_parts(name: bytes, text: str) -> list[str]:
    """The secret parts of one credential header's value."""
    scheme = _SCHEMED.fullmatch(text)
    if name == b"cookie" or name == b"set-cookie":
        values = [v.strip('"') for _, v in _PARAM.findall(text)]
        return [text, *values, *(unquote(v) for v in values)]
    if scheme is None:
        return [text]
    kind, rest = scheme.group(1).lower(), scheme.group(2).strip(" \t")
    if kind in _SCHEMES and " " not in rest and "," not in rest:
        # The credentials are the secret: the whole value ("Bearer x") would match text that
        # merely mentions the scheme.
        parts = [rest]
        if kind == "basic":
            try:
                pair = base64.b64decode(rest, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                pair = ""
            # A Basic value is user:password in base64: an error that echoes either decoded
            # must not store it either.
            parts += [pair, *pair.split(":", 1)] if ":" in pair else []
        return parts
    params = [v.strip('"') for k, v in _PARAM.findall(rest) if k.lower() not in _PUBLIC_PARAMS]
    if params:  # an auth-parameter list: AWS's Credential=..., Signature=...; Digest's
        return [text, rest, *params]
    return [text, rest]


def query_secrets(query: bytes | str) -> list[str]:
    """The values of a query string's parameters that could be keys (of
    :data:`MIN_SECRET_LENGTH` characters or more, with a letter), decoded and as sent, longest
    first: ``?key=AIza...`` is how some providers take their key."""
    text = query.decode("latin-1") if isinstance(query, bytes) else query
    found: list[str] = []
    for part in text.split("&"):
        _, _, value = part.partition("=")
        decoded = unquote_plus(value)
        # A value with no letter (a date, a version, a number: ``api-version=2024-06-01``)
        # is no key, and redacting it would blank every mention of that date.
        if any(c.isalpha() for c in decoded):
            found += [value, decoded]
    return _meaningful(found)


def strip_header_values(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers with spaces and tabs removed at both ends of each value: they are not part
    of a value (RFC 9110, 5.5), and the upstream's HTTP stack refuses to send them."""
    return [(k, v.strip(_BLANK)) for k, v in headers]


def hide_userinfo(url: str) -> str:
    """``url`` as it may be printed: everything up to the last ``@`` of its authority removed
    (``https://user:pw@host/`` becomes ``https://host/``), the rest as written."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority = rest[:end]
    if "@" in authority:
        rest = authority.rpartition("@")[2] + rest[end:]
    return f"{scheme}{sep}{rest}"


class Upstream:
    """The upstream URL, split into what every forwarded request is built from."""

    def __init__(self, url: str | httpx.URL) -> None:
        """Raises:
            ValueError: the URL's port is outside 1..65535 (the socket layer would take it
                modulo 65536 and send every call, keys included, to another port).
        """
        given = httpx.URL(str(url))
        if given.port is not None and not 1 <= given.port <= 65535:
            raise ValueError(f"port {given.port} of the upstream is not in 1..65535")
        #: The URL without credentials, path or query: what requests are sent to.
        self.origin = given.copy_with(username=None, password=None, raw_path=b"/")
        raw_path = given.raw_path
        path, _, query = raw_path.partition(b"?")
        #: The upstream's own path, without a trailing ``/``; the request's path follows it.
        self.path = path.rstrip(b"/")
        #: The upstream's own query, merged into every request's.
        self.query = query
        #: ``Authorization: Basic`` built from the URL's credentials, or None.
        self.authorization: bytes | None = None
        if given.userinfo:
            pair = f"{given.username}:{given.password}".encode()
            self.authorization = b"Basic " + base64.b64encode(pair)
        secrets = [given.password, *query_secrets(query)]
        if self.authorization is not None:
            secrets.append(self.authorization[6:].decode())
        #: The values of the URL that must never be stored or printed.
        self.secrets = _meaningful(secrets)
        #: The parts of an :class:`httpcore.URL` (scheme, host, port) and the ``Host`` header
        #: every request is sent with.
        self.scheme = given.raw_scheme
        self.host = given.raw_host
        self.port = given.port
        self.host_header = self.origin.netloc
        self._params = [p for p in query.split(b"&") if p]

    def target_for(self, raw_path: bytes, query: bytes) -> bytes:
        """The request target (path and query) a request for ``raw_path?query`` is sent to:
        the upstream's path, then the request's; the request's query, then each upstream
        parameter it does not name."""
        target = self.path + (raw_path or b"/")
        if not self._params:  # the usual case: nothing to merge
            return target + b"?" + query if query else target
        names = {_name(p) for p in query.split(b"&") if p}
        # A parameter the client gives itself wins over the upstream's.
        kept = [p for p in self._params if _name(p) not in names]
        merged = b"&".join([*kept, query] if query else kept)
        return target + b"?" + merged if merged else target

    def url_for(self, raw_path: bytes, query: bytes) -> httpcore.URL:
        """The URL a request for ``raw_path?query`` is sent to (see :meth:`target_for`)."""
        return httpcore.URL(scheme=self.scheme, host=self.host, port=self.port,
                            target=self.target_for(raw_path, query))


def _name(part: bytes) -> str:
    return unquote_plus(part.partition(b"=")[0].decode("latin-1"))
