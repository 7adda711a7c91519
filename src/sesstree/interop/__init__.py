"""Import and export: the seed JSONL format, OpenAI chat messages, and other agent tools' files.

``import_files`` detects each file's format from its content (``format=`` forces one) and
returns one :class:`ImportResult` per session landed. ``export_session`` writes a session out.
See ``docs/formats.md`` for what each format maps to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from ..repo.store import Store
from ..store.base import Progress
from .claude import import_claude, looks_like_claude
from .codex import import_codex, looks_like_codex
from .common import ImportResult, write_new
from .export import render_openai, render_records
from .gemini_cli import import_gemini, looks_like_gemini
from .jsonl import decode_line
from .openai import import_openai_json, looks_like_messages
from .pi import import_pi, looks_like_pi
from .provenance import Provenance
from .seed import import_seed, render_seed

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "ImportResult",
    "detect_format",
    "export_session",
    "import_file",
    "import_files",
    "render_export",
]

#: Formats ``sess import --format`` accepts; "auto" detects from the content. ``openai`` is a
#: JSON array (or ``{"messages": [...]}``) of chat messages, or JSONL like ``seed``.
FORMATS = ("auto", "seed", "openai", "claude", "pi", "codex", "gemini")
#: Formats ``sess export --format`` writes.
EXPORT_FORMATS = ("seed", "jsonl", "openai", "claude", "pi")

# Folders hold these; anything else (and seed ``.meta.json`` sidecars) is not a transcript.
_SUFFIXES = (".jsonl", ".json")
_SNIFF_BYTES = 1 << 16


def _first_records(path: Path, limit: int = 8) -> list[Any]:
    with path.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    out = []
    for line in head.split(b"\n")[:-1] if len(head) == _SNIFF_BYTES else head.split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(decode_line(line))
        except InputError:
            continue
        if len(out) >= limit:
            break
    return out


def detect_format(path: Path) -> str | None:
    """The format of a file from its content: seed, openai, claude, pi, codex, gemini, or
    None."""
    try:
        with path.open("rb") as f:
            start = f.read(64).lstrip()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if start.startswith(b"[") and path.name.endswith(".json"):
        # A JSON array: chat messages, or a Gemini CLI checkpoint (Content[]) or prompt log.
        try:
            whole = decode_line(path.read_bytes())
        except (InputError, OSError):
            return "openai"  # the strict openai reader says what is wrong with it
        return "gemini" if looks_like_gemini(whole) else "openai"
    if start.startswith(b"["):
        return "openai"
    try:
        records = _first_records(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if start.startswith(b"{") and len(records) <= 1 and path.name.endswith(".json"):
        try:
            whole = decode_line(path.read_bytes())
        except InputError:
            return None
        if looks_like_gemini(whole):
            return "gemini"
        return "openai" if looks_like_messages(whole) else None
    objects = [r for r in records if isinstance(r, dict)]
    if not objects:
        return None
    if looks_like_gemini(objects[0]):
        return "gemini"
    if looks_like_pi(objects[0]):
        return "pi"
    if any(looks_like_codex(r) for r in objects):
        return "codex"
    if any(looks_like_claude(r) for r in objects):
        return "claude"
    if all("role" in r for r in objects):
        return "seed"
    return None


def _is_empty(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return not f.read(_SNIFF_BYTES).strip() and not f.read(1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None


def import_file(
    store: Store, path: Path, *, name: str | None = None, format: str = "auto",
    force: bool = False, owners: Provenance | None = None,
) -> list[ImportResult]:
    """Import one file; one result per session landed (a tree file lands one per leaf).

    A re-import lands on the sessions of the earlier import, wherever they are now (see
    :mod:`sesstree.interop.provenance`); ``owners`` is that map, built once per run.
    ``name`` (``--as``) never takes over a session of another history unless ``force``.

    Raises:
        InputError: the file cannot be read, is empty, its format is unknown, (seed and openai
            JSON, which are strict) it is malformed, or ``name`` holds another history.
    """
    if _is_empty(path):
        raise InputError("empty file: nothing to import", path=str(path))
    fmt = detect_format(path) if format == "auto" else format
    if fmt is None:
        raise InputError("format not recognised; use --format", path=str(path))
    if fmt == "openai" and path.name.endswith(".jsonl"):
        fmt = "seed"
    owners = owners if owners is not None else Provenance(store)
    if fmt == "seed":
        return [import_seed(store, path, name, owners=owners, force=force)]
    if fmt == "openai":
        return [import_openai_json(store, path, name, owners=owners, force=force)]
    if fmt == "claude":
        return import_claude(store, path, name, owners=owners, force=force)
    if fmt == "pi":
        return import_pi(store, path, name, owners=owners, force=force)
    if fmt == "codex":
        return import_codex(store, path, name, owners=owners, force=force)
    if fmt == "gemini":
        return import_gemini(store, path, name, owners=owners, force=force)
    raise InputError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def import_files(
    store: Store,
    paths: list[Path],
    *,
    name: str | None = None,
    format: str = "auto",
    recursive: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> list[ImportResult]:
    """Import every file (or folder, with ``recursive``); one result per session landed.

    ``progress`` is called with ``(files done, files in all)`` once the files are listed and
    after each file.

    A file named on the command line that cannot be imported raises InputError. In a folder,
    empty files and files of no known format are results with outcome ``skipped`` and a file
    that fails is a result with outcome ``failed`` (the reason in ``problems``), so one bad
    transcript does not stop the rest.

    Raises:
        InputError: a named file cannot be imported, or nothing to import was found at all
            (folders holding no transcript).
    """
    if format not in FORMATS:
        raise InputError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    named: list[Path] = []
    found: list[Path] = []
    folders: list[Path] = []
    for p in paths:
        if p.is_dir():
            if not recursive:
                raise InputError("is a folder; use --recursive", path=str(p))
            folders.append(p)
            found.extend(sorted(
                q for q in p.rglob("*")
                if q.is_file() and q.name.endswith(_SUFFIXES) and not q.name.endswith(".meta.json")
            ))
        elif not p.exists():
            raise InputError("no such file", path=str(p))
        else:
            named.append(p)
    if name is not None and len(named) + len(found) > 1:
        raise InputError("--as names one session; give one file")
    owners = Provenance(store)  # one read of every session's provenance for the whole run
    results: list[ImportResult] = []
    total = len(named) + len(found)
    if progress is not None:
        progress(0, total)
    for done, f in enumerate(named, 1):
        results.extend(import_file(store, f, name=name, format=format, force=force,
                                   owners=owners))
        if progress is not None:
            progress(done, total)
    transcripts = 0
    for done, f in enumerate(found, len(named) + 1):
        try:
            fmt = None if _is_empty(f) else detect_format(f) if format == "auto" else format
            if fmt is None:
                # Said, not silently passed over: a nightly run shows what it did not import.
                why = "empty file" if _is_empty(f) else "format not recognised"
                results.append(ImportResult(str(f.resolve()), "", "skipped", 0, 0,
                                            problems=[f"{f}: {why}; skipped"]))
                continue
            transcripts += 1
            results.extend(import_file(store, f, name=name, format=fmt, force=force,
                                       owners=owners))
        except InputError as exc:
            results.append(ImportResult(str(f.resolve()), "", "failed", 0, 0,
                                        problems=[str(exc)]))
        finally:
            if progress is not None:
                progress(done, total)
    if not named and not transcripts and all(r.outcome == "skipped" for r in results):
        where = ", ".join(str(f) for f in folders)
        what = (f"{len(found)} .jsonl/.json file(s), none a transcript of a known format"
                if found else "no .jsonl or .json file")
        raise InputError(f"nothing to import: {what}", path=where)
    return results


def render_export(
    store: Store, rev: str, *, out: Path | None = None, format: str = "seed"
) -> list[tuple[Path, bytes]]:
    """What :func:`export_session` would write, without writing it: each file's path and its
    bytes, the main file first (``seed`` adds ``NAME.meta.json`` after it)."""
    if format in ("seed", "jsonl"):
        return render_seed(store, rev, out)
    if format == "openai":
        return [render_openai(store, rev, out)]
    if format in ("claude", "pi"):
        return [render_records(store, rev, format, out)]
    raise InputError(f"unknown export format {format!r}; expected one of "
                     f"{', '.join(EXPORT_FORMATS)}")


def export_session(
    store: Store, rev: str, *, out: Path | None = None, format: str = "seed", force: bool = False
) -> list[Path]:
    """Write a session out in ``format`` (one of :data:`EXPORT_FORMATS`); returns the files.

    ``seed``/``jsonl``: the stored messages, one per line, plus ``NAME.meta.json``.
    ``openai``: the messages a model would be sent, as a JSON array (JSONL if ``out`` ends in
    ``.jsonl``). ``claude``/``pi``: the tool's own file, rebuilt from the imported records.
    An existing file is not replaced unless ``force``; files are replaced atomically and never
    written through a symbolic link (see :func:`~sesstree.interop.common.write_new`).
    """
    return write_new(render_export(store, rev, out=out, format=format), force=force)
