"""The seed format: one OpenAI chat message per line (``NAME.jsonl``), plus ``NAME.meta.json``.

Import is strict: a malformed or truncated line is an error naming the file and the line, and
nothing of that file is imported, because dropping a message would change the conversation the
model sees. Every key of every message is kept, unknown roles included.
"""

from __future__ import annotations

import datetime
import unicodedata
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError
from ..events import derive_exact
from ..node import check_ref_name
from ..repo.store import Store
from .common import ImportResult, land, message_chain, write_new
from .jsonl import decode_line, read_records
from .provenance import PROVENANCE_KEY, Origin, Provenance

__all__ = ["export_seed", "import_seed", "read_seed", "render_seed"]


def read_seed(path: Path) -> list[dict[str, Any]]:
    """The messages of a seed JSONL file. Raises InputError naming the file and line."""
    return [record.data for record in read_records(path, [], strict=True)]


def import_seed(
    store: Store, path: Path, name: str | None = None, *, owners: Provenance | None = None,
    force: bool = False,
) -> ImportResult:
    """Import one seed file into session ``name`` (default: the file name without ``.jsonl``).

    Raises:
        InputError: a bad line (named), a bad ``.meta.json``, or ``name`` holds another
            history and ``force`` is not given.
    """
    records = read_records(path, [], strict=True)
    messages = [record.data for record in records]
    meta_path = path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")
    meta = None
    if meta_path.exists():
        try:
            meta = decode_line(meta_path.read_bytes())
        except InputError as exc:
            raise InputError(str(exc), path=str(meta_path)) from None
    # NFC: a file name from macOS (NFD) names the same session as one typed by hand.
    stem = unicodedata.normalize("NFC", path.name.removesuffix(".jsonl"))
    session = name or stem
    known = meta.get("id") if isinstance(meta, dict) else None
    if name is None and isinstance(known, str) and known.replace("/", "_") == stem:
        session = known  # a session with '/' in its name was exported as NAME_WITH_UNDERSCORES
    check_ref_name(session)  # before anything is written
    if isinstance(meta, dict):
        meta.pop(PROVENANCE_KEY, None)  # provenance is the store's to say, not the file's
    nodes = message_chain(messages, path, [record.line for record in records])
    return land(store, session, nodes, origin=Origin("seed", str(path.resolve())),
                owners=owners if owners is not None else Provenance(store),
                explicit_name=name is not None, force=force,
                meta=meta if isinstance(meta, dict) else None)


# Line breaks to Python's str.splitlines (which the seed's loader uses) that JSON leaves raw;
# they can only occur inside strings, where an escape means the same.
_LINE_BREAKS = {"\u2028": b"\\u2028", "\u2029": b"\\u2029", "\u0085": b"\\u0085"}


def _one_line(encoded: bytes) -> bytes:
    for char, escape in _LINE_BREAKS.items():
        raw = char.encode()
        if raw in encoded:
            encoded = encoded.replace(raw, escape)
    return encoded


def export_seed(
    store: Store, rev: str, out: Path | None = None, *, force: bool = False
) -> list[Path]:
    """Write ``NAME.jsonl`` and ``NAME.meta.json`` for revision ``rev``; returns both paths.

    The lines are the session's messages as stored, in order (context and steering events as
    the tagged user messages the model saw); a session imported from a seed file comes back
    equal to it, every key and unknown role kept.
    """
    return write_new(render_seed(store, rev, out), force=force)


def render_seed(store: Store, rev: str, out: Path | None = None) -> list[tuple[Path, bytes]]:
    """The two files :func:`export_seed` writes: the JSONL first, then the metadata."""
    name = store.session_name_of(rev)
    chain = store.chain(rev)
    messages = derive_exact(chain.types, chain.datas, lambda: chain.ids, problems=False).messages
    jsonl = out if out is not None else Path(f"{name.replace('/', '_')}.jsonl")
    meta_path = jsonl.with_name(jsonl.name.removesuffix(".jsonl") + ".meta.json")
    meta = store.get_session_meta(name) if store.has_session(name) else None
    if meta is not None:
        meta.pop(PROVENANCE_KEY, None)  # where the store imported it from: not the file's
    if not meta:
        now = datetime.datetime.now(datetime.timezone.utc).isoformat()
        meta = {"id": name, "head": chain.ids[-1] if chain.ids else None,
                "messages": len(messages), "exportedAt": now}
    encoder = msgspec.json.Encoder()
    return [
        (jsonl, b"".join(_one_line(encoder.encode(m)) + b"\n" for m in messages)),
        (meta_path, encoder.encode(meta) + b"\n"),
    ]
