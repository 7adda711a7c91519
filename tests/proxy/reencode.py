"""Conversations written once, logically, and encoded for a wire protocol in every shape that
protocol reads as the same input: the generator of the canonical form's tests.

A :class:`Msg` is a role and blocks (``("text", s)``, ``("image", url)``, ``("call", id,
name, args)``, ``("result", id, text, is_error)``). Each protocol is a :class:`Shapes`: how
a message is encoded (every choice drawn from a ``random.Random``, so one message comes out in
a different shape each time it is re-sent), where a request goes, how a reply (streamed or
not) becomes the client's next messages, which roles its new input may hold. A protocol plugs
in by adding one such class to :data:`PROTOCOLS`.

Mutations (:func:`mutations`) change one message in the ways that change the input: a
character, the role, a dropped or reordered block, a tool id, a dropped message.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sesstree.proxy.protocols import ANTHROPIC, CHAT, RESPONSES

__all__ = ["PROTOCOLS", "Msg", "Shapes", "mutations"]

CACHE = {"type": "ephemeral"}


@dataclass
class Msg:
    """One message, logically: what the model reads."""

    role: str
    blocks: list[tuple[Any, ...]]
    #: What the server said of it and a client may or may not send back (item ids).
    server: dict[str, Any] = field(default_factory=dict)


def _shuffled(d: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    keys = list(d)
    rnd.shuffle(keys)
    return {k: d[k] for k in keys}


def _args(args: dict[str, Any], rnd: random.Random) -> str:
    """Tool arguments as some client serializes them."""
    items = list(args.items())
    rnd.shuffle(items)
    return json.dumps(dict(items), separators=rnd.choice([(",", ":"), (", ", ": ")]),
                      ensure_ascii=rnd.random() < 0.5)


def _maybe_cache(part: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    return {**part, "cache_control": CACHE} if rnd.random() < 0.3 else part


class Shapes:
    """A wire protocol's shapes (subclasses fill them in)."""

    name = ""
    #: The protocol as :func:`sesstree.proxy.protocols.parse_request` names it.
    protocol = ""
    path = ""
    #: Roles new input may hold, besides user (unknown ones included).
    roles: tuple[str, ...] = ()
    #: Whether a tool result can say it is an error.
    error_flag = False

    #: Whether a tool call's id is part of the input (Gemini's is not: its clients replace it).
    ids_count = True
    #: Whether a reply's adjacent text parts are one text (Gemini's are: where its stream cut
    #: the text is no part of it, so a split is no change; a user's parts are the user's).
    joins_text = False
    #: Whether each message is one unit of the history key (Gemini keys its turns).
    one_unit_each = True
    #: The raw type a message is stored as when that type is no unit itself (Gemini's).
    raw_type: str | None = None

    def result(self, call_id: str, name: str, text: str, is_error: bool,
               extra: list[tuple[Any, ...]]) -> Msg:
        """The message that answers tool ``name``'s call (``extra``: blocks it may carry
        besides, where the protocol puts a result in a user message)."""
        return Msg("tool", [("result", call_id, text, False)])

    def body(self, system: str | None, history: list[Msg], rnd: random.Random,
             stream: bool) -> dict[str, Any]:
        """A request re-sending ``history``, each message in a shape drawn from ``rnd``."""
        raise NotImplementedError

    def target(self, stream: bool) -> str:
        """The path (and query) a request is sent to."""
        return self.path

    def inputs_sent(self, body: dict[str, Any], system: bool) -> list[Any]:
        """The messages of a request's history as sent, its system prompt left out."""
        raise NotImplementedError

    def reply(self, text: str, streamed: bool) -> list[Msg]:
        """The messages a reply's body (JSON, or a stream of server-sent events) adds to the
        client's history."""
        raise NotImplementedError


