"""Gemini histories re-encoded every way a client does, at every position: each matches the
history first sent; a different input never does.

The re-encodings are generated: each one applied to each content in turn, then all at once.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import pytest

from sesstree.events import MESSAGE_TYPES
from sesstree.proxy.canonical import EMPTY_KEY, chain_key
from sesstree.proxy.gemini import gemini_request

PNG = bytes(range(240, 256)) * 2
SYSTEM = {"role": "user", "parts": [{"text": "Be careful."}]}
BASE: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "fix the test"}]},
    {"role": "model", "parts": [
        {"text": "Reading the file first.", "thought": True},
        {"text": "I will read it."},
        {"functionCall": {"name": "read_file", "args": {"path": "a.py", "lines": 10}}}]},
    {"role": "user", "parts": [
        {"functionResponse": {"name": "read_file", "response": {"output": "print(1)", "ok": True}}}]},
    {"role": "model", "parts": [{"text": "It prints 1."}]},
    {"role": "user", "parts": [{"text": "and this image"},
                               {"inlineData": {"mimeType": "image/png",
                                               "data": base64.b64encode(PNG).decode()}}]},
    {"role": "model", "parts": [{"text": "A picture."}]},
]

Content = dict[str, Any]
SNAKE = {"inlineData": "inline_data", "mimeType": "mime_type", "functionCall": "function_call",
         "functionResponse": "function_response", "fileData": "file_data"}


def key(contents: list[Content], system: Any = SYSTEM) -> bytes:
    body: dict[str, Any] = {"contents": contents}
    if system is not None:
        body["systemInstruction"] = system
    found = gemini_request(body, "/v1beta/models/m:generateContent")
    assert found is not None
    k = EMPTY_KEY
    for type, data in found[0]:
        if type in MESSAGE_TYPES:
            k = chain_key(k, type, data)
    return k


# -- re-encodings of one content: each returns the contents that replace it ----------------

def split_text(c: Content) -> list[Content]:
    """A model's text cut into parts elsewhere, as a stream cuts it (a user's parts are the
    user's: cut elsewhere they are another input, see DIFFERENT)."""
    if c["role"] != "model":
        return [c]
    parts: list[Any] = []
    for p in c["parts"]:
        if isinstance(p.get("text"), str) and len(p["text"]) > 1:
            half = len(p["text"]) // 2
            parts += [{**p, "text": p["text"][:half]}, {**p, "text": p["text"][half:]}]
        else:
            parts.append(p)
    return [{**c, "parts": parts}]


def split_content(c: Content) -> list[Content]:
    """One content per part, as the SDK keeps a streamed reply (one content per chunk)."""
    return [{**c, "parts": [p]} for p in c["parts"]] + [{**c, "parts": [{"text": ""}]}]


def signatures(c: Content) -> list[Content]:
    sig = base64.b64encode(b"\xfb\xff\xfe" * 5).decode()
    return [{**c, "parts": [{**p, "thoughtSignature": sig if i % 2 else sig.replace("+", "-")}
                            for i, p in enumerate(c["parts"])]}]


def without_thoughts(c: Content) -> list[Content]:
    return [{**c, "parts": [p for p in c["parts"] if not p.get("thought")]}]


def more_thoughts(c: Content) -> list[Content]:
    if c["role"] != "model":
        return [c]
    return [{**c, "parts": [{"text": "Thinking again.", "thought": True,
                             "thoughtSignature": "AAAA"}, *c["parts"]]}]


def _floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: _floats(value[k]) for k in reversed(list(value))}
    return value


def structs(c: Content) -> list[Content]:
    """Args and responses with their keys the other way round, whole numbers as doubles."""
    parts = []
    for p in c["parts"]:
        p = copy.deepcopy(p)
        if "functionCall" in p:
            p["functionCall"]["args"] = _floats(p["functionCall"]["args"])
        if "functionResponse" in p:
            p["functionResponse"]["response"] = _floats(p["functionResponse"]["response"])
        parts.append(p)
    return [{**c, "parts": parts}]


def urlsafe_base64(c: Content) -> list[Content]:
    parts = copy.deepcopy(c["parts"])
    for p in parts:
        if "inlineData" in p:
            p["inlineData"]["data"] = base64.urlsafe_b64encode(PNG).decode().rstrip("=")
    return [{**c, "parts": parts}]


def no_user_role(c: Content) -> list[Content]:
    return [{k: v for k, v in c.items() if k != "role"} if c["role"] == "user" else c]


