"""Locations of other stores as messages and logs show them: never with a password.

A remote's text may be a folder, a ``postgresql://`` URL or an ``http(s)://`` URL, and may not
even parse; whatever it is, :func:`shown_location` returns it without ``user:password@`` (and
without a ``password=`` in the query), and never raises.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..store.urls import is_store_url, redact_url

__all__ = ["shown_location", "strip_userinfo"]


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


def shown_location(text: str) -> str:
    """``text`` (a remote's name, a folder, or a URL) as messages show it: no password."""
    if is_store_url(text):
        # A password with an unquoted ``/`` or ``?`` in it ends the host part early, so
        # urlsplit would leave its tail in the path: cut by hand when an ``@`` lies beyond.
        try:
            netloc = urlsplit(text).netloc
        except ValueError:
            return strip_userinfo(text)
        if text.partition("://")[2].rfind("@") >= len(netloc):
            return strip_userinfo(text)
        return redact_url(text)
    if text.lower().startswith(("http://", "https://")):
        from .http import shown_url

        return shown_url(text)
    if "://" in text:
        return strip_userinfo(text)
    return text
