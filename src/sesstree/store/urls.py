"""Store URLs as text: telling one from a folder, and showing it without its password.

Nothing here opens a store: :mod:`sesstree.store.engines` does, by the URL's scheme. So an
engine may use this module (to name its store in messages) without importing the dispatch
that imports the engine.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

__all__ = ["URL_SCHEMES", "is_store_url", "mask_secrets", "redact_url", "strip_userinfo",
           "url_secrets"]

#: URL schemes that name a PostgreSQL store.
URL_SCHEMES = ("postgresql://", "postgres://")


def is_store_url(text: object) -> bool:
    """True if ``text`` is a PostgreSQL URL (``postgresql://...`` or ``postgres://...``)."""
    return isinstance(text, str) and text.lower().startswith(URL_SCHEMES)


def strip_userinfo(url: str) -> str:
    """``url`` cut by hand, for text that does not parse as a URL: the scheme, then what
    follows the last ``@`` (a password may hold ``/`` or ``@`` when it is not quoted, so
    everything up to the last ``@`` goes), without query or fragment."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest = rest.rpartition("@")[2]
    for mark in ("?", "#"):
        rest = rest.split(mark, 1)[0]
    return f"{scheme}://{rest}"


#: Query parameters libpq reads as secrets (the password, and the client key's passphrase).
_SECRET_KEYS = ("password", "sslpassword")


def _public_query(query: str) -> str:
    """``query`` without its secrets: ``password=`` and ``sslpassword=`` go, and so does any
    item that is no ``key=value`` (an unquoted ``&`` inside a password would make its tail
    one; libpq refuses such items anyway)."""
    kept = []
    for item in query.split("&"):
        if "=" not in item:
            continue
        for key, value in parse_qsl(item, keep_blank_values=True):
            if key.lower() not in _SECRET_KEYS:
                kept.append(f"{key}={value}")
    return "&".join(kept)


def _ports_ok(netloc: str) -> bool:
    """Whether every host of ``netloc`` has a numeric port or none (``host:se`` is the start
    of a password that an unquoted ``/`` or ``?`` cut short, not a host)."""
    for host in netloc.rpartition("@")[2].split(","):
        if host.startswith("["):  # an IPv6 address: [::1]:5432
            port = host.partition("]")[2].removeprefix(":")
        else:
            port = host.rpartition(":")[2] if ":" in host else ""
        if port and not port.isdigit():
            return False
    return True


def _cut_by_hand(scheme: str, rest: str) -> str:
    """``scheme://`` and what follows the last ``@`` (everything before it may be a password
    with unquoted ``/``, ``?``, ``#`` or ``@`` in it): its host and path, and its query
    without secrets (cut at a ``&`` when there is no ``?``: that is already the query)."""
    tail = rest.rpartition("@")[2]
    head, mark, query = tail.partition("?")
    head = head.split("#", 1)[0].split("&", 1)[0]
    query = _public_query(query.split("#", 1)[0]) if mark else ""
    return f"{scheme}://{head}" + (f"?{query}" if query else "")


def redact_url(url: str) -> str:
    """``url`` as messages show it: the password left out, from the user part and from the
    query (``?password=...``, ``?sslpassword=...``); everything else kept, so the URL still
    names the store.

    A password with an unquoted ``/``, ``?``, ``#`` or ``@`` in it ends a parser's host part
    early, leaving its tail in the path or the query: when an ``@`` lies in the path, or the
    host part has a port that is no number, everything up to the last ``@`` goes (an ``@``
    in the query, as in ``?user=admin@server``, is no user part)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    try:
        parts = urlsplit(url)
        in_path = rest.rfind("@", 0, rest.find("?") if "?" in rest else len(rest))
        if in_path >= len(parts.netloc) or not _ports_ok(parts.netloc):
            return _cut_by_hand(scheme, rest)
        host = parts.netloc.rpartition("@")[2]
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit((parts.scheme, user + host, parts.path, _public_query(parts.query),
                           ""))
    except ValueError:
        return _cut_by_hand(scheme, rest)


def url_secrets(url: str) -> list[str]:
    """Every piece of ``url`` that may be a secret, longest first, raw and percent-decoded:
    the password of each possible user part (up to any ``@`` that can end one) and the first
    piece of it libpq would read, the values of ``password=``/``sslpassword=``, and a query
    item that is no ``key=value`` right after one (the tail of a password with an unquoted
    ``&``). Error messages quote what they could not parse; these are masked there."""
    rest = url.partition("://")[2]
    first_query = rest.find("?") if "?" in rest else len(rest)
    found: set[str] = set()
    for at in (i for i, c in enumerate(rest) if c == "@"):
        user = rest[:at]
        if ":" not in user or (
            at > first_query and "/" in user and _ports_ok(user.split("/", 1)[0])
        ):
            continue  # no password here, or an @ in the query after a host:port and a path
        password = user.split(":", 1)[1]
        found.update({password, password.split("/", 1)[0]})
    after_secret = False
    for item in rest[first_query + 1:].split("#", 1)[0].split("&"):
        key, eq, value = item.partition("=")
        if eq and key.lower() in _SECRET_KEYS:
            found.add(value)
            after_secret = True
        elif not eq and after_secret:
            found.add(item)
        else:
            after_secret = False
    found |= {unquote(f) for f in found}
    return sorted((f for f in found if len(f) >= 2), key=len, reverse=True)


def mask_secrets(text: str, url: str) -> str:
    """``text`` with every piece of ``url`` that may be a secret replaced by ``***``."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text

