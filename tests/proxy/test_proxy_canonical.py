"""Test vectors of the canonical form: what re-encodings match, what changes do not."""

from __future__ import annotations

from typing import Any

import pytest

from sesstree.proxy import EMPTY_KEY, canonical_message, chain_key, parse_request
from sesstree.proxy.canonical import roll
from sesstree.proxy.protocols import ANTHROPIC, CHAT, RESPONSES


def key(*messages: dict[str, Any]) -> bytes:
    k = EMPTY_KEY
    for m in messages:
        k = chain_key(k, "message", m)
    return k


SAME = [
    # keys in another order
    ({"role": "user", "content": "hi"}, {"content": "hi", "role": "user"}),
    # a string, or a list of one text part, with or without a cache marker
    ({"role": "user", "content": "hi"},
     {"role": "user", "content": [{"type": "text", "text": "hi",
                                   "cache_control": {"type": "ephemeral"}}]}),
    # text parts of other APIs are text parts
    ({"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
     {"role": "user", "content": "hi"}),
    # an assistant reply as the server sent it and as the client re-sends it
    ({"role": "assistant", "content": "ok", "refusal": None, "annotations": [], "audio": None},
     {"role": "assistant", "content": "ok"}),
    # null, empty and missing content
    ({"role": "assistant", "content": None, "tool_calls": []},
     {"role": "assistant", "content": ""}),
    # whitespace and key order inside tool-call arguments
    ({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "ls", "arguments": '{"path": ".", "all": true}'}}]},
     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {
         "arguments": '{"all":true,"path":"."}', "name": "ls"}}]}),
]

