"""The OpenAI chat-completions wire format, read tolerantly.

Servers that call themselves OpenAI-compatible differ in small ways (see ``docs/agent.md``):
tool calls without ``finish_reason == "tool_calls"``, stream fragments with missing, numeric or
reused ids, arguments that are invalid JSON or already an object, ``content`` null or absent,
extra fields, two error-body shapes, streams that end without ``[DONE]``. Everything here turns
what a server sent into one normal shape, and never raises on a field it does not know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from ..errors import ProviderError
from .redact import PieceScrubber, Redactor, one_line

__all__ = [
    "Completion",
    "StreamAssembler",
    "error_message",
    "normalise_completion",
    "parse_arguments",
    "request_message",
]

#: Keys of an assistant message that are sent back to a server; the rest is kept in the store
#: but not replayed, because strict servers reject fields they do not know.
_ASSISTANT_REQUEST_KEYS = ("role", "content", "tool_calls", "name")
#: A tool call keeps ``extra_content`` on replay: some gateways need it back verbatim.
_CALL_REQUEST_KEYS = ("id", "type", "function", "extra_content")
#: Inline tool-call formats that mean the server failed to parse a call out of the text.
_INLINE_CALL = re.compile(r"^\s*(<tool_call>|\[TOOL_REQUEST\]|<\|python_tag\|>)")


class Completion(msgspec.Struct):
    """One model reply, normalised.

    ``message`` is an OpenAI assistant message with ``content`` always present (None when the
    server sent none) and, when there are calls, ``tool_calls`` in OpenAI shape whose
    ``arguments`` are a valid JSON string. ``raw_arguments[i]`` is what the server sent for
    call ``i`` (a string, an object, or None) so nothing is lost by the normalising.
    """

    message: dict[str, Any]
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    raw_arguments: list[Any] = msgspec.field(default_factory=list)
    #: Indices of calls that arrived without an id; the loop gives them a local one.
    missing_ids: list[int] = msgspec.field(default_factory=list)
    #: Indices of calls cut off by ``finish_reason == "length"`` or an early end of stream.
    truncated: list[int] = msgspec.field(default_factory=list)
    #: The text looks like a tool call the server did not parse (LM Studio, vLLM ``auto``).
    inline_tool_call: bool = False


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Parse tool-call arguments as sent by a server: ``(object, None)`` or ``(None, error)``.

    A JSON string is decoded; an object (some proxies send one) is taken as it is; an empty
    string or None means no arguments, as several servers send for tools without parameters.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, f"arguments are not valid JSON ({exc}): {raw[:200]!r}"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _replay_arguments(raw: Any) -> str:
    # Replayed arguments must be valid JSON: Ollama rejects the next request otherwise.
    # Invalid ones become "{}"; the raw text stays in the tool/call event.
    parsed, _ = parse_arguments(raw)
    return "{}" if parsed is None else json.dumps(parsed, ensure_ascii=False)


def _normal_calls(calls: list[dict[str, Any]], finish_reason: str | None) -> Completion:
    out: list[dict[str, Any]] = []
    raws: list[Any] = []
    missing: list[int] = []
    truncated: list[int] = []
    seen: set[str] = set()
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        assert isinstance(fn, dict)
        raw = fn.get("arguments")
        cid = call.get("id")
        # Ids may be missing, integers, or repeated within one reply: results pair by id,
        # so each call needs its own, as a string.
        sid = "" if cid is None or cid == "" else str(cid)
        if not sid or sid in seen:
            missing.append(i)
            sid = ""
        seen.add(sid)
        extras = {k: v for k, v in call.items() if k not in ("id", "type", "function", "index")}
        fn_extras = {k: v for k, v in fn.items() if k not in ("name", "arguments")}
        out.append(
            {
                **extras,
                "id": sid,
                "type": "function",
                "function": {
                    **fn_extras,
                    "name": str(fn.get("name") or ""),
                    "arguments": _replay_arguments(raw),
                },
            }
        )
        raws.append(raw)
    if finish_reason == "length" and out:
        # The call still open when the token limit hit is the last one: never run it.
        truncated.append(len(out) - 1)
    completion = Completion({}, finish_reason=finish_reason)
    completion.message = {"tool_calls": out}
    completion.raw_arguments = raws
    completion.missing_ids = missing
    completion.truncated = truncated
    return completion


def normalise_completion(body: Any) -> Completion:
    """Normalise a non-streamed ``chat.completion`` body.

    Raises:
        ProviderError: the body has no usable choice (or is an error body); its message says
            what the body is ("an error: ...", "no choices: ..."), for the caller to say who
            sent it.
    """
    if not isinstance(body, dict):
        raise ProviderError(f"a JSON {type(body).__name__}, not an object")
    if "error" in body or body.get("object") == "error":
        raise ProviderError("an error: " + error_message(body))
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        shown = one_line(json.dumps(body, ensure_ascii=False, default=str))
        raise ProviderError(f"no choices: {shown}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    assert isinstance(message, dict)
    finish = choice.get("finish_reason")
    calls = message.get("tool_calls")
    return _build(
        message,
        calls if isinstance(calls, list) else [],
        finish if isinstance(finish, str) else None,
        body.get("usage") if isinstance(body.get("usage"), dict) else None,
        body.get("model") if isinstance(body.get("model"), str) else None,
    )


def _build(
    message: dict[str, Any],
    calls: list[Any],
    finish: str | None,
    usage: dict[str, Any] | None,
    model: str | None,
) -> Completion:
    calls = [c for c in calls if isinstance(c, dict)]
    # Tool calls are detected from the message, never from finish_reason: servers disagree.
    completion = _normal_calls(calls, finish) if calls else Completion({}, finish_reason=finish)
    # Unknown keys (reasoning, refusal, annotations, provider fields...) are kept in the store;
    # request_message() decides what is replayed.
    out: dict[str, Any] = {k: v for k, v in message.items() if k != "tool_calls"}
    out["role"] = "assistant"
    content = out.get("content")
    if content == "" and calls:
        content = None  # "" next to tool calls (Ollama, DeepSeek) means no text
    out["content"] = content
    if calls:
        out["tool_calls"] = completion.message["tool_calls"]
    completion.message = out
    completion.usage = usage
    completion.model = model
    completion.inline_tool_call = (
        not calls and isinstance(content, str) and bool(_INLINE_CALL.match(content))
    )
    return completion


class _Slot(msgspec.Struct):
    id: str | None = None
    name: str = ""
    arguments: str = ""
    argument_object: Any = None
    extras: dict[str, Any] = msgspec.field(default_factory=dict)


Delta = dict[str, Any]


class StreamAssembler:
    """Builds one reply from ``chat.completion.chunk`` events, whatever the server's habits.

    Fragments are keyed by ``index`` (0 when absent); a new id at an index that already holds
    a different id opens a new call (Ollama once sent every call at index 0); ``name`` is
    assigned, not concatenated (some servers resend it whole on every fragment); arguments are
    concatenated, or taken whole when a server sends them as an object.

    ``on_delta`` receives a compact delta for each event that carried something, for the
    loop to persist as ``assistant/chunk``. With a ``redactor``, text and arguments are passed
    on through a :class:`~sesstree.agent.redact.PieceScrubber`, so no delta holds a secret or
    part of one even when the server splits an echo of the key over two events.
    """

    def __init__(
        self, on_delta: Callable[[Delta], None] | None = None, redactor: Redactor | None = None
    ) -> None:
        self.on_delta = on_delta
        self._scrub = PieceScrubber(redactor) if redactor else None
        self.content: list[str] = []
        self.extras: dict[str, list[str]] = {}
        self.slots: list[_Slot] = []
        self._by_index: dict[int, int] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.done = False
        #: Something of the reply (text, reasoning, a call fragment) has arrived and been
        #: handed to ``on_delta``: from then on a retry would record a second reply.
        self.received = False
        #: ``data:`` events taken, for messages.
        self.events = 0

    @property
    def complete(self) -> bool:
        """The server said the reply is over: a ``finish_reason`` or ``[DONE]`` arrived."""
        return self.done or self.finish_reason is not None

    def feed(self, event: Any) -> None:
        """Take one decoded ``data:`` payload."""
        self.events += 1
        if not isinstance(event, dict):
            return
        if "error" in event or event.get("object") == "error":
            raise ProviderError("an error mid-stream: " + error_message(event))
        if isinstance(event.get("model"), str):
            self.model = event["model"]
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]  # the last one wins: a final usage-only chunk
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return  # the usage-only chunk has choices: []
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        out: Delta = {}
        for key in ("content", "reasoning", "reasoning_content", "refusal"):
            value = delta.get(key)
            if isinstance(value, str) and value:
                self._take_text(out, key, value)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            frags = [f for f in (self._take_call(c) for c in calls) if f]
            if frags:
                out["tool_calls"] = frags
        self._pass_on(out)

    def _pass_on(self, out: Delta) -> None:
        if out:
            self.received = True
            if self.on_delta is not None:
                self.on_delta(out)

    def _take_text(self, out: Delta, key: str, value: str) -> None:
        if self._scrub is not None:
            value = self._scrub.piece(key, value)
            if not value:
                return
        (self.content if key == "content" else self.extras.setdefault(key, [])).append(value)
        out[key] = value

    def _take_call(self, frag: Any) -> dict[str, Any] | None:
        if not isinstance(frag, dict):
            return None
        index = frag.get("index")
        index = index if isinstance(index, int) else 0
        cid = frag.get("id")
        sid = None if cid is None or cid == "" else str(cid)
        pos = self._by_index.get(index)
        if pos is None or (sid is not None and self.slots[pos].id not in (None, sid)):
            self.slots.append(_Slot(id=sid))
            pos = self._by_index[index] = len(self.slots) - 1
        slot = self.slots[pos]
        if slot.id is None:
            slot.id = sid
        fn = frag.get("function") if isinstance(frag.get("function"), dict) else {}
        assert isinstance(fn, dict)
        if isinstance(fn.get("name"), str) and fn["name"]:
            slot.name = fn["name"]
        args = fn.get("arguments")
        piece = ""
        if isinstance(args, str):
            if self._scrub is not None:
                args = self._scrub.piece(("call", pos), args)
            slot.arguments += args
            piece = args
        elif isinstance(args, dict):
            slot.argument_object = args
            piece = json.dumps(args)
        for k, v in frag.items():
            if k not in ("index", "id", "type", "function"):
                slot.extras[k] = v
        out: dict[str, Any] = {"index": pos}
        if sid is not None:
            out["id"] = sid
        if fn.get("name"):
            out["name"] = slot.name
        if piece:
            out["arguments"] = piece
        return out

    def _release_held(self) -> None:
        # The stream is complete: what was held back as a possible start of a secret was not.
        out: Delta = {}
        frags: list[dict[str, Any]] = []
        for channel, text in (self._scrub.rest() if self._scrub is not None else {}).items():
            if isinstance(channel, str):
                (self.content if channel == "content"
                 else self.extras.setdefault(channel, [])).append(text)
                out[channel] = text
            else:
                self.slots[channel[1]].arguments += text
                frags.append({"index": channel[1], "arguments": text})
        if frags:
            out["tool_calls"] = frags
        self._pass_on(out)

    def finish(self) -> Completion:
        """The assembled reply; call once the stream is :attr:`complete`."""
        self._release_held()
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        for key, parts in self.extras.items():
            message[key] = "".join(parts)
        calls = []
        for slot in self.slots:
            calls.append(
                {
                    **slot.extras,
                    "id": slot.id,
                    "type": "function",
                    "function": {
                        "name": slot.name,
                        "arguments": (
                            slot.argument_object
                            if slot.argument_object is not None and not slot.arguments
                            else slot.arguments
                        ),
                    },
                }
            )
        # A body that ended with neither [DONE] nor a finish_reason never gets here: the
        # provider retries it, or raises IncompleteReplyError, instead of taking it for a reply.
        return _build(message, calls, self.finish_reason, self.usage, self.model)


def error_message(body: Any) -> str:
    """A readable one-line message from an error body of any shape a server uses.

    ``{"error": {"message": ...}}`` (OpenAI, Ollama), ``{"object": "error", "message": ...}``
    (vLLM), ``{"error": "..."}`` (some proxies), or anything else: an HTML page, a template
    error over many lines. Always one line of at most 200 characters (:func:`one_line`).
    """
    return one_line(_error_text(body))


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg")
            kind = err.get("type") or err.get("code")
            if isinstance(msg, str) and msg:
                return f"{msg} ({kind})" if isinstance(kind, str) and kind else msg
        if isinstance(err, str) and err:
            return err
        msg = body.get("message") or body.get("detail")
        if isinstance(msg, str) and msg:
            kind = body.get("type")
            return f"{msg} ({kind})" if isinstance(kind, str) and kind else msg
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, default=str)


def request_message(message: dict[str, Any]) -> dict[str, Any]:
    """The form of a stored message that is sent to a server.

    Assistant messages lose response-only fields (reasoning, refusal, annotations...) and get
    ``content`` even when the store has none; tool results are sent as strings, which every
    server accepts. Other messages are sent as they are stored.
    """
    role = message.get("role")
    if role == "assistant":
        out = {k: message[k] for k in _ASSISTANT_REQUEST_KEYS if k in message}
        out.setdefault("content", None)
        calls = out.get("tool_calls")
        if isinstance(calls, list):
            out["tool_calls"] = [
                {k: c[k] for k in _CALL_REQUEST_KEYS if k in c} if isinstance(c, dict) else c
                for c in calls
            ]
            if not out["tool_calls"]:
                del out["tool_calls"]
        if out["content"] is None and "tool_calls" not in out:
            out["content"] = ""
        return out
    if role == "tool":
        content = message.get("content")
        if not isinstance(content, str):
            if isinstance(content, list) and all(
                isinstance(p, dict) and p.get("type") == "text" for p in content
            ):
                content = "".join(str(p.get("text", "")) for p in content)
            else:
                content = json.dumps(content, ensure_ascii=False)
        return {**message, "content": content}
    return message
