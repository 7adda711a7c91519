"""Reading the JSONL transcripts of other tools tolerantly, and naming what comes out of them.

Those files are written while the tool runs: a crash can truncate the last line, and a torn
write can glue two records onto one line. Dropping the whole file for that would lose a
transcript the user cannot get back, so a bad line is reported (file and line) and skipped,
and two or more objects glued onto one line are all recovered and reported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError
from ..events import is_registered, register_event_type

__all__ = ["Record", "decode_line", "parse_records", "read_records", "record_type", "ref_safe",
           "session_base"]

_decoder = msgspec.json.Decoder()
_raw = json.JSONDecoder()


class Record(msgspec.Struct, frozen=True):
    """One JSON object of a transcript and the (1-based) line it came from."""

    line: int
    data: dict[str, Any]


def read_records(path: Path, problems: list[str], *, strict: bool = False) -> list[Record]:
    """Every JSON object of a JSONL file, in order; bad lines are reported in ``problems``.

    With ``strict`` (files that are the conversation itself, like the seed's), the first bad
    line is an InputError naming the file and the line instead.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    return parse_records(raw, path, problems, strict=strict)


def parse_records(raw: bytes, path: Path, problems: list[str], *, first_line: int = 1,
                  strict: bool = False) -> list[Record]:
    """:func:`read_records` of bytes already read: ``raw`` is a stretch of ``path`` whose first
    line is line ``first_line`` of the file (a watch reads a file as it grows, a stretch at a
    time, and numbers its lines as a whole read would)."""
    out: list[Record] = []
    for number, line in enumerate(raw.split(b"\n"), first_line):
        if not line.strip():
            continue
        try:
            value = decode_line(line)
        except InputError as exc:
            if strict:
                raise InputError(str(exc), path=str(path), line=number) from None
            recovered = _glued(line)
            if recovered:
                problems.append(
                    f"{path}:{number}: {len(recovered)} JSON objects on one line; "
                    "all were imported"
                )
                out.extend(Record(number, v) for v in recovered)
            else:
                problems.append(f"{path}:{number}: {exc}; skipped")
            continue
        if isinstance(value, dict):
            out.append(Record(number, value))
        elif strict:
            raise InputError(
                f"expected a JSON object (one message), got {type(value).__name__}",
                path=str(path), line=number,
            )
        else:
            problems.append(f"{path}:{number}: not a JSON object; skipped")
    return out


def decode_line(data: bytes) -> Any:
    """One JSON value. Raises InputError (with no place: the caller knows it) for a truncated,
    malformed, too deeply nested or out-of-range value."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            raise InputError("truncated line") from None
        raise InputError(f"malformed JSON ({exc})") from None
    except RecursionError:
        # msgspec gives up past about a thousand levels with a RecursionError of its own
        raise InputError("JSON nested too deeply") from None


def _glued(line: bytes) -> list[dict[str, Any]]:
    """The objects of a line holding several JSON objects back to back, or [] if it does not."""
    try:
        text = line.decode()
    except UnicodeDecodeError:
        return []
    found: list[dict[str, Any]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        try:
            value, end = _raw.raw_decode(text, pos)
        except (ValueError, RecursionError):  # JSONDecodeError, or an int of 4,300+ digits
            return []
        if not isinstance(value, dict):
            return []
        found.append(value)
        pos = end
        while pos < len(text) and text[pos] in " \t\r":
            pos += 1
    return found if len(found) > 1 else []


_UNSAFE = re.compile(r"[^A-Za-z0-9._/-]+")


def ref_safe(text: str) -> str:
    """``text`` made usable as a session name (spaces and odd characters become ``-``)."""
    name = _UNSAFE.sub("-", text).strip("-./")
    name = re.sub(r"\.\.+", ".", re.sub(r"//+", "/", name))
    name = "/".join(p.lstrip(".").removesuffix(".lock") or "x" for p in name.split("/"))
    return name[:120] or "imported"


_UUID = re.compile(
    r"([0-9a-f]{8})-?[0-9a-f]{4}-?([0-9a-f])[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{4}([0-9a-f]{8})",
    re.IGNORECASE,
)


def session_base(fmt: str, ident: object, path: Path, *, by_id: bool = True) -> str:
    """The name an import gives a session when it is not told one: short, and the same on
    every machine and every import of the file.

    A tool's session id that is (or a file name that holds) a UUID gives ``FORMAT-XXXXXXXX``,
    8 hex digits of it, as git shortens an id: its first, or for a time-ordered UUID
    (version 7, whose first digits are a timestamp that sessions begun together share) its
    last, which are random. Anything else gives the session id (``by_id``) or the file's name,
    made safe.
    """
    stem = path.name.removesuffix(".jsonl")
    for text in (ident, stem):
        if isinstance(text, str) and (m := _UUID.search(text)) is not None:
            digits = m.group(3) if m.group(2) == "7" else m.group(1)
            return f"{fmt}-{digits.lower()}"
    return ref_safe(ident if by_id and isinstance(ident, str) and ident else stem)


_TYPE_PART = re.compile(r"[^a-z0-9_.-]+")


def record_type(namespace: str, kind: Any) -> str:
    """The extension event type that keeps a raw record, e.g. ``claude/file-history-snapshot``.

    Record kinds a newer tool version invents are registered on the fly, so an unknown record
    is kept rather than dropped.
    """
    part = _TYPE_PART.sub("_", str(kind).lower()).strip("_.-") if kind is not None else ""
    name = f"{namespace}/{part or 'record'}"
    if not is_registered(name):
        register_event_type(name)
    return name
