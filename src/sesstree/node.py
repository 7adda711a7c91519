"""Nodes, their canonical encoding and ids, typed ref names and revision syntax.

A node is ``(parent, type, data)``. Its id is the blake3 hash of the msgpack encoding of
``[ID_VERSION, parent, type, data]`` where ``parent`` is the parent's 32 raw id bytes (or nil for
a root) and every map in ``data`` has its keys sorted. The encoding of ``data`` is also what the
store keeps, so one encode serves both the hash and the write.

Changing anything here changes every id: the test vectors in ``tests/test_node.py`` pin it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any, NewType

import msgspec
from blake3 import blake3

from .errors import InvalidEventError, InvalidRefNameError

__all__ = [
    "ID_VERSION",
    "REMOTES",
    "RESERVED_PREFIXES",
    "SESSIONS",
    "TAGS",
    "Node",
    "NodeId",
    "RefName",
    "check_ref_name",
    "decode_data",
    "encode_data",
    "make_node",
    "node_id",
    "node_id_from_encoded",
    "parse_symbolic",
    "remote_ref",
    "session_name",
    "session_ref",
    "short_name",
    "symbolic",
    "tag_name",
    "tag_ref",
]

#: Bumped only if the hashed encoding ever changes; it is part of every hashed node.
ID_VERSION = 1

NodeId = NewType("NodeId", str)
"""A node id: 64 lowercase hex characters of a blake3 digest."""

_canonical = msgspec.msgpack.Encoder(order="sorted")
# [ID_VERSION, parent, ...: array of 4, the version, then bin8 of 32 bytes or nil.
_PARENT_PREFIX = b"\x94" + _canonical.encode(ID_VERSION) + b"\xc4\x20"
_ROOT_PREFIX = b"\x94" + _canonical.encode(ID_VERSION) + b"\xc0"
_decoder = msgspec.msgpack.Decoder()


class Node(msgspec.Struct, frozen=True, gc=False):
    """One event in the DAG. Immutable; equal ids mean equal content."""

    id: NodeId
    parent: NodeId | None
    type: str
    data: Any


_ATOMS = frozenset({str, int, bool, type(None)})


def _check_json(value: Any, depth: int = 0) -> None:
    """Refuse what msgpack would take but JSON cannot hold: bytes, sets, NaN, datetimes, ...

    Sets are the dangerous one: their order differs between processes, so the same data
    would hash differently.
    """
    kind = type(value)
    if kind in _ATOMS:
        return
    if depth > 500:
        raise InvalidEventError("event data is nested more than 500 levels deep")
    # Strings, ints, bools and nulls are checked inline: this runs on every append.
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidEventError(f"event data has a non-string key {key!r}")
            if type(item) not in _ATOMS:
                _check_json(item, depth + 1)
    elif kind is list or kind is tuple:
        for item in value:
            if type(item) not in _ATOMS:
                _check_json(item, depth + 1)
    elif kind is float:
        if not math.isfinite(value):
            raise InvalidEventError(f"event data holds {value!r}, which JSON cannot hold")
    else:
        raise InvalidEventError(f"event data is not a JSON value: {kind.__name__} found")


def encode_data(data: Any) -> bytes:
    """Canonical msgpack of a JSON value (sorted keys). Raises InvalidEventError otherwise."""
    _check_json(data)
    try:
        return _canonical.encode(data)
    except (TypeError, OverflowError, ValueError) as exc:
        raise InvalidEventError(f"event data is not a JSON value: {exc}") from None


def decode_data(raw: bytes) -> Any:
    """Inverse of :func:`encode_data`."""
    return _decoder.decode(raw)


_type_tail: dict[str, bytes] = {}


def node_id_from_encoded(parent: NodeId | None, type: str, encoded: bytes) -> NodeId:
    """The id of a node whose data is already canonically encoded."""
    # The msgpack of [ID_VERSION, parent, type, data], built from parts instead of encoding
    # data twice: a 4-item array header, then each item (the parent as 32 raw bytes or nil).
    tail = _type_tail.get(type)
    if tail is None:
        tail = _type_tail[type] = _canonical.encode(type)
    head = _PARENT_PREFIX + bytes.fromhex(parent) if parent is not None else _ROOT_PREFIX
    return NodeId(blake3(head + tail + encoded).hexdigest())


def node_id(parent: NodeId | None, type: str, data: Any) -> NodeId:
    """The id of the node ``(parent, type, data)``."""
    return node_id_from_encoded(parent, type, encode_data(data))


def make_node(parent: NodeId | None, type: str, data: Any) -> Node:
    """Build a node and compute its id."""
    return Node(node_id(parent, type, data), parent, type, data)


RefName = NewType("RefName", str)
"""A full ref name as the store keys it: ``sessions/NAME``, ``tags/NAME`` or ``remotes/R/NAME``."""

#: The namespaces of refs: a session ``x`` is the ref ``sessions/x``, a tag ``v1`` the ref
#: ``tags/v1``, and what was last fetched of a remote's session lives under ``remotes/``.
#: Defined here only; every other module names refs through the helpers below.
SESSIONS = "sessions/"
TAGS = "tags/"
REMOTES = "remotes/"
#: HEAD's stored value when it follows a session (git's symbolic ref): ``ref: sessions/NAME``.
_SYMBOLIC = "ref: "


def session_ref(name: str) -> RefName:
    """The ref of session ``name`` (``sessions/NAME``)."""
    return RefName(SESSIONS + name)


def tag_ref(name: str) -> RefName:
    """The ref of tag ``name`` (``tags/NAME``)."""
    return RefName(TAGS + name)


def remote_ref(path: str) -> RefName:
    """The remote-tracking ref of ``REMOTE/NAME`` (``remotes/REMOTE/NAME``)."""
    return RefName(REMOTES + path)


def session_name(ref: str) -> str | None:
    """The session name of ``ref`` if it is a session's ref (``sessions/NAME``), else None."""
    return ref[len(SESSIONS):] if ref.startswith(SESSIONS) else None


