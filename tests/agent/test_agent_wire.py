"""Every point of the wire-format checklist, reproduced by the scripted server."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Town, quest_tools
from fake_openai import FakeOpenAI, Reply, call, chunk, message

from sesstree import Agent, IncompleteReplyError, OpenAIProvider, ProviderError, Store


def _agent(provider: OpenAIProvider, store: Store, stream: bool = False,
           town: Town | None = None) -> Agent:
    return Agent(provider, store.session("s"), quest_tools(town or Town()), stream=stream,
                 chunk_interval=0)


def _results(agent: Agent) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in agent.messages() if m["role"] == "tool"}


def test_tool_calls_detected_from_the_message_not_finish_reason(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    # gpt-4o once streamed a call with finish_reason "stop"; vLLM's required mode did too.
    server.add(
        message(tool_calls=[call("talk_to", '{"npc": "mayor"}', id="c1")], finish_reason="stop"),
        message("done", finish_reason="tool_calls"),  # and a stray hint the other way
    )
    town = Town()
    agent = _agent(provider, store, town=town)
    assert agent.run("go") == "done"
    server.add(
        Reply(events=[
            chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "c2", "type": "function",
                   "function": {"name": "talk_to", "arguments": '{"npc": "innkeeper"}'}}]}),
            chunk({}, "stop"),
        ]),
        Reply(events=[chunk({"content": "done again"}), chunk({}, "stop")]),
    )
    agent.stream = True
    assert agent.run("again") == "done again"
    assert town.said == ["mayor", "innkeeper"]


def test_length_truncated_call_is_not_run(server: FakeOpenAI, provider: OpenAIProvider,
                                          store: Store) -> None:
    server.add(
        message(tool_calls=[call("talk_to", '{"npc": "mayor"}', id="c1"),
                            call("buy", '{"item": "lan', id="c2")], finish_reason="length"),
        message("ok"),
    )
    town = Town()
    agent = _agent(provider, store, town=town)
    agent.run("go")
    assert town.said == ["mayor"] and town.gold == 10
    assert "cut off" in _results(agent)["c2"]


def test_stream_cut_mid_call_is_incomplete_and_not_run(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    # The body ends (the connection closes) with no finish_reason and no [DONE]: the call's
    # arguments are half there, and so may be the list of calls. Nothing of it is run.
    server.add(
        Reply(events=[chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                             "function": {"name": "buy", "arguments": '{"it'}}]})],
              done=False),
    )
    town = Town()
    provider.max_retries = 0  # one attempt (retried cuts: test_agent_attempts)
    agent = _agent(provider, store, stream=True, town=town)
    with pytest.raises(IncompleteReplyError):
        agent.run("go")
    types = [n.type for n in agent.session.events()]
    assert town.gold == 10 and "tool/call" not in types and "assistant/message" not in types
    assert agent.session.events()[-1].data["reason"]["kind"] == "incomplete"


def test_fragments_keyed_by_index_with_odd_ids(server: FakeOpenAI, provider: OpenAIProvider,
                                               store: Store) -> None:
    def frag(**kw: Any) -> dict[str, Any]:
        return chunk({"role": "assistant", "content": "", "tool_calls": [kw]})

    server.add(
        Reply(events=[
            # index 0: LM Studio style, numeric-string id on the first fragment only.
            frag(index=0, id="365174485", type="function",
                 function={"name": "talk_to", "arguments": ""}),
            frag(index=0, function={"arguments": '{"npc"'}),
            # index 1: integer id (Poolside), name resent whole on every fragment (NIM).
            frag(index=1, id=42, type="function", function={"name": "buy", "arguments": ""}),
            frag(index=0, function={"arguments": ': "mayor"}'}),
            frag(index=1, function={"name": "buy", "arguments": '{"item": "rope"}'}),
            # index 0 again with a new id: Ollama sent every parallel call at index 0.
            frag(index=0, id="call_x", type="function",
                 function={"name": "talk_to", "arguments": '{"npc": "innkeeper"}'}),
            # no index and no id at all: index 0, a new slot? no: the slot at 0 is call_x,
            # which has an id, so a fragment without id continues it (here: nothing to add).
            chunk({"tool_calls": [{"function": {"arguments": ""}}]}),
            chunk({}, "tool_calls", obfuscation="xyz"),
            {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 1,
                                                          "completion_tokens": 1}},
        ]),
        Reply(events=[  # a call with no id at all, and no [DONE]: the body just ends
            chunk({"tool_calls": [{"type": "function",
                                   "function": {"name": "talk_to",
                                                "arguments": {"npc": "baker"}}}]}),
            chunk({}, "tool_calls"),
        ], done=False),
        Reply(events=[chunk({"content": "All done."}), chunk({}, "stop")], done=False),
    )
    town = Town()
    agent = _agent(provider, store, stream=True, town=town)
    assert agent.run("go") == "All done."
    assert town.said == ["mayor", "innkeeper", "baker"] and town.gold == 8
    msgs = [n.data for n in agent.session.events() if n.type == "assistant/message"]
    ids = [c["id"] for c in msgs[0]["tool_calls"]]
    assert ids == ["365174485", "42", "call_x"]
    assert msgs[0]["content"] is None  # "" next to tool calls is no text
    generated = msgs[1]["tool_calls"][0]["id"]
    assert generated.startswith("call_") and len(generated) == 29
    calls = [n.data for n in agent.session.events() if n.type == "tool/call"]
    assert calls[-1] == {"id": generated, "name": "talk_to", "arguments": {"npc": "baker"},
                         "id_generated": True}
    assert set(_results(agent)) == {"365174485", "42", "call_x", generated}
    usage = [n.data for n in agent.session.events() if n.type == "usage"]
    assert usage[0] == {"model": "scripted", "usage": {"prompt_tokens": 1,
                                                       "completion_tokens": 1}}


def test_content_null_absent_or_empty_and_extra_fields(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    server.add(
        message(tool_calls=[call("talk_to", '{"npc": "mayor"}', id="a",
                                 extra_content={"sig": "abc"})], omit_content=True,
                reasoning="The mayor knows.", refusal=None, annotations=[],
                provider_specific_fields={"x": 1}),
        message("", tool_calls=[call("talk_to", '{"npc": "innkeeper"}', id="b")]),
        message(None, tool_calls=[call("talk_to", '{"npc": "baker"}', id="c")]),
        message("fine", reasoning_content="thinking"),
    )
    agent = _agent(provider, store)
    assert agent.run("go") == "fine"
    stored = [n.data for n in agent.session.events() if n.type == "assistant/message"]
    assert [m["content"] for m in stored] == [None, None, None, "fine"]
    # Unknown fields are kept in the store...
    assert stored[0]["reasoning"] == "The mayor knows."
    assert stored[0]["provider_specific_fields"] == {"x": 1}
    assert stored[3]["reasoning_content"] == "thinking"
    # ...but not replayed, except a call's extra_content, which gateways need back.
    replayed = server.requests[1]["messages"][1]
    assert replayed == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "extra_content": {"sig": "abc"},
         "function": {"name": "talk_to", "arguments": '{"npc": "mayor"}'}}]}


def test_stream_repeats_role_and_ends_without_done(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    server.add(Reply(events=[
        ": keep-alive comment",
        "event: message",
        chunk({"role": "assistant", "content": "Hel", "reasoning": "hm"}),
        chunk({"role": "assistant", "content": "lo"}),
        chunk({"role": "assistant", "content": ""}, "stop"),
    ], done=False))
    agent = _agent(provider, store, stream=True)
    assert agent.run("hi") == "Hello"
    (message_data,) = [n.data for n in agent.session.events() if n.type == "assistant/message"]
    assert message_data == {"role": "assistant", "content": "Hello", "reasoning": "hm"}


def test_error_inside_a_stream(server: FakeOpenAI, provider: OpenAIProvider,
                               store: Store) -> None:
    server.add(Reply(events=[chunk({"content": "par"}),
                             {"error": {"message": "model crashed", "type": "server_error"}}]))
    agent = _agent(provider, store, stream=True)
    with pytest.raises(ProviderError, match="model crashed"):
        agent.run("hi")
    types = [n.type for n in agent.session.events()]
    # What arrived before the error is kept; the step never got a message.
    assert types[-4:] == ["step/start", "assistant/chunk", "error", "turn/end"]
    assert agent.session.events()[-3].data == {"content": "par"}


@pytest.mark.parametrize("text", ['<tool_call>{"name": "talk_to"}</tool_call>',
                                  '[TOOL_REQUEST]{"name": "buy"}[END_TOOL_REQUEST]'])
def test_tool_call_hidden_in_text_is_an_error(server: FakeOpenAI, provider: OpenAIProvider,
                                              store: Store, text: str) -> None:
    server.add(message(text))
    agent = _agent(provider, store)
    with pytest.raises(ProviderError, match="wrote a tool call as text"):
        agent.run("hi")
    assert agent.session.events()[-1].data["reason"]["kind"] == "error"


def test_tool_results_replayed_as_strings(server: FakeOpenAI, provider: OpenAIProvider,
                                          store: Store) -> None:
    session = store.session("s")
    session.add_message({"role": "user", "content": "earlier"})
    session.add_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "talk_to", "arguments": "{}"}}]})
    session.add_message({"role": "tool", "tool_call_id": "t1",
                         "content": [{"type": "text", "text": "part one"}]})
    server.add(message("ok"))
    Agent(provider, session).run("now")
    assert server.requests[0]["messages"][2] == {"role": "tool", "tool_call_id": "t1",
                                                 "content": "part one"}
