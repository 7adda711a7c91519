"""What a search matches: the one definition every engine's text index answers exactly.

A node's searchable text is :func:`node_text` (``text.event_text`` in the ``SEARCH`` style:
what a person reads, never ids or bookkeeping). Text is compared *folded* where a query
ignores case, and an index keys *folded tokens*:

- :func:`fold`: case folded (``str.casefold``), canonically decomposed (NFD) and with every
  combining mark dropped, character by character, so ``Straße`` folds to ``strasse`` and
  ``Café`` to ``cafe``, and the fold of a string is the folds of its characters end to end;
- :func:`tokens`: the runs of word characters (``\\w``: letters, digits and ``_`` of any
  script) of the folded text, so ``cache_control`` and ``ECONNRESET`` are one token each.

An engine's index keeps each node's tokens (the SQLite engine feeds them, space-joined, to an
FTS5 table whose tokenizer splits exactly there), so the candidates it finds are exactly the
nodes whose tokens hold the query's; :func:`matches` then decides, on the node's text, what
the tokens cannot (order, case, substrings). Results therefore equal a brute-force scan with
:func:`matches` over every node: the contract checks that on every engine.

A query (``SearchQuery``) is one of:

- ``words`` (the default): every word of the pattern is a whole word of the text (folded);
  without ``ignore_case`` also as written (each word of the pattern, case and accents as
  typed, is a whole word of the text);
- ``phrase``: the words one after another, only non-word characters between them;
- ``substring``: the pattern occurs in the text as it is (with ``ignore_case``: folded).

Patterns are checked by :func:`check_query` before any engine sees them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from ..errors import SearchQueryError
from ..text import SEARCH, event_text
from .base import SearchQuery

__all__ = [
    "MAX_PATTERN",
    "candidate_slices",
    "check_query",
    "first_match",
    "fold",
    "fold_with_origin",
    "matches",
    "node_role",
    "node_text",
    "query_words",
    "tokens",
]

#: The longest pattern searched for, in characters: a longer one is refused, not cut.
MAX_PATTERN = 1000
#: The most words a words or phrase query may have.
MAX_WORDS = 32
_WORD = re.compile(r"\w+")
_ROLES = {"system/message": "system", "user/message": "user",
          "assistant/message": "assistant", "assistant/chunk": "assistant",
          "tool/result": "tool", "tool/call": "assistant"}


def node_text(type: str, data: Any) -> str:
    """The text a search reads of a node of ``type`` holding ``data``."""
    return event_text(type, data, SEARCH)


def node_role(type: str, data: Any) -> str:
    """Who a node speaks for: its message's ``role`` when it has one, else by its type
    (``tool/call`` is the assistant's, ``tool/result`` the tool's), else the type's first
    part (``error``, ``usage``, ``turn``, ``compaction``)."""
    if isinstance(data, dict):
        role = data.get("role")
        if isinstance(role, str) and role:
            return role
    return _ROLES.get(type) or type.partition("/")[0]


@lru_cache(maxsize=65536)
def _fold_char(c: str) -> str:
    decomposed = unicodedata.normalize("NFD", c.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def fold(text: str) -> str:
    """``text`` with case and accents folded (see the module)."""
    if text.isascii():
        return text.lower()
    return "".join(map(_fold_char, text))


def fold_with_origin(text: str) -> tuple[str, list[int] | None]:
    """:func:`fold` and, where a character's fold is not one character, which character of
    ``text`` each character of the fold came from (None: the places are the same)."""
    if text.isascii():
        return text.lower(), None
    parts = [_fold_char(c) for c in text]
    if all(len(p) == 1 for p in parts):
        return "".join(parts), None
    origin = [i for i, p in enumerate(parts) for _ in p]
    return "".join(parts), origin


#: Every ASCII character that is not a word character (``\w``), as a space.
_ASCII_GAPS = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})


def tokens(text: str) -> list[str]:
    """The folded tokens of ``text``, in order (what an index keeps of it)."""
    if text.isascii():
        # (The same runs as ``\w+`` finds, a few times faster: an index tokenizes every
        # node it is given, and most text is ASCII.)
        return text.lower().translate(_ASCII_GAPS).split()
    return _WORD.findall(fold(text))


def query_words(query: SearchQuery) -> list[str]:
    """The folded tokens an index looks up for ``query``: a node can match only if each is
    one of its tokens (words, phrase) or inside one of its tokens (substring); none for a
    substring without word characters (every node is a candidate)."""
    return _WORD.findall(fold(query.pattern))


def check_query(query: SearchQuery) -> None:
    """Refuse a pattern no search can answer well, with one message a user can act on.

    Raises:
        SearchQueryError: an empty or too long pattern, a words or phrase pattern with no
            word in it (only punctuation: ``-F`` searches it as it is) or with too many, a
            negative page size, or ``since`` after ``until``.
    """
    pattern = query.pattern
    if not pattern or (not pattern.strip() and query.mode != "substring"):
        raise SearchQueryError("the search pattern is empty")
    if len(pattern) > MAX_PATTERN:
        raise SearchQueryError(
            f"the search pattern is {len(pattern):,} characters long; at most {MAX_PATTERN:,} are searched"
        )
    if query.mode not in ("words", "phrase", "substring"):
        raise SearchQueryError(f"unknown search mode {query.mode!r}: words, phrase or substring")
    if query.mode == "substring" and query.ignore_case and not fold(pattern):
        raise SearchQueryError("the search pattern is only accents: nothing is left of it to search for")
    if query.mode != "substring":
        words = query_words(query)
        if not words:
            raise SearchQueryError(
                f"the pattern {pattern[:60]!r} has no word to search for: search it as a "
                "literal string (sess grep -F)"
            )
        if len(words) > MAX_WORDS:
            raise SearchQueryError(f"the pattern has {len(words)} words; at most {MAX_WORDS} are searched")
    if query.since is not None and query.until is not None and query.since > query.until:
        raise SearchQueryError("--since is after --until: nothing can match")


def _words_pattern(words: list[str], phrase: bool) -> list[re.Pattern[str]]:
    if phrase:
        return [re.compile(r"(?<!\w)" + r"\W+".join(map(re.escape, words)) + r"(?!\w)")]
    return [re.compile(r"(?<!\w)" + re.escape(w) + r"(?!\w)") for w in dict.fromkeys(words)]


@lru_cache(maxsize=64)
def _patterns(query: SearchQuery) -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]]:
    """The regular expressions a words or phrase query must find: on the folded text, and
    (without ``ignore_case``) on the text as written."""
    phrase = query.mode == "phrase"
    folded = _words_pattern(query_words(query), phrase)
    raw = [] if query.ignore_case else _words_pattern(_WORD.findall(query.pattern), phrase)
    return folded, raw


def matches(query: SearchQuery, text: str) -> bool:
    """Whether ``text`` (a node's :func:`node_text`) holds what ``query`` asks for: the
    reference every engine's search equals (the query's filters aside)."""
    if query.mode == "substring":
        if query.ignore_case:
            return fold(query.pattern) in fold(text)
        return query.pattern in text
    folded, raw = _patterns(query)
    ftext = fold(text)
    return all(p.search(ftext) for p in folded) and all(p.search(text) for p in raw)


def first_match(query: SearchQuery, text: str) -> tuple[int, int] | None:
    """Where in ``text`` the first match of ``query`` is (start, end), for a snippet; None
    when it does not match."""
    if not matches(query, text):
        return None
    if query.mode == "substring" and not query.ignore_case:
        at = text.find(query.pattern)
        return at, at + len(query.pattern)
    folded, origin = fold_with_origin(text)
    if query.mode == "substring":
        needle = fold(query.pattern)
        at = folded.find(needle)
        span = (at, at + len(needle))
    else:
        found = [m for m in (p.search(folded) for p in _patterns(query)[0]) if m is not None]
        first = min(found, key=lambda m: m.start())
        span = first.span()
    if origin is None:
        return span
    start, end = origin[span[0]], origin[span[1] - 1] + 1
    while end < len(text) and unicodedata.combining(text[end]):
        end += 1  # an accent is not cut off its letter
    return start, end


def candidate_slices(limit: int) -> Iterator[int]:
    """How many candidates an engine's index reads at a time for a page of ``limit`` hits:
    twice the page at first (a page of 20 reads 40 rows, not 256), each next slice twice the
    last, up to 1,024, so a page among many rows that do not match (or that no session
    reaches) is read in a few slices."""
    size = max(16, min(256, 2 * limit))
    while True:
        yield size
        size = min(1024, 2 * size)
