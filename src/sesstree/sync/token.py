"""A sync token as an HTTP header carries it: checked once, wherever it came from (the
``--token-file``, ``SESS_TOKEN``, a caller), and never shown in an error."""

from __future__ import annotations

from ..errors import RemoteError

__all__ = ["sendable_token"]


def sendable_token(token: str, source: str) -> str:
    """``token`` if an HTTP header can carry it (printable ASCII), else a RemoteError naming
    ``source`` (where the token came from) but never the token."""
    # Checked here, not left to the HTTP client: its encoding error quotes the whole
    # "Bearer TOKEN" header, and a server could never match a header it cannot be sent.
    if not (token.isascii() and token.isprintable()):
        raise RemoteError(f"{source} holds a character other than printable ASCII, which an "
                          "HTTP header cannot carry (the token is not shown)")
    return token
