"""The row format both engines share: a node row's ``data`` is the msgpack of the node's type
followed by the msgpack of its payload (nil when the payload is stored apart).

Keeping the type in front of the payload in one byte string lets an engine hand a whole path to
msgspec in one call (type, payload, type, payload...), and lets a row be split without decoding
its payload. SQLite and PostgreSQL store exactly these bytes, so neither engine imports the other.
"""

from __future__ import annotations

import msgspec

__all__ = ["row_data", "split_row", "type_length"]

_type_bytes: dict[str, bytes] = {}


def row_data(type: str, encoded: bytes | None) -> bytes:
    """A row's ``data``: the type's msgpack then the payload's (nil when stored apart)."""
    head = _type_bytes.get(type)
    if head is None:
        head = _type_bytes[type] = msgspec.msgpack.encode(type)
    return head + (encoded if encoded is not None else b"\xc0")


def type_length(data: bytes) -> int:
    """How many bytes of a row's ``data`` are its type (the msgpack str, header included)."""
    first = data[0]
    if 0xA0 <= first <= 0xBF:
        end = 1 + (first & 0x1F)
    elif first == 0xD9:
        end = 2 + data[1]
    elif first == 0xDA:
        end = 3 + int.from_bytes(data[1:3], "big")
    else:
        raise ValueError("row data does not start with a type")
    if end > len(data):
        raise ValueError("row data ends in its type")
    return end


def split_row(data: bytes) -> tuple[str, bytes]:
    """The type and the payload bytes of a row's ``data`` (reads the msgpack str header)."""
    end = type_length(data)
    start = 1 if data[0] < 0xD9 else 2 if data[0] == 0xD9 else 3
    return data[start:end].decode(), data[end:]
