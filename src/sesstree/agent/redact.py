"""Text that leaves the provider: secrets scrubbed out, error bodies made one readable line.

Everything a server sends can reach an event, a log line or the terminal: an error body, a
stream event, even a reply. A server or proxy that echoes the API key back (in a 401, in a 200
error body, in a garbage stream event, in the reply text itself) must not get it recorded, so
every text from the server goes through :class:`Redactor` before anything else looks at it.
"""

from __future__ import annotations

import html
import json
import logging
import re
import urllib.parse
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

__all__ = [
    "MIN_SECRET",
    "REDACTED",
    "PieceScrubber",
    "Redactor",
    "one_line",
    "scrub_http_logs",
    "secret_header_values",
    "shown_url",
]

#: What a secret is replaced with.
REDACTED = "***"

#: Shorter values are not treated as secrets: scrubbing a placeholder key such as Ollama's
#: ``ollama`` would rewrite that word in every reply, and no real credential is this short.
MIN_SECRET = 8

#: Header names whose values are credentials (``Authorization``, ``api-key``, ``x-api-key``,
#: ``X-Auth-Token``, ``Cookie``...).
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|password|signature", re.IGNORECASE)


def secret_header_values(headers: Mapping[str, str]) -> list[str]:
    """The credentials in ``headers``: each secret-looking value, and its token without the
    scheme (``Bearer sk-...`` gives both ``Bearer sk-...`` and ``sk-...``, since servers echo
    the bare token)."""
    out: list[str] = []
    for name, value in headers.items():
        if not _SECRET_HEADER.search(name) or not isinstance(value, str):
            continue
        out.append(value)
        parts = value.split(None, 1)
        if len(parts) == 2:
            out.append(parts[1])
    return out


def shown_url(url: str) -> tuple[str, list[str]]:
    """``url`` as messages may show it, and the credentials taken out of it.

    A password in the URL (``https://user:pw@host``, sent as an ``Authorization`` header) and
    the value of a query parameter named like a credential (``?key=...``, ``?api_key=...``)
    are replaced by ``***``.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return url, []
    secrets: list[str] = []
    netloc = parts.netloc
    if password:
        secrets.append(password)
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        shown = []
        for name, value in pairs:
            if _SECRET_HEADER.search(name) and value:
                secrets.append(value)
                value = REDACTED
            shown.append((name, value))
        query = urllib.parse.urlencode(shown, safe="*")
    if not secrets:
        return url, []
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query)), secrets


class Redactor:
    """Replaces every secret, in every spelling a server might echo it, with ``***``.

    A secret is looked for as it is, JSON-escaped, ``repr``-escaped and URL-encoded, so an echo
    inside a JSON string, a Python error message or a query string is caught too. Decoded JSON
    is scrubbed value by value (:meth:`value`), which also catches a key a server sent with
    ``\\u`` escapes. Text is scrubbed before it is shortened, so a cut never leaves a prefix.
    """

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if not secret or len(secret) < MIN_SECRET:
                continue
            forms.update(
                (
                    secret,
                    json.dumps(secret)[1:-1],
                    json.dumps(secret, ensure_ascii=False)[1:-1],
                    repr(secret)[1:-1],
                    urllib.parse.quote(secret, safe=""),
                    urllib.parse.quote_plus(secret),
                )
            )
        # Longest first: a secret that contains another is replaced whole.
        self._forms = sorted((f for f in forms if f), key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def open_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that a secret starts with (0 if none):
        that much must wait for the next piece of a stream before it can be shown."""
        best = 0
        for form in self._forms:
            first = form[0]
            start = max(0, len(text) - len(form) + 1)
            pos = text.find(first, start)
            while pos != -1:
                k = len(text) - pos
                if k > best and form.startswith(text[pos:]):
                    best = k
                    break  # later positions give shorter ends
                pos = text.find(first, pos + 1)
        return best

    def value(self, value: Any) -> Any:
        """A decoded JSON value with every string (keys included) scrubbed; new containers
        only where something changed."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value


class PieceScrubber:
    """Scrubs secrets from text that arrives in pieces (a streamed reply, call arguments).

    A secret split over two pieces is in neither, so the end of a piece that could be the
    start of a secret is held back until the next piece of the same channel shows whether it
    is one; :meth:`rest` gives what is still held when the stream is complete. So the pieces
    passed on never hold a secret, nor a part of one.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._held: dict[Any, str] = {}

    def piece(self, channel: Any, text: str) -> str:
        """What of ``text`` (after what was held on ``channel``) can be passed on now."""
        if not self.redactor:
            return text
        text = self.redactor.text(self._held.pop(channel, "") + text)
        keep = self.redactor.open_prefix(text)
        if keep:
            self._held[channel] = text[-keep:]
            return text[:-keep]
        return text

    def rest(self) -> dict[Any, str]:
        """What is held, by channel, now that no piece follows (it was no secret)."""
        held, self._held = self._held, {}
        return held


_TAG = re.compile(r"<[^>]*>")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_DROP = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_SPACE = re.compile(r"\s+")


def one_line(text: str, limit: int = 200) -> str:
    """``text`` as one line of at most ``limit`` characters, for an error message.

    An HTML page (a proxy's 502, a login page) becomes its visible text, or its title; runs of
    whitespace, newlines included (a template error's traceback), become one space; a longer
    text is cut with an ellipsis. Scrub secrets *before* calling this.
    """
    stripped = text.strip()
    if stripped.startswith("<") and ("</" in stripped or "<!" in stripped.lower()):
        # Its visible text (the <head>, scripts and styles dropped), else its title.
        title = _TITLE.search(stripped)
        visible = html.unescape(_TAG.sub(" ", _DROP.sub(" ", stripped)))
        stripped = visible if visible.strip() else html.unescape(title.group(1) if title else "")
    flat = _SPACE.sub(" ", stripped).strip()
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return flat or "(empty body)"


class _Redacts(Protocol):
    def redact(self, text: str) -> str: ...


#: httpx's logger and httpcore's (a filter on a logger does not apply to its children).
_HTTP_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.connection_pool",
                 "httpcore.http11", "httpcore.http2", "httpcore.proxy", "httpcore.socks")


class _ScrubHTTPLogs(logging.Filter):
    """Scrubs the secrets of every live provider from httpx's and httpcore's log records.

    httpcore logs each failed exchange at DEBUG with the exception's text, and httpx's
    exceptions quote what the server sent (an illegal status line that echoes the key, say):
    a user who turns on debug logging must not find the key in the log.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sources: weakref.WeakSet[_Redacts] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        sources = list(self.sources)
        if sources:
            text = clean = record.getMessage()
            for source in sources:
                clean = source.redact(clean)
            if clean != text:
                record.msg, record.args = clean, ()
        return True


_scrubber: _ScrubHTTPLogs | None = None


def scrub_http_logs(source: _Redacts) -> None:
    """Scrub ``source``'s secrets (``source.redact``) from httpx's and httpcore's logs for as
    long as ``source`` lives."""
    global _scrubber
    if _scrubber is None:
        _scrubber = _ScrubHTTPLogs()
        for name in _HTTP_LOGGERS:
            logging.getLogger(name).addFilter(_scrubber)
    _scrubber.sources.add(source)