DIFFERENT = [
    ({"role": "user", "content": "hi"}, {"role": "user", "content": "hi "}),  # text is exact
    ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}),
    ({"role": "tool", "tool_call_id": "a", "content": "1"},
     {"role": "tool", "tool_call_id": "b", "content": "1"}),
    ({"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "ls",
                                                                     "arguments": "{}"}}]},
     {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "cat",
                                                                     "arguments": "{}"}}]}),
    # adjacent text parts are not one text: no provider says it reads them as "a\nb"
    ({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
     {"role": "user", "content": "a\nb"}),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]},
     {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "b.png"}}]}),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_reencodings_match(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert canonical_message("message", a) == canonical_message("message", b)
    assert key(a) == key(b)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_changes_do_not_match(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert key(a) != key(b)


def test_canonical_vector() -> None:
    # pinned: changing the canonical form makes every stored history unmatchable
    m = {"role": "assistant", "content": [{"type": "text", "text": "a"}],
         "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"b": 1, "a": 2}'}}]}
    assert canonical_message("assistant/message", m) == [
        "assistant", [["text", "a"]], [["c", "f", '{"a":2,"b":1}']], None, None]
    assert key(m).hex() == chain_key(EMPTY_KEY, "assistant/message", m).hex()
    # blake3 of the msgpack bytes written out by hand: ["user", [["text", "hi"]], [], nil, nil]
    # (the role comes from the event type when the message has none)
    assert chain_key(EMPTY_KEY, "user/message", {"content": "hi"}).hex() == \
        "b21e75d3143f3fbb33b992b86f5d8c2d839bff32596ce27602006874b1bd15df"
    from blake3 import blake3
    assert blake3(b"\x95\xa4user\x91\x92\xa4text\xa2hi\x90\xc0\xc0").hexdigest() == \
        "b21e75d3143f3fbb33b992b86f5d8c2d839bff32596ce27602006874b1bd15df"


def test_key_is_a_chain() -> None:
    a, b = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    assert key(a, b) != key(b, a)
    assert key(a, b) == chain_key(key(a), "message", b)


def test_one_history_in_three_protocols_has_one_key() -> None:
    chat = parse_request(CHAT, {"model": "m", "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
    responses = parse_request(RESPONSES, {"model": "m", "instructions": "be brief",
                                          "input": [{"role": "user", "content": [
                                              {"type": "input_text", "text": "hi"}]}]})
    anthropic = parse_request(ANTHROPIC, {"model": "m", "max_tokens": 5, "system": [
        {"type": "text", "text": "be brief"}], "messages": [{"role": "user", "content": "hi"}]})
    keys = set()
    for parsed in (chat, responses, anthropic):
        assert parsed is not None
        k, pending = EMPTY_KEY, 0
        for type, data in parsed.events:
            k, pending, _ = roll(k, pending, type, data)
        keys.add(k)
    assert len(keys) == 1


def test_other_roles_follow_the_same_rules() -> None:
    cached = [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]
    for role in ("developer", "tool", "function", "critic"):
        assert key({"role": role, "content": "hi"}) == key({"role": role, "content": cached})
        assert key({"role": role, "content": "hi"}) != key({"role": "user", "content": "hi"})


def test_wire_forms_vectors() -> None:
    from sesstree.proxy.wireforms import anthropic_form, response_item_form
    # a reply item as the server sent it, and as a client re-sends it
    assert response_item_form({
        "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}]
    }) == response_item_form({"role": "assistant", "content": "ok"}) == \
        canonical_message("assistant/message", {"role": "assistant", "content": "ok"})
    call = {"type": "function_call", "call_id": "c", "name": "ls", "arguments": '{"a": 1}'}
    assert response_item_form({**call, "id": "fc_1", "status": "completed"}) == \
        response_item_form({**call, "arguments": '{"a":1}'})
    assert response_item_form(call) != response_item_form({**call, "call_id": "d"})
    # Anthropic: a tool result and the text after it, in two orders, are two inputs
    result = {"type": "tool_result", "tool_use_id": "t", "content": "1"}
    text = {"type": "text", "text": "go on"}
    assert anthropic_form({"role": "user", "content": [result, text]}) != \
        anthropic_form({"role": "user", "content": [text, result]})
    assert anthropic_form({"role": "user", "content": [result]}) == anthropic_form(
        {"role": "user", "content": [{**result, "is_error": False, "content": [
            {"type": "text", "text": "1", "cache_control": {"type": "ephemeral"}}]}]})
    assert anthropic_form({"role": "user", "content": [result]}) != anthropic_form(
        {"role": "user", "content": [{**result, "is_error": True}]})
    # a thinking block is what the model read: dropping it is another input
    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    assert anthropic_form({"role": "assistant", "content": [thinking, text]}) != \
        anthropic_form({"role": "assistant", "content": [text]})


def _item(item: dict[str, Any]) -> Any:
    from sesstree.proxy.canonical import canonical_unit

    return canonical_unit("openai/response-item", item)


def test_a_responses_item_keeps_every_field_the_model_reads() -> None:
    said = {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]}
    # What the server says of its item (its id, its status) is no part of the input...
    assert _item({**said, "id": "msg_1", "status": "completed"}) == _item(said)
    assert _item({"role": "assistant", "content": "Looking."}) == _item(said)
    # ...a field the model reads is (Codex's phase of an assistant message, a field to come).
    assert _item({**said, "phase": "commentary"}) != _item(said)
    assert _item({**said, "phase": "commentary"}) != _item({**said, "phase": "final_answer"})
    assert _item({"role": "user", "content": "hi", "x_hint": 1}) != _item(
        {"role": "user", "content": "hi"})


def test_a_reasoning_items_id_counts_only_when_it_is_all_that_names_its_content() -> None:
    summary = [{"type": "summary_text", "text": "Thinking."}]
    carried = {"type": "reasoning", "summary": summary, "encrypted_content": "gAAAA"}
    # Its content carried (encrypted): the id the client re-sends, or not, changes nothing.
    assert _item({**carried, "id": "rs_1"}) == _item(carried)
    assert _item({**carried, "id": "rs_1"}) == _item({**carried, "id": "rs_2", "status": None})
    # Stored by the server (no encrypted content): the id is what names the reasoning read.
    stored = {"type": "reasoning", "summary": []}
    assert _item({**stored, "id": "rs_1"}) != _item({**stored, "id": "rs_2"})
    assert _item({**stored, "id": "rs_1"}) == _item({**stored, "id": "rs_1",
                                                     "status": "completed"})