def _sse(text: str) -> list[Any]:
    return [json.loads(line[5:]) for line in text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


class Chat(Shapes):
    name, protocol, path = "chat", CHAT, "/v1/chat/completions"

    def inputs_sent(self, body: dict[str, Any], system: bool) -> list[Any]:
        return list(body["messages"][1:] if system else body["messages"])

    def reply(self, text: str, streamed: bool) -> list[Msg]:
        if not streamed:
            msg = json.loads(text)["choices"][0]["message"]
        else:
            msg = {"content": "", "tool_calls": []}
            for e in _sse(text):
                for choice in e.get("choices", []):
                    delta = choice["delta"]
                    msg["content"] += delta.get("content") or ""
                    for call in delta.get("tool_calls", []):
                        if "id" in call:
                            msg["tool_calls"].append({"id": call["id"], "function": {
                                "name": call["function"]["name"], "arguments": ""}})
                        msg["tool_calls"][-1]["function"]["arguments"] += \
                            call["function"]["arguments"]
        blocks: list[tuple[Any, ...]] = [("text", msg["content"])] if msg.get("content") else []
        blocks += [("call", c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                   for c in msg.get("tool_calls") or []]
        return [Msg("assistant", blocks)]
    roles = ("system", "developer", "critic", "function")

    def message(self, m: Msg, rnd: random.Random) -> dict[str, Any]:
        texts = [b for b in m.blocks if b[0] in ("text", "image")]
        calls = [b for b in m.blocks if b[0] == "call"]
        results = [b for b in m.blocks if b[0] == "result"]
        out: dict[str, Any] = {"role": m.role}
        if results:
            _, cid, text, _ = results[0]
            out["tool_call_id"] = cid
            out["content"] = rnd.choice([text, [_maybe_cache({"type": "text", "text": text},
                                                             rnd)]])
        elif texts:
            out["content"] = self.content(texts, rnd)
        else:
            choice = rnd.randrange(3)
            if choice < 2:
                out["content"] = [None, ""][choice]
        if calls:
            out["tool_calls"] = [_shuffled({"id": c[1], **({"type": "function"}
                                                           if rnd.random() < 0.7 else {}),
                                            "function": {"name": c[2], "arguments": _args(
                                                c[3], rnd)}}, rnd) for c in calls]
        if m.role == "assistant" and rnd.random() < 0.5:
            out.update({"refusal": None, "annotations": [], "audio": None})
        return _shuffled(out, rnd)

    @staticmethod
    def content(blocks: list[tuple[Any, ...]], rnd: random.Random) -> Any:
        if len(blocks) == 1 and blocks[0][0] == "text" and rnd.random() < 0.5:
            return blocks[0][1]
        return [_maybe_cache({"type": "text", "text": b[1]} if b[0] == "text" else
                             {"type": "image_url", "image_url": {"url": b[1]}}, rnd)
                for b in blocks]

    def body(self, system: str | None, history: list[Msg], rnd: random.Random,
             stream: bool) -> dict[str, Any]:
        messages = [self.message(m, rnd) for m in history]
        if system is not None:
            messages.insert(0, self.message(Msg("system", [("text", system)]), rnd))
        return {"model": "m", "messages": messages, "stream": stream}


class Anthropic(Shapes):
    name, protocol, path = "anthropic", ANTHROPIC, "/v1/messages"

    def inputs_sent(self, body: dict[str, Any], system: bool) -> list[Any]:
        return list(body["messages"])

    def reply(self, text: str, streamed: bool) -> list[Msg]:
        if not streamed:
            content = json.loads(text)["content"]
        else:
            content, partial = [], ""
            for e in _sse(text):
                if e["type"] == "content_block_start":
                    content.append(dict(e["content_block"]))
                    partial = ""
                elif e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta":
                    content[-1]["text"] += e["delta"]["text"]
                elif e["type"] == "content_block_delta":
                    partial += e["delta"]["partial_json"]
                elif e["type"] == "content_block_stop" and content[-1]["type"] == "tool_use":
                    content[-1]["input"] = json.loads(partial or "{}")
        return [Msg("assistant", [("text", b["text"]) if b["type"] == "text" else
                                  ("call", b["id"], b["name"], b["input"]) for b in content])]
    roles = ("critic",)
    error_flag = True

    def result(self, call_id: str, name: str, text: str, is_error: bool,
               extra: list[tuple[Any, ...]]) -> Msg:
        return Msg("user", [("result", call_id, text, is_error), *extra])

    @staticmethod
    def text_content(text: str, rnd: random.Random) -> Any:
        return rnd.choice([text, [{"type": "text", "text": text}],
                           [{"type": "text", "text": text, "cache_control": CACHE}]])

    def block(self, b: tuple[Any, ...], rnd: random.Random) -> dict[str, Any]:
        if b[0] == "text":
            out: dict[str, Any] = {"type": "text", "text": b[1]}
            if rnd.random() < 0.2:
                out["citations"] = rnd.choice([None, []])
        elif b[0] == "image":
            out = {"type": "image", "source": {"type": "url", "url": b[1]}}
        elif b[0] == "call":
            out = {"type": "tool_use", "id": b[1], "name": b[2],
                   "input": dict(sorted(b[3].items(), key=lambda _: rnd.random()))}
        else:
            out = {"type": "tool_result", "tool_use_id": b[1],
                   "content": self.text_content(b[2], rnd)}
            if b[3] or rnd.random() < 0.3:
                out["is_error"] = b[3]
        return _shuffled(_maybe_cache(out, rnd), rnd)

    def message(self, m: Msg, rnd: random.Random) -> dict[str, Any]:
        if len(m.blocks) == 1 and m.blocks[0][0] == "text" and rnd.random() < 0.5:
            content: Any = m.blocks[0][1]
        else:
            content = [self.block(b, rnd) for b in m.blocks]
        return _shuffled({"role": m.role, "content": content}, rnd)

    def body(self, system: str | None, history: list[Msg], rnd: random.Random,
             stream: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"model": "m", "max_tokens": 64, "stream": stream,
                               "messages": [self.message(m, rnd) for m in history]}
        if system is not None:
            out["system"] = self.text_content(system, rnd)
        return out


class Responses(Shapes):
    name, protocol, path = "responses", RESPONSES, "/v1/responses"

    def inputs_sent(self, body: dict[str, Any], system: bool) -> list[Any]:
        return list(body["input"])

    def reply(self, text: str, streamed: bool) -> list[Msg]:
        response = json.loads(text) if not streamed else next(
            e["response"] for e in _sse(text) if e["type"] == "response.completed")
        out = []
        for item in response["output"]:
            server = {k: item[k] for k in ("id", "status") if k in item}
            if item["type"] == "function_call":
                out.append(Msg("assistant", [("call", item["call_id"], item["name"],
                                              json.loads(item["arguments"]))], server))
            else:
                out.append(Msg("assistant", [("text", p["text"]) for p in item["content"]],
                               server))
        return out
    roles = ("system", "developer", "critic")

    def item(self, m: Msg, rnd: random.Random) -> dict[str, Any]:
        kind = m.blocks[0][0] if m.blocks else "text"
        server = {k: v for k, v in m.server.items() if rnd.random() < 0.5}
        if kind == "call":
            _, cid, name, args = m.blocks[0]
            return _shuffled({"type": "function_call", "call_id": cid, "name": name,
                              "arguments": _args(args, rnd), **server}, rnd)
        if kind == "result":
            _, cid, text, _ = m.blocks[0]
            output = rnd.choice([text, [{"type": "input_text", "text": text}]])
            return _shuffled({"type": "function_call_output", "call_id": cid,
                              "output": output}, rnd)
        text_type = "output_text" if m.role == "assistant" else "input_text"
        if len(m.blocks) == 1 and kind == "text" and rnd.random() < 0.4:
            return _shuffled({"role": m.role, "content": m.blocks[0][1], **server}, rnd)
        parts: list[dict[str, Any]] = []
        for b in m.blocks:
            if b[0] == "text":
                part: dict[str, Any] = {"type": text_type, "text": b[1]}
                if m.role == "assistant" and rnd.random() < 0.5:
                    part.update({"annotations": [], "logprobs": []})
                parts.append(_shuffled(part, rnd))
            else:
                parts.append({"type": "input_image", "image_url": b[1]})
        item: dict[str, Any] = {"role": m.role, "content": parts, **server}
        if rnd.random() < 0.6:
            item["type"] = "message"
        return _shuffled(item, rnd)

    def body(self, system: str | None, history: list[Msg], rnd: random.Random,
             stream: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"model": "m", "stream": stream, "store": False,
                               "input": [self.item(m, rnd) for m in history]}
        if system is not None:
            out["instructions"] = system
        return out


PROTOCOLS: dict[str, Shapes] = {s.name: s for s in (Chat(), Anthropic(), Responses())}


class Gemini(Shapes):
    """Gemini ``generateContent``: registered only where the proxy speaks it. Its rules are
    its mapping's (:mod:`sesstree.interop.gemini`): a run of contents of one role is one turn
    (a reply re-sent as one content per chunk is the reply), its text parts are one text, a
    call's id and every ``thoughtSignature`` are no part of the input, a user's role may go
    unsaid, a whole number may come as a float."""

    name, path = "gemini", "/v1beta/models/m:generateContent"
    roles = ("critic",)
    ids_count = False
    joins_text = True
    one_unit_each = False
    raw_type = "gemini/content"
    SIGNATURE = "c2lnbmF0dXJlIG9mIGEgdGhvdWdodA=="

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol

    def target(self, stream: bool) -> str:
        return "/v1beta/models/m:streamGenerateContent?alt=sse" if stream else self.path

    def result(self, call_id: str, name: str, text: str, is_error: bool,
               extra: list[tuple[Any, ...]]) -> Msg:
        return Msg("user", [("result", call_id, text, False), *extra], {"name": name})

    @staticmethod
    def _number(value: Any, rnd: random.Random) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and rnd.random() < 0.5:
            return float(value)  # a protobuf Struct holds doubles
        return value

    def parts(self, m: Msg, rnd: random.Random) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for b in m.blocks:
            if b[0] == "text":
                text, cut = b[1], rnd.randrange(len(b[1]) + 1)
                # a reply's text cut elsewhere, as a stream cuts it (a user's is as it was made)
                pieces = [text[:cut], text[cut:]] if 0 < cut < len(text) and \
                    m.role == "assistant" and rnd.random() < 0.4 else [text]
                out += [{"text": piece} for piece in pieces]
            elif b[0] == "image":
                out.append({"fileData": {"mimeType": "image/png", "fileUri": b[1]}})
            elif b[0] == "call":
                call: dict[str, Any] = {"name": b[2], "args": _shuffled(
                    {k: self._number(v, rnd) for k, v in b[3].items()}, rnd)}
                if rnd.random() < 0.5:
                    call["id"] = b[1]
                out.append({"functionCall": call})
            else:
                response: dict[str, Any] = {"name": m.server.get("name", ""),
                                            "response": {"output": b[2]}}
                out.append({"functionResponse": response})
        if m.role == "assistant" and out and rnd.random() < 0.5:
            out[0] = {**out[0], "thoughtSignature": self.SIGNATURE}
        return [_shuffled(p, rnd) for p in out]

    def contents(self, m: Msg, rnd: random.Random) -> list[dict[str, Any]]:
        role = "model" if m.role == "assistant" else m.role
        parts = self.parts(m, rnd)
        # a reply re-sent as one content per part, as the SDK's chats keep a stream
        groups = [[p] for p in parts] if role == "model" and rnd.random() < 0.3 else [parts]
        out = []
        for group in groups:
            content: dict[str, Any] = {"parts": group}
            if role != "user" or rnd.random() < 0.7:
                content["role"] = role
            out.append(_shuffled(content, rnd))
        return out

    def body(self, system: str | None, history: list[Msg], rnd: random.Random,
             stream: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"contents": [c for m in history for c in self.contents(m, rnd)]}
        if system is not None:
            out["systemInstruction"] = rnd.choice([
                {"parts": [{"text": system}]}, {"role": "user", "parts": [{"text": system}]},
                system])
        return out

    def inputs_sent(self, body: dict[str, Any], system: bool) -> list[Any]:
        return list(body["contents"])

    def reply(self, text: str, streamed: bool) -> list[Msg]:
        chunks = _sse(text) if streamed else [json.loads(text)]
        blocks: list[tuple[Any, ...]] = []
        for chunk in chunks:
            for part in chunk["candidates"][0]["content"].get("parts", []):
                if "functionCall" in part:
                    fc = part["functionCall"]
                    blocks.append(("call", fc.get("id", ""), fc["name"], fc.get("args", {})))
                elif part.get("text"):
                    if blocks and blocks[-1][0] == "text":
                        blocks[-1] = ("text", blocks[-1][1] + part["text"])
                    else:
                        blocks.append(("text", part["text"]))
        return [Msg("assistant", blocks)]


try:  # the fourth protocol, where this sesstree has it
    from sesstree.proxy.protocols import GEMINI  # type: ignore[attr-defined]
except ImportError:
    pass
else:
    PROTOCOLS["gemini"] = Gemini(GEMINI)


def _flip(text: str, at: int) -> str:
    ch = text[at]
    return text[:at] + ("b" if ch == "a" else "a") + text[at + 1:]


def mutations(history: list[Msg], at: int, shapes: Shapes) -> Iterator[tuple[str, list[Msg]]]:
    """Each way to change message ``at`` of ``history`` into another input the protocol can
    say, with its name."""
    m = history[at]
    roles = shapes.roles
    # Chat keeps an assistant's text and its calls apart, and one text of a tool result.
    apart = shapes.name == "chat" and m.role in ("assistant", "tool")

    def changed(blocks: list[tuple[Any, ...]] | None = None, role: str | None = None
                ) -> list[Msg]:
        out = copy.deepcopy(history)
        out[at] = Msg(role or m.role, blocks if blocks is not None else m.blocks, m.server)
        return out

    for i, b in enumerate(m.blocks):
        if b[0] in ("text", "image") and b[1]:
            yield "a changed character", changed([*m.blocks[:i], (b[0], _flip(b[1], 0)),
                                                  *m.blocks[i + 1:]])
        if b[0] == "result":
            yield "a changed character", changed([*m.blocks[:i], (
                b[0], b[1], _flip(b[2], 0) if b[2] else "x", b[3]), *m.blocks[i + 1:]])
            if shapes.error_flag:
                yield "a changed error flag", changed([*m.blocks[:i], (
                    b[0], b[1], b[2], not b[3]), *m.blocks[i + 1:]])
        if b[0] in ("call", "result") and shapes.ids_count:
            yield "a changed tool id", changed([*m.blocks[:i], (b[0], b[1] + "x", *b[2:]),
                                                *m.blocks[i + 1:]])
        if b[0] == "call":
            yield "changed arguments", changed([*m.blocks[:i], (
                b[0], b[1], b[2], {**b[3], "extra": 1}), *m.blocks[i + 1:]])
    if all(b[0] == "text" for b in m.blocks):
        for role in ("user", "assistant", *roles):
            if role != m.role:
                yield f"role {role} for {m.role}", changed(role=role)
                break
    if len(m.blocks) > 1:
        yield "a dropped block", changed(m.blocks[1:])
        if m.blocks[0] != m.blocks[1] and not apart \
                and not (shapes.joins_text and m.role == "assistant"
                         and m.blocks[0][0] == m.blocks[1][0] == "text"):
            yield "a reordered block", changed([m.blocks[1], m.blocks[0], *m.blocks[2:]])
    if m.blocks and m.blocks[0][0] == "text" and len(m.blocks[0][1]) > 1 and not apart \
            and not (shapes.joins_text and m.role == "assistant"):
        text = m.blocks[0][1]
        yield "a text split in two", changed([("text", text[:1]), ("text", text[1:]),
                                              *m.blocks[1:]])
    yield "a dropped message", [*copy.deepcopy(history[:at]), *copy.deepcopy(history[at + 1:])]