def tag_name(ref: str) -> str | None:
    """The tag name of ``ref`` if it is a tag's ref (``tags/NAME``), else None."""
    return ref[len(TAGS):] if ref.startswith(TAGS) else None


def short_name(ref: str) -> str:
    """``ref`` without its ``sessions/`` prefix if it has one: how a user names a session."""
    name = session_name(ref)
    return ref if name is None else name


def symbolic(ref: str) -> str:
    """HEAD's stored value when it follows ``ref``: ``ref: sessions/NAME``."""
    return _SYMBOLIC + ref


def parse_symbolic(raw: str) -> RefName | None:
    """The ref a stored HEAD value follows, or None if it is detached (a node id)."""
    return RefName(raw[len(_SYMBOLIC):]) if raw.startswith(_SYMBOLIC) else None


_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
#: Prefixes that are namespaces of refs, not names: a session called ``tags/v1`` would be
#: shadowed by the tag ``v1``, and one called ``sessions/x`` could not be named on the CLI.
RESERVED_PREFIXES = (SESSIONS, TAGS, "refs/", REMOTES)
#: Unicode categories a name may not hold: controls, format characters (bidi overrides,
#: zero-width joiners), line and paragraph separators, non-ASCII spaces, surrogates (bytes
#: that were not UTF-8), private use and unassigned code points. Each can make two names look
#: alike, or make a name print as something else.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})


def check_ref_name(name: str) -> str:
    """Return ``name`` if it can name a session or tag, else raise InvalidRefNameError.

    The rules follow git's check-ref-format: no empty name or component, no ``..``, no leading
    ``-``, ``.`` or ``/``, no trailing ``/``, ``.`` or ``.lock``, no ``@{``, no whitespace,
    control characters or any of ``~^:?*[\\``. Names may contain ``/`` to group sessions, but
    may not start with a ref namespace (``sessions/``, ``tags/``, ``refs/``, ``remotes/``).
    Non-ASCII names must be valid UTF-8 in Unicode normal form NFC, with no invisible or
    direction-changing characters. At most 200 bytes. ``docs/data-model.md`` lists the rules.
    """
    problem = None
    if not name:
        problem = "is empty"
    elif len(name) > 200:
        problem = "is longer than 200 bytes"
    elif name.startswith("-"):
        problem = "starts with '-'"
    elif name.startswith("/") or name.endswith("/"):
        problem = "starts or ends with '/'"
    elif ".." in name:
        problem = "contains '..'"
    elif "//" in name:
        problem = "contains an empty component"
    elif "@{" in name:
        problem = "contains '@{'"
    elif name in ("HEAD", "@"):
        problem = "is reserved"
    elif name.startswith(RESERVED_PREFIXES):
        problem = f"starts with '{name.split('/')[0]}/', a namespace of refs"
    elif _BAD_REF.search(name):
        problem = "contains whitespace, a control character or one of ~^:?*[\\"
    elif any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        problem = "has a component that starts with '.' or ends with '.lock'"
    elif name.endswith("."):
        problem = "ends with '.'"
    elif not name.isascii():
        problem = _unicode_problem(name)
    if problem is None and len(name.encode()) > 200:
        problem = "is longer than 200 bytes"
    if problem is not None:
        raise InvalidRefNameError(f"invalid name {_quoted(name)}: it {problem}")
    return name


def _unicode_problem(name: str) -> str | None:
    for ch in name:
        category = unicodedata.category(ch)
        if category == "Cs":
            return "is not valid UTF-8"
        if category in _BAD_CATEGORIES:
            return f"contains U+{ord(ch):04X}, an invisible, space or control character"
    if unicodedata.normalize("NFC", name) != name:
        return "is not in Unicode normal form NFC (it would look like another name)"
    return None


def _quoted(name: str) -> str:
    """The name for an error message: escaped where it could not print as itself, clipped."""
    shown = name if len(name) <= 80 else name[:79] + "…"
    return ascii(shown) if _unicode_problem(shown) else repr(shown)
