"""Locations of other stores as messages and logs show them: never with a password.

A remote's text may be a folder, a ``postgresql://`` URL or an ``http(s)://`` URL, and may not
even parse; whatever it is, :func:`shown_location` returns it without ``user:password@`` (and
without a ``password=`` in the query), and never raises.
"""

from __future__ import annotations

from ..store.urls import is_store_url, redact_url, strip_userinfo

__all__ = ["shown_location"]


def shown_location(text: str) -> str:
    """``text`` (a remote's name, a folder, or a URL) as messages show it: no password."""
    if is_store_url(text):
        return redact_url(text)
    if text.lower().startswith(("http://", "https://")):
        from .http import shown_url

        return shown_url(text)
    if "://" in text:
        return strip_userinfo(text)
    return text
