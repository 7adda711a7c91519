"""Store URLs: telling one from a folder, showing it safely, opening its backend.

Nothing here loads a database driver until a URL is opened: a store in a folder never pays
for psycopg, and a machine without it gets one clear error only when it asks for a URL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..errors import StoreError

if TYPE_CHECKING:
    from .base import Backend

__all__ = ["URL_SCHEMES", "is_store_url", "open_url", "redact_url", "strip_userinfo"]

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


def redact_url(url: str) -> str:
    """``url`` as messages show it: the password left out, from the user part and from the
    query (``?password=...``); everything else kept, so the URL still names the store.

    A password with an unquoted ``/``, ``?`` or ``#`` in it ends the host part early, and a
    parser would then leave its tail in the path or the query: when an ``@`` lies beyond the
    host part, everything up to the last ``@`` goes, with the query."""
    try:
        parts = urlsplit(url)
        if url.partition("://")[2].rfind("@") >= len(parts.netloc):
            return strip_userinfo(url)
        host = parts.netloc.rpartition("@")[2]
        user = f"{parts.username}@" if parts.username else ""
        query = "&".join(
            f"{k}={v}" for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() != "password"
        )
        return urlunsplit((parts.scheme, user + host, parts.path, query, ""))
    except ValueError:
        return url.split("://", 1)[0] + "://..."


def open_url(url: str, *, create: bool, durable: bool, timeout: float) -> Backend:
    """The backend of a store URL (today: PostgreSQL).

    Raises:
        StoreError: the driver is not installed (``pip install 'sesstree[postgres]'``), or any
            of the errors of :class:`~sesstree.store.postgres.PostgresBackend`.
    """
    try:
        from .postgres import PostgresBackend
    except ImportError as exc:
        raise StoreError(
            f"a PostgreSQL store needs psycopg, which is not installed ({exc.name}): "
            "pip install 'sesstree[postgres]'"
        ) from None
    return PostgresBackend(url, create=create, durable=durable, timeout=timeout)
