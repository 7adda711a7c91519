"""Google Gemini ``Content`` (the ``contents`` of ``generateContent``) as chat messages.

A Gemini history is a list of ``Content`` objects, ``{"role": "user" | "model", "parts":
[...]}``. Each becomes its raw form, a ``gemini/content`` event holding it as it was sent,
and the chat messages the model read are derived per *turn*: a run of consecutive contents of
one role (a streamed reply that a client keeps as one content per chunk, as the google-genai
SDK's chats do, is one turn, as the API reads it). The turn's messages follow the raw form of
its last content:

- a ``user`` turn (or one without a role): a ``tool/result`` for each ``functionResponse``,
  then a ``user/message`` with its text and media; a ``model`` turn: an ``assistant/message``
  with its text and each ``functionCall`` as a ``tool_calls`` entry; another role: a
  ``message`` of that role;
- a ``model`` turn's text parts are concatenated as they are (no separator): where a streamed
  reply's text was cut into parts is the stream's, not the model's, and Gemini CLI joins
  them so (``geminiChat.ts``: "consolidate text parts") before it re-sends them, while the
  SDK's chats re-send one content per chunk; a ``user`` (or other) turn's text parts are
  kept apart, as a client made them (Gemini CLI puts a file's text in a part of its own), so
  ``["ab", "c"]`` and ``["a", "bc"]`` are two inputs. Empty parts vanish; a message of one
  text part is one string;
- ``thought`` parts and every ``thoughtSignature`` are left out (kept in the raw form only):
  clients drop thoughts from the history they re-send, and add, keep or replace signatures;
- ``inlineData`` images become ``image_url`` parts with a ``data:`` URL, other media a
  ``file`` part; the base64 text is written in its standard alphabet with padding (the SDK
  sends URL-safe base64, the API answers standard: one image, two spellings);
  ``fileData`` becomes an ``image_url`` (images) or ``file`` part with its URI and media
  type; what a media part says beside its media (``videoMetadata``: a clip;
  ``mediaResolution``) is kept in that part, its field names in camelCase (the API reads
  ``video_metadata`` as the same field);
  any other part (``executableCode``, ``codeExecutionResult``, ...) is kept as it is, less its
  signature;
- a call's arguments and a response's ``response`` are protobuf Structs (unordered maps of
  doubles): written as JSON with sorted keys, a whole-valued number as an integer;
- a call's id is its place, ``call_<turn>_<k>`` (the k-th call of the history's turn number
  ``turn``, counted from 0): the API sends ids or not, and the Gemini CLI replaces them with
  its own before it re-sends the call, so the id is no part of the input. A
  ``functionResponse`` is paired with the call whose id it names (as given) if that call has
  its name, else with the first unanswered call of that name, latest turn first (a response
  under another name than its call's is another input: the model reads the name).

``systemInstruction`` (a ``Content`` whose role is ignored, or a string) is a raw
``gemini/content`` event ``{"systemInstruction": ...}`` then a ``system/message`` with its text
parts joined by newlines (the API reads each part as a paragraph), a medium or another part in
it kept in its place.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from ..events import is_registered, register_event_type

__all__ = ["RAW_TYPE", "gemini_contents_events", "gemini_system_events", "gemini_turns",
           "media_part"]

#: The raw form of a Gemini ``Content`` (or ``{"systemInstruction": ...}``), never sent.
RAW_TYPE = "gemini/content"
if not is_registered(RAW_TYPE):
    register_event_type(RAW_TYPE)

Event = tuple[str, Any]
_sorted_json = msgspec.json.Encoder(order="sorted")
_SKIPPED_KEYS = frozenset({"thoughtSignature", "thought_signature"})
_MEDIA_KEYS = frozenset({"inlineData", "inline_data", "fileData", "file_data"})
#: Part fields that hold a protobuf Struct (the user's keys): never renamed.
_STRUCT_KEYS = frozenset({"partMetadata", "part_metadata"})
_SNAKE = re.compile(r"_([a-z0-9])")


def _struct(value: Any) -> Any:
    """A protobuf Struct value as the API holds it: whole-valued doubles as integers."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, dict):
        return {str(k): _struct(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_struct(v) for v in value]
    return value


def _json(value: Any) -> str:
    return _sorted_json.encode(_struct(value)).decode()


_STANDARD = str.maketrans("-_", "+/")


def _base64(data: Any) -> str:
    """``data`` in the standard base64 alphabet, padded (it may come URL-safe or unpadded):
    the alphabets differ in two characters, so no decoding is needed."""
    text = str(data).translate(_STANDARD)
    return text + "=" * (-len(text) % 4)


def _get(part: dict[str, Any], camel: str, snake: str) -> Any:
    value = part.get(camel)
    return part.get(snake) if value is None else value


def _camel(value: Any) -> Any:
    """A protobuf message's JSON with its field names in camelCase, as the API reads either."""
    if isinstance(value, dict):
        return {_SNAKE.sub(lambda m: m.group(1).upper(), str(k)):
                v if k in _STRUCT_KEYS else _camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def media_part(part: dict[str, Any]) -> dict[str, Any] | None:
    """A Gemini ``inlineData`` or ``fileData`` part (either spelling of its fields) as a
    message part, with the part's other fields (a clip of a video, a resolution: they change
    what the model reads), less its signature; None for a part that holds no medium. The one
    mapping of media the proxy and the Gemini CLI importer share, so that one part is one
    node through either."""
    found = _media_only(part)
    if found is None:
        return None
    extra = {k: v for k, v in part.items() if k not in _MEDIA_KEYS and k not in _SKIPPED_KEYS}
    return {**found, **_camel(extra)} if extra else found


def _media_only(part: dict[str, Any]) -> dict[str, Any] | None:
    inline = _get(part, "inlineData", "inline_data")
    if isinstance(inline, dict):
        mime = str(_get(inline, "mimeType", "mime_type") or "application/octet-stream")
        url = f"data:{mime};base64,{_base64(inline.get('data', ''))}"
        if mime.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "file", "file": {"file_data": url}}
    data = _get(part, "fileData", "file_data")
    if isinstance(data, dict):
        mime = str(_get(data, "mimeType", "mime_type") or "")
        uri = str(_get(data, "fileUri", "file_uri") or "")
        if mime.startswith("image/"):
            # The media type is part of the input: the URI names stored bytes, it says how
            # they are read.
            return {"type": "image_url", "image_url": {"url": uri, "mime_type": mime}}
        return {"type": "file", "file": {"file_url": uri, "mime_type": mime}}
    return None


class _Calls:
    """The function calls of a history so far, to pair each response with its call: by the
    id a response names, else the first unanswered call of its name in the latest turn that
    has one. Lookups by dictionary, so a long history of calls costs no scan per response."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # an id as given, or ours -> ours
        self.names: dict[str, str] = {}  # ours -> the call's name
        self.by_name: dict[str, list[list[str]]] = {}  # name -> per turn, our ids in order
        self.answered: set[str] = set()

    def add_turn(self, calls: list[tuple[str | None, str, str]]) -> None:
        turn: dict[str, list[str]] = {}
        for given, name, ours in calls:
            self.ids[ours] = ours
            self.names[ours] = name
            if given:
                self.ids[given] = ours  # the latest call of an id reused
            turn.setdefault(name, []).append(ours)
        for name, ids in turn.items():
            self.by_name.setdefault(name, []).append(ids)

    def pair(self, given: Any, name: str) -> str:
        ours = self.ids.get(given) if isinstance(given, str) else None
        if ours is not None and self.names[ours] == name:
            self.answered.add(ours)
            return ours
        turns = self.by_name.get(name, [])
        for ids in reversed(turns):
            for ours in ids:
                if ours not in self.answered:
                    self.answered.add(ours)
                    return ours
        return given if isinstance(given, str) and given else name


def _parts(contents: Sequence[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            out.extend(p for p in parts if isinstance(p, dict))
    return out


def _flatten(parts: list[Any]) -> Any:
    if not parts:
        return None
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def _turn(role: str, contents: Sequence[Any], position: int, calls: _Calls) -> list[Event]:
    """The chat messages of one turn: the contents of one role, turn number ``position``.

    The messages keep the order of the parts: a function response after a user's text is a
    message after that text's, a model's text after its function call starts a message of its
    own, since the model reads them in that order (two orders are two different inputs).
    """
    events: list[Event] = []
    # Text pieces are gathered and joined once: a streamed reply re-sent as one content per
    # chunk would otherwise copy the text so far at every chunk.
    parts: list[Any] = []  # a list of text pieces, or a part
    tool_calls: list[dict[str, Any]] = []
    mine: list[tuple[str | None, str, str]] = []

    def flush() -> None:
        joined = [{"type": "text", "text": "".join(p)} if isinstance(p, list) else p
                  for p in parts]
        if role == "model":
            if joined or tool_calls:
                message: dict[str, Any] = {"role": "assistant", "content": _flatten(joined)}
                if tool_calls:
                    message["tool_calls"] = list(tool_calls)
                events.append(("assistant/message", message))
        elif joined:
            kind = "user/message" if role == "user" else "message"
            events.append((kind, {"role": role, "content": _flatten(joined)}))
        parts.clear()
        tool_calls.clear()

    for part in _parts(contents):
        if part.get("thought") is True:
            continue  # a thought summary: not resent as input
        text = part.get("text")
        if isinstance(text, str):
            if text:
                if tool_calls:
                    flush()  # text after a call: the model's next message
                # A model's text parts are one text (where its stream was cut is no part of
                # it); a user's are kept apart, as they were made.
                if role == "model" and parts and isinstance(parts[-1], list):
                    parts[-1].append(text)
                else:
                    parts.append([text])
            continue
        call = _get(part, "functionCall", "function_call")
        if isinstance(call, dict):
            name = str(call.get("name", ""))
            ours = f"call_{position}_{len(mine)}"
            given = call.get("id")
            mine.append((given if isinstance(given, str) else None, name, ours))
            tool_calls.append({"id": ours, "type": "function", "function": {
                "name": name, "arguments": _json(call.get("args") or {})}})
            continue
        response = _get(part, "functionResponse", "function_response")
        if isinstance(response, dict):
            flush()  # what came before the response, in its place
            name = str(response.get("name", ""))
            result: Any = _json(response.get("response") or {})
            extra = [m for m in (media_part(p) for p in _parts([response])) if m is not None]
            if extra:
                result = [{"type": "text", "text": result}, *extra]
            events.append(("tool/result", {"role": "tool",
                                           "tool_call_id": calls.pair(response.get("id"), name),
                                           "content": result}))
            continue
        if tool_calls:
            flush()
        media = media_part(part)
        if media is not None:
            parts.append(media)
        else:
            kept = {k: v for k, v in part.items() if k not in _SKIPPED_KEYS}
            if kept:
                parts.append(kept)
    if mine:
        calls.add_turn(mine)
    flush()
    return events


def _role(content: Any) -> str:
    role = content.get("role") if isinstance(content, dict) else None
    return role if isinstance(role, str) and role else "user"


def gemini_contents_events(contents: Sequence[Any], start: int = 0) -> list[Event]:
    """The events for a list of Gemini contents: each content's raw form, and after the last
    content of each turn (a run of one role) the chat messages it maps to.

    ``start`` is the number of the turn ``contents[0]`` begins in the whole history (the ids
    of calls are made from it): a reply to a request whose contents make ``n`` turns
    (:func:`gemini_turns`) is mapped with ``start=n``.
    """
    tracker = _Calls()
    events: list[Event] = []
    roles = [_role(c) for c in contents]
    i = 0
    turn = start
    while i < len(contents):
        j = i
        while j < len(contents) and roles[j] == roles[i]:
            events.append((RAW_TYPE, contents[j]))
            j += 1
        events.extend(_turn(roles[i], contents[i:j], turn, tracker))
        i, turn = j, turn + 1
    return events


def gemini_turns(contents: Sequence[Any]) -> int:
    """How many turns (runs of contents of one role) ``contents`` holds."""
    roles = [_role(c) for c in contents]
    return sum(1 for i, role in enumerate(roles) if i == 0 or roles[i - 1] != role)


def gemini_system_events(instruction: Any) -> list[Event]:
    """The events for a ``systemInstruction``: its raw form and a system message (none for an
    instruction with nothing the model reads). Its text parts are joined by newlines; a
    medium or another part in it stays a part of the message, in its place."""
    events: list[Event] = [(RAW_TYPE, {"systemInstruction": instruction})]
    if isinstance(instruction, str):
        content: Any = instruction or None
    else:
        pieces: list[Any] = []  # a list of text pieces, or a part
        for part in _parts([instruction]):
            if part.get("thought") is True:
                continue
            text = part.get("text")
            if isinstance(text, str):
                if text and pieces and isinstance(pieces[-1], list):
                    pieces[-1].append(text)
                elif text:
                    pieces.append([text])
                continue
            media = media_part(part)
            kept = media if media is not None else \
                {k: v for k, v in part.items() if k not in _SKIPPED_KEYS}
            if kept:
                pieces.append(kept)
        content = _flatten([{"type": "text", "text": "\n".join(p)} if isinstance(p, list)
                            else p for p in pieces])
    if content:
        events.append(("system/message", {"role": "system", "content": content}))
    return events
