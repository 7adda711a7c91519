"""Writing a session out: chat messages (``openai``) or a tool's own file back (``claude``, ``pi``).

``claude`` and ``pi`` rebuild the file from the raw records the import kept: the lines of the
session's path, in order, so a session imported from such a file exports as the branch it is
(the header and ``sessionId`` come back from the session metadata). Lines are equal as JSON
to the source's, not byte for byte: stored data has its keys sorted. A session that was not
imported from that tool has no such records and cannot be written in its format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError
from ..repo.store import Store
from .common import write_new

__all__ = ["export_openai", "export_records", "render_openai", "render_records"]

_encoder = msgspec.json.Encoder()


def export_openai(store: Store, rev: str, out: Path | None = None, *, force: bool = False) -> Path:
    """Write the messages a model would be sent at ``rev``: the sending view (every tool call
    answered, no result without a call, no two user messages in a row).

    A ``.jsonl`` path gets one message per line; anything else a JSON array.
    """
    return write_new([render_openai(store, rev, out)], force=force)[0]


def render_openai(store: Store, rev: str, out: Path | None = None) -> tuple[Path, bytes]:
    """The file :func:`export_openai` writes: its path and its bytes."""
    messages = store.derive(rev, sending=True).messages
    target = out if out is not None else Path(f"{store.session_name_of(rev).replace('/', '_')}.json")
    if target.name.endswith(".jsonl"):
        data = b"".join(_encoder.encode(m) + b"\n" for m in messages)
    else:
        data = msgspec.json.format(_encoder.encode(messages), indent=1) + b"\n"
    return target, data


def export_records(
    store: Store, rev: str, fmt: str, out: Path | None = None, *, force: bool = False
) -> Path:
    """Rebuild the ``claude`` or ``pi`` JSONL file of the session at ``rev``."""
    return write_new([render_records(store, rev, fmt, out)], force=force)[0]


def render_records(store: Store, rev: str, fmt: str, out: Path | None = None) -> tuple[Path, bytes]:
    """The file :func:`export_records` writes: its path and its bytes."""
    chain = store.chain(rev)
    prefix = fmt + "/"
    records = [d for t, d in zip(chain.types, chain.datas, strict=True) if t.startswith(prefix)]
    if not records:
        raise InputError(f"{rev} was not imported from {fmt}: no {fmt} records to write")
    name = store.session_name_of(rev)
    meta: dict[str, Any] = (store.get_session_meta(name) if store.has_session(name) else None) or {}
    lines: list[dict[str, Any]] = []
    if fmt == "pi":
        header = meta.get("header")
        if isinstance(header, dict) and header:
            lines.append(header)
        lines.extend(records)
    else:
        sid = meta.get("sessionId")
        for r in records:
            if isinstance(sid, str) and "uuid" in r and "sessionId" not in r:
                r = {**r, "sessionId": sid}  # the import left it out of the hashed entries
            lines.append(r)
    target = out if out is not None else Path(f"{name.replace('/', '_')}.jsonl")
    data = b"".join(_encoder.encode(r) + b"\n" for r in lines)
    return target, data
