"""A generated corpus of message contents and event datas, every shape a stored event can
hold (strings, None, lists of text parts, image parts, unknown part types, nested objects,
tool calls, non-string values), for the test that every reader renders them as it did."""

from __future__ import annotations

from itertools import product
from typing import Any

_SCALARS: list[Any] = ["", "plain", "two\nlines", None, 0, 7, 2.5, True, False]
_LONG = "https://example.org/" + "x" * 70

_PARTS: list[Any] = [
    *_SCALARS,
    [],
    {"type": "text", "text": "hello"},
    {"type": "text", "text": ""},
    {"type": "text", "text": 5},
    {"type": "text", "text": 0},
    {"type": "text", "text": None},
    {"type": "text", "text": ["nested"]},
    {"text": "no type"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "image_url", "image_url": {"url": _LONG}},
    {"type": "image_url", "image_url": _LONG},
    {"type": "image_url", "image_url": {"detail": "low"}},
    {"image_url": 3},
    {"type": "input_file", "file": {"name": "a.pdf"}},
    {"type": "audio"},
    {"type": 4},
    {"type": None},
    {},
    {"nested": {"deep": [1, {"text": "inner"}]}},
]


def contents() -> list[Any]:
    """Every content shape: each scalar, each part alone in a list, pairs of parts, and
    JSON that is neither a string nor a list."""
    out: list[Any] = list(_SCALARS)
    out += [[p] for p in _PARTS]
    out += [[a, b] for a, b in product(_PARTS[::3], _PARTS[1::4])]
    out += [{"a": 1, "b": [2, 3]}, {"z": "y", "a": {"n": None}}, {"big": "w" * 25_000}, [[1, 2]],
            ["x", ["y"]]]
    return out


_CALLS: list[Any] = [
    None, "calls", 0, {}, [],
    [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"at": "door"}'}}],
    [{"function": {"name": "look", "arguments": {"at": "door"}}}, {"function": {"name": "go"}}],
    [{"function": {}}, {"function": None}, {"function": "x"}, {"function": 0}, "loose", 3],
    [{"id": "c2"}], 5,
    {"function": {"name": "not a list"}},
]


def datas() -> list[tuple[str, Any]]:
    """(type, data) pairs: messages with and without content, with tool calls, extra text
    fields, tool/call records, and data that is not an object."""
    out: list[tuple[str, Any]] = []
    for content in contents()[::2]:
        out.append(("user/message", {"role": "user", "content": content}))
    for content, calls in product(["", "text", None, [{"type": "text", "text": "a"}], "MISSING"],
                                  _CALLS):
        data: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
        if content != "MISSING":
            data["content"] = content
        out.append(("assistant/message", data))
    for key, value in product(("summary", "message", "reasoning", "reasoning_content", "other"),
                              ("said", "", 4)):
        out.append(("compaction/marker", {key: value}))
        out.append(("assistant/message", {"role": "assistant", "content": "c", key: value}))
    for name, args in product(("", "run", None), ("", '{"a": 1}', {"a": 1})):
        out.append(("tool/call", {"id": "c", "name": name, "arguments": args}))
        out.append(("note/x", {"name": name, "arguments": args}))
    out.append(("tool/call", {}))
    odd: list[Any] = ["just text", "", None, 3, [1, "two"], {}, {"unrelated": True}]
    out += [("custom/thing", value) for value in odd]
    return out
