"""OpenAI chat messages as one JSON document: a bare array, or an object with ``messages``.

Each message is stored as it is (every key kept, unknown roles as ``message`` events), as the
seed's JSONL lines are. Other keys of a trajectory object (``info``, ``trajectory_format``...)
go to the session metadata. Like the seed format this is strict: a message that is not an
object is an error, because skipping it would change the conversation.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..node import check_ref_name
from ..repo.store import Store
from .common import ImportResult, land, message_chain
from .jsonl import decode_line
from .provenance import Origin, Provenance

__all__ = ["import_openai_json", "looks_like_messages", "messages_of"]


def looks_like_messages(value: Any) -> bool:
    """True for a JSON array of chat messages or an object holding one under ``messages``."""
    if isinstance(value, dict):
        value = value.get("messages")
    return isinstance(value, list) and all(
        isinstance(m, dict) and "role" in m for m in value[:20]
    )


def messages_of(value: Any, path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The messages of a parsed document, and the rest of it (None for a bare array)."""
    rest = None
    if isinstance(value, dict):
        rest = {k: v for k, v in value.items() if k != "messages"}
        value = value.get("messages")
    if not isinstance(value, list):
        raise InputError("expected a JSON array of messages", path=str(path))
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise InputError(f"message {i} is a {type(m).__name__}, not an object",
                             path=str(path))
    return value, rest


def import_openai_json(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False,
) -> ImportResult:
    """Import a JSON file of chat messages into session ``name`` (default: the file's stem)."""
    try:
        value = decode_line(path.read_bytes())
    except InputError as exc:
        raise InputError(str(exc), path=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    messages, rest = messages_of(value, path)
    # NFC: a file name from macOS (NFD) names the same session as one typed by hand.
    session = name or unicodedata.normalize(
        "NFC", path.name.removesuffix(".json").removesuffix(".traj"))
    check_ref_name(session)
    nodes = message_chain(messages, path)
    meta: dict[str, Any] = {"format": "openai", "source": str(path)}
    if rest:
        meta["document"] = rest
    return land(store, session, nodes, origin=Origin("openai", str(path.resolve())),
                owners=owners if owners is not None else Provenance(store),
                explicit_name=name is not None, force=force, meta=meta)
