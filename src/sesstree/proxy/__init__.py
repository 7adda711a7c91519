"""``sess proxy``: a recording pass-through for the OpenAI, Anthropic and Gemini APIs.

Point any agent's base URL at the proxy: every request and reply passes through untouched,
and the conversations are recorded into a store, re-sent history deduplicated by content
(see ``docs/proxy.md``).

The application needs the ``proxy`` extra (uvicorn, httpx and its transport httpcore);
importing :mod:`sesstree.proxy.app` loads them.
"""

from __future__ import annotations

from . import wireforms  # noqa: F401  (registers the protocols' wire forms before any key)
from .canonical import EMPTY_KEY, canonical_message, canonical_unit, chain_key, register_wire_form
from .protocols import ParsedRequest, parse_request, protocol_of
from .recorder import Exchange, Outcome, Recorder, Stats, redact
from .replies import ReplyBuilder, ReplyResult, SseParser

__all__ = [
    "EMPTY_KEY",
    "Exchange",
    "Outcome",
    "ParsedRequest",
    "Recorder",
    "ReplyBuilder",
    "ReplyResult",
    "SseParser",
    "Stats",
    "canonical_message",
    "canonical_unit",
    "chain_key",
    "parse_request",
    "protocol_of",
    "redact",
    "register_wire_form",
]