def snake_case(c: Content) -> list[Content]:
    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {SNAKE.get(k, k): rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value
    return [rename(c)]


def empty_text(c: Content) -> list[Content]:
    return [{**c, "parts": [{"text": ""}, *c["parts"], {"text": ""}]}]


def key_order(c: Content) -> list[Content]:
    return [{k: c[k] for k in reversed(list(c))}]


SAME: list[Callable[[Content], list[Content]]] = [
    split_text, split_content, signatures, without_thoughts, more_thoughts, structs,
    urlsafe_base64, no_user_role, snake_case, empty_text, key_order]


def client_ids(contents: list[Content]) -> list[Content]:
    """Ids on every call and its response, as the Gemini CLI sets its own before re-sending
    (the API sent none)."""
    out = copy.deepcopy(contents)
    numbers = {"functionCall": 0, "functionResponse": 0}
    for c in out:
        for p in c["parts"]:
            for field in numbers:
                if field in p:
                    name = p[field]["name"]
                    p[field]["id"] = f"{name}__{name}_1700000000_{numbers[field]}"
                    numbers[field] += 1
    return out


def reencoded(contents: list[Content], at: int,
              how: Callable[[Content], list[Content]]) -> list[Content]:
    return contents[:at] + how(copy.deepcopy(contents[at])) + contents[at + 1:]


@pytest.mark.parametrize("how", SAME, ids=lambda f: f.__name__)
@pytest.mark.parametrize("at", range(len(BASE)))
def test_every_reencoding_at_every_position_matches(at: int, how: Any) -> None:
    expected = key(BASE)
    assert key(reencoded(BASE, at, how)) == expected
    # and every prefix: a history re-sent up to any content matches the same prefix
    for end in range(at + 1, len(BASE) + 1):
        assert key(reencoded(BASE[:end], at, how)) == key(BASE[:end])


def test_all_reencodings_at_once_and_client_ids_match() -> None:
    contents: list[Content] = []
    for c in client_ids(BASE):
        pieces = [c]
        for how in SAME:
            pieces = [q for p in pieces for q in how(p)]
        contents += pieces
    assert len(contents) > 3 * len(BASE)
    assert key(contents) == key(BASE)
    assert key(BASE, system={"parts": [{"text": "Be "}, {"text": "careful."}]}) != key(BASE)
    assert key(BASE, system="Be careful.") == key(BASE)
    assert key(BASE, system={"parts": [{"text": "Be careful.", "thoughtSignature": "x"}]}) == \
        key(BASE)


# -- different inputs: each changes the history's key ---------------------------------------

def _text(c: Content, f: Callable[[str], str]) -> list[Content]:
    return [{**c, "parts": [{**p, "text": f(p["text"])} if isinstance(p.get("text"), str)
                            and not p.get("thought") else p for p in c["parts"]]}]


def _deep(c: Content, field: str, change: Callable[[dict[str, Any]], None]) -> list[Content]:
    c = copy.deepcopy(c)
    for p in c["parts"]:
        if field in p:
            change(p[field])
    return [c]


DIFFERENT: dict[str, Callable[[Content], list[Content]]] = {
    "a trailing space": lambda c: _text(c, lambda t: t + " "),
    "another letter": lambda c: _text(c, lambda t: t[:-1] + "?"),
    "another argument": lambda c: _deep(c, "functionCall",
                                        lambda f: f["args"].update(path="b.py")),
    "another function": lambda c: _deep(c, "functionCall", lambda f: f.update(name="write")),
    "another result": lambda c: _deep(c, "functionResponse",
                                      lambda f: f["response"].update(ok=False)),
    "another image": lambda c: _deep(c, "inlineData", lambda d: d.update(
        data=base64.b64encode(PNG[::-1]).decode())),
    "another media type": lambda c: _deep(c, "inlineData",
                                          lambda d: d.update(mimeType="image/jpeg")),
    "a thought made text": lambda c: [{**c, "parts": [
        {k: v for k, v in p.items() if k != "thought"} for p in c["parts"]]}],
    "a user's text cut into two parts": lambda c: [{**c, "parts": [
        q for p in c["parts"] for q in ([{"text": p["text"][:3]}, {"text": p["text"][3:]}]
                                       if c["role"] == "user" and "text" in p else [p])]}],
    "the other role": lambda c: [{**c, "role": "model" if c["role"] == "user" else "user"}],
}


@pytest.mark.parametrize("what", list(DIFFERENT))
def test_a_different_input_never_matches(what: str) -> None:
    changed = 0
    for at in range(len(BASE)):
        variant = reencoded(BASE, at, DIFFERENT[what])
        if variant == BASE:
            continue  # nothing of that kind in this content
        changed += 1
        assert key(variant[:at + 1]) != key(BASE[:at + 1]), (what, at)
        assert key(variant) != key(BASE), (what, at)
    assert changed
