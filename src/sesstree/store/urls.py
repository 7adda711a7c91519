"""Telling a store URL from a folder, without loading any database driver."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["URL_SCHEMES", "is_store_url", "redact_url"]

#: URL schemes that name a PostgreSQL store.
URL_SCHEMES = ("postgresql://", "postgres://")


def is_store_url(text: object) -> bool:
    """True if ``text`` is a PostgreSQL URL (``postgresql://...`` or ``postgres://...``)."""
    return isinstance(text, str) and text.lower().startswith(URL_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` as messages show it: the password left out, from the user part and from the
    query (``?password=...``); everything else kept, so the URL still names the store."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        user = f"{parts.username}@" if parts.username else ""
        query = "&".join(
            f"{k}={v}" for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() != "password"
        )
        return urlunsplit((parts.scheme, user + host, parts.path, query, ""))
    except ValueError:
        return url.split("://", 1)[0] + "://..."
