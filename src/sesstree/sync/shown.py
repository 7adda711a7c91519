"""Locations of other stores as messages and logs show them: never with a password.

A remote's text may be a folder, a ``postgresql://`` URL or an ``http(s)://`` URL, and may not
even parse; whatever it is, :func:`shown_location` returns it without ``user:password@`` (and
without a ``password=`` in the query), and never raises.
"""

from __future__ import annotations

from ..store.urls import is_store_url, redact_url, strip_userinfo

__all__ = ["shown_location", "shown_url", "url_problem"]


def shown_location(text: str) -> str:
    """``text`` (a remote's name, a folder, or a URL) as messages show it: no password."""
    if is_store_url(text):
        return redact_url(text)
    if text.lower().startswith(("http://", "https://")):
        return shown_url(text)
    if "://" in text:
        return strip_userinfo(text)
    return text


def shown_url(url: str) -> str:
    """``url`` without any user or password part, query or fragment, for messages; never
    raises (text that does not parse is cut by hand: see
    :func:`sesstree.store.urls.strip_userinfo`)."""
    import httpx  # here: showing a folder or a database URL need not load the HTTP client

    try:
        parsed = httpx.URL(url)
        if parsed.host:
            return str(parsed.copy_with(username=None, password=None, query=None,
                                        fragment=None)).rstrip("/")
    except (httpx.InvalidURL, ValueError, TypeError):
        pass
    return strip_userinfo(url).rstrip("/")


def url_problem(url: str, exc: Exception) -> str:
    """Why ``url`` does not parse, safe to show: httpx's reason quotes pieces of the URL (a
    password with an unquoted ``/`` is read as the port), so with a user part it is left out."""
    if "@" in url:
        return "not a valid http(s) URL (quote special characters in the user part as %XX)"
    return str(exc).splitlines()[0][:200] if str(exc) else "not a valid http(s) URL"
