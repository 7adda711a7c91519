"""The agent loop against servers that misbehave the way real ones (and proxies) do.

Each server here is a real loopback HTTP server doing exactly the wrong thing: cutting a
stream, answering JSON to a stream request, refusing ``content: null``, holding a request past
the read timeout, stalling between chunks, cutting an answer at the token limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Town, quest_tools
from fake_openai import (
    NGINX_502,
    FakeOpenAI,
    Reply,
    call,
    chunk,
    error,
    message,
    rejects_null_content,
    stream,
    strict_roles,
    template_error,
)

from sesstree import Agent, IncompleteReplyError, OpenAIProvider, ProviderError, Store


def _run(agent: Agent, prompt: str | None, mode: str) -> str:
    if prompt is None:
        return agent.resume() if mode == "sync" else asyncio.run(agent.aresume())
    return agent.run(prompt) if mode == "sync" else asyncio.run(agent.arun(prompt))


def _types(agent: Agent) -> list[str]:
    return [n.type for n in agent.session.events()]


def _end(agent: Agent) -> dict[str, Any]:
    last = agent.session.events()[-1]
    assert last.type == "turn/end"
    reason: dict[str, Any] = last.data["reason"]
    return reason


# -- a stream that ends without finish_reason, [DONE] or an error ---------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cut_stream_before_any_text_is_retried(server: FakeOpenAI, provider: OpenAIProvider,
                                               store: Store, mode: str) -> None:
    # Only the role delta arrived before the proxy closed the connection: nothing of the reply
    # was recorded or shown, so asking again is safe.
    server.add(Reply(events=[chunk({"role": "assistant", "content": ""})], done=False),
               stream("Whole ", "answer."))
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=0)
    assert _run(agent, "hi", mode) == "Whole answer."
    retries = [n.data for n in agent.session.events() if n.type == "error"]
    assert len(retries) == 1 and retries[0]["kind"] == "retry"
    assert "ended without a finish_reason or [DONE] after 1 event" in retries[0]["message"]
    assert _end(agent) == {"kind": "answer"}


@pytest.fixture
def once(server: FakeOpenAI) -> Iterator[OpenAIProvider]:
    """A provider that makes one attempt: a cut stream is not retried (see test_agent_attempts)."""
    p = OpenAIProvider(server.url, "scripted", max_retries=0)
    yield p
    p.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cut_stream_after_text_is_recorded_incomplete(server: FakeOpenAI,
                                                      once: OpenAIProvider, store: Store,
                                                      mode: str) -> None:
    server.add(Reply(events=[chunk({"role": "assistant", "content": "The key is "}),
                             chunk({"content": "under the"})], done=False))
    agent = Agent(once, store.session("s"), stream=True, chunk_interval=0)
    with pytest.raises(IncompleteReplyError, match="ended without a finish_reason or \\[DONE\\]"):
        _run(agent, "where is the key?", mode)
    assert len(server.requests) == 1
    types = _types(agent)
    assert "assistant/message" not in types  # half an answer is not taken for one
    chunks = [n.data["content"] for n in agent.session.events() if n.type == "assistant/chunk"]
    assert "".join(chunks) == "The key is under the"
    error = next(n.data for n in agent.session.events() if n.type == "error")
    assert error["kind"] == "provider" and error["type"] == "IncompleteReplyError"
    assert _end(agent)["kind"] == "incomplete"
    # The history ends with the question: the next run asks again.
    assert agent.session.messages()[-1]["role"] == "user"


def test_cut_stream_keeps_every_delta_that_arrived(server: FakeOpenAI,
                                                  provider: OpenAIProvider, store: Store) -> None:
    # With a long chunk interval only the first delta is written at once; the rest wait to
    # be merged, and must be written when the reply stops, not dropped, on the attempt that
    # is retried as on the last one.
    cut = Reply(events=[chunk({"content": "a"}), chunk({"content": "b"}),
                        chunk({"content": "c"})], done=False)
    provider.max_retries = 1
    server.add(cut, cut)
    agent = Agent(provider, store.session("s"), stream=True, chunk_interval=60)
    with pytest.raises(IncompleteReplyError):
        agent.run("hi")
    chunks = [n.type if n.type != "assistant/chunk" else n.data["content"]
              for n in agent.session.events() if n.type in ("assistant/chunk", "step/end")]
    assert chunks == ["a", "bc", "step/end", "a", "bc", "step/end"]


def test_ctrl_c_while_a_chunk_is_shown_records_it_once(server: FakeOpenAI,
                                                      provider: OpenAIProvider,
                                                      store: Store) -> None:
    """Ctrl-C that lands after a chunk is stored, while a subscriber shows it (what `sess
    run` does): the turn ends cancelled and the chunk is not written a second time."""
    server.add(stream("Half", " more"))
    session = store.session("s")
    agent = Agent(provider, session, stream=True)

    def ctrl_c(node: Any) -> None:
        if node.type == "assistant/chunk":
            raise KeyboardInterrupt

    agent.subscribe(ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        agent.run("hi")
    log = store.log("s")
    assert [n.data["content"] for n in log if n.type == "assistant/chunk"] == ["Half"]
    assert log[0].type == "turn/end"
    assert log[0].data["reason"] == {"kind": "cancelled", "by": "KeyboardInterrupt"}


def test_stream_with_finish_reason_but_no_done_is_complete(server: FakeOpenAI,
                                                           provider: OpenAIProvider,
                                                           store: Store) -> None:
    server.add(Reply(events=[chunk({"content": "ok"}), chunk({}, "stop")], done=False))
    agent = Agent(provider, store.session("s"), stream=True)
    assert agent.run("hi") == "ok"
    assert _end(agent) == {"kind": "answer"}


# -- a server that ignores "stream": true ------------------------------------------------------


@pytest.mark.parametrize(("content_type", "mode"),
                         [(None, "sync"), (None, "async"), ("text/plain", "sync"), ("", "sync")])
def test_json_answer_to_a_stream_request(server: FakeOpenAI, provider: OpenAIProvider,
                                         store: Store, content_type: str | None,
                                         mode: str) -> None:
    reply = message("A whole JSON answer.")
    reply.content_type = content_type
    server.add(reply)
    agent = Agent(provider, store.session("s"), stream=True)
    assert _run(agent, "hi", mode) == "A whole JSON answer."
    assert server.requests[0]["stream"] is True
    assert agent.session.messages()[-1]["content"] == "A whole JSON answer."


def test_stream_labelled_json_is_read_as_a_stream(server: FakeOpenAI,
                                                 provider: OpenAIProvider, store: Store) -> None:
    reply = stream("Mis", "labelled.")
    reply.content_type = "application/json"
    server.add(reply)
    agent = Agent(provider, store.session("s"), stream=True)
    assert agent.run("hi") == "Mislabelled."


def test_json_tool_call_to_a_stream_request(server: FakeOpenAI, provider: OpenAIProvider,
                                            store: Store) -> None:
    server.add(message(tool_calls=[call("talk_to", '{"npc": "mayor"}')]), message("Done."))
    town = Town()
    agent = Agent(provider, store.session("s"), quest_tools(town), stream=True)
    assert agent.run("go") == "Done." and town.said == ["mayor"]


# -- after a failed turn ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_a_failed_turn_no_two_user_messages_are_sent(server: FakeOpenAI,
                                                           provider: OpenAIProvider,
                                                           store: Store, mode: str) -> None:
    server.add(error(400, {"error": {"message": "model is loading"}}))
    agent = Agent(provider, store.session("s"))
    with pytest.raises(ProviderError):
        _run(agent, "first question", mode)
    assert agent.session.messages()[-1] == {"role": "user", "content": "first question"}
    # A strict chat template refuses two user messages in a row, forever after.
    server.add(strict_roles(message("Both answered.")))
    assert _run(agent, "second question", mode) == "Both answered."
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user"]
    assert "first question" in sent[0]["content"] and "second question" in sent[0]["content"]
    # The store keeps what was said, as it was said.
    stored = [m for m in agent.session.messages() if m["role"] == "user"]
    assert [m["content"] for m in stored] == ["first question", "second question"]


def test_resume_retries_the_pending_turn(server: FakeOpenAI, once: OpenAIProvider,
                                         store: Store) -> None:
    server.add(Reply(events=[chunk({"content": "par"})], done=False))
    agent = Agent(once, store.session("s"), stream=True)
    with pytest.raises(IncompleteReplyError):
        agent.run("question")
    server.add(strict_roles(stream("Whole.")))
    assert agent.resume() == "Whole."
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["user"]
    assert _end(agent) == {"kind": "answer"}


# -- content: null, and requests the server calls invalid ------------------------------------


def _tool_turn(server: FakeOpenAI, then: Reply) -> None:
    server.add(message(tool_calls=[call("talk_to", '{"npc": "mayor"}', id="c1")]),
               rejects_null_content(then))


def test_null_content_refused_is_not_retried_and_says_what_to_do(
    server: FakeOpenAI, provider: OpenAIProvider, store: Store
) -> None:
    _tool_turn(server, message("never"))
    agent = Agent(provider, store.session("s"), quest_tools(Town()))
    with pytest.raises(ProviderError, match='try null_content="empty"') as info:
        agent.run("go")
    assert info.value.status == 400
    assert len(server.requests) == 2  # the refused request was sent once


@pytest.mark.parametrize(("mode", "sent"), [("empty", {"content": ""}), ("omit", {})])
def test_null_content_compat(server: FakeOpenAI, store: Store, mode: str,
                             sent: dict[str, Any]) -> None:
    provider = OpenAIProvider(server.url, "m", null_content=mode)  # type: ignore[arg-type]
    _tool_turn(server, message("The mayor spoke."))
    agent = Agent(provider, store.session("s"), quest_tools(Town()))
    assert agent.run("go") == "The mayor spoke."
    assistant = server.requests[1]["messages"][1]
    assert {k: v for k, v in assistant.items() if k == "content"} == sent
    assert assistant["tool_calls"][0]["id"] == "c1"
    # What is stored is what the server sent: null.
    assert agent.session.messages()[1]["content"] is None
    provider.close()


def test_null_content_must_be_known() -> None:
    with pytest.raises(ValueError, match="null_content"):
        OpenAIProvider("http://127.0.0.1:9/v1", "m", null_content="none")  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422, 425])
def test_invalid_request_statuses_are_not_retried(server: FakeOpenAI, provider: OpenAIProvider,
                                                  store: Store, status: int) -> None:
    server.add(error(status), message("never"))
    with pytest.raises(ProviderError) as info:
        Agent(provider, store.session("s")).run("hi")
    assert info.value.status == status and len(server.requests) == 1


@pytest.mark.parametrize("status", [408, 409, 429])
def test_transient_4xx_are_retried(server: FakeOpenAI, provider: OpenAIProvider, store: Store,
                                   status: int) -> None:
    server.add(error(status), message("ok"))
    assert Agent(provider, store.session("s")).run("hi") == "ok"


def test_gave_up_after_one_attempt_is_singular(server: FakeOpenAI, store: Store) -> None:
    provider = OpenAIProvider(server.url, "m", max_retries=0)
    server.add(error(500))
    with pytest.raises(ProviderError, match=r"\(gave up after 1 attempt\)$"):
        Agent(provider, store.session("s")).run("hi")
    provider.close()


# -- timeouts ---------------------------------------------------------------------------------


def test_read_timeout_is_between_chunks_not_for_the_whole_reply(server: FakeOpenAI,
                                                                store: Store) -> None:
    # Five events 0.06 s apart: the reply takes longer than the timeout, no gap does.
    provider = OpenAIProvider(server.url, "m", timeout=0.2, max_retries=0)
    server.add(stream("slow", "ly", "!", usage=False, delay=0.06))
    agent = Agent(provider, store.session("s"), stream=True)
    assert agent.run("hi") == "slowly!"
    provider.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_slow_reply_past_the_read_timeout_is_not_retried(server: FakeOpenAI, store: Store,
                                                         mode: str) -> None:
    provider = OpenAIProvider(server.url, "m", timeout=0.2, connect_timeout=5, backoff=0.01)
    server.add(*[Reply(hold=10, body=message("late").body) for _ in range(4)])
    agent = Agent(provider, store.session("s"))
    with pytest.raises(ProviderError) as info:
        _run(agent, "hi", mode)
    text = str(info.value)
    assert "sent no answer within 0.2 s (the read timeout" in text
    assert "raise it with timeout=)" in text  # the library's words: its parameter
    assert len(server.requests) == 1  # a busy server is not sent the same work again
    provider.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stream_stalled_past_the_read_timeout(server: FakeOpenAI, store: Store,
                                              mode: str) -> None:
    # A stall mid-reply is a cut stream: retried, and given up on as incomplete.
    provider = OpenAIProvider(server.url, "m", timeout=0.2, max_retries=1, backoff=0.01)
    stalled = Reply(events=[chunk({"content": "Once upon"}), chunk({"content": " a"})],
                    stall_after=2)
    server.add(stalled, stalled)
    agent = Agent(provider, store.session("s"), stream=True)
    with pytest.raises(IncompleteReplyError,
                       match=r"stalled: nothing for 0\.2 s after 2 events .*all 2 cut"):
        _run(agent, "tell me a story", mode)
    assert len(server.requests) == 2 and _end(agent)["kind"] == "incomplete"
    provider.close()


def test_connect_and_read_timeouts_are_separate() -> None:
    import httpx

    provider = OpenAIProvider("http://127.0.0.1:9/v1", "m", timeout=600, connect_timeout=3)
    timeout = provider._httpx_timeout()
    assert (timeout.connect, timeout.read, timeout.write) == (3, 600, 600)
    same = OpenAIProvider("http://127.0.0.1:9/v1", "m", timeout=7)._httpx_timeout()
    assert (same.connect, same.read) == (7, 7)
    given = httpx.Timeout(1.0, connect=2.0)
    assert OpenAIProvider("http://x/v1", "m", timeout=given)._httpx_timeout() is given


# -- answers cut short ------------------------------------------------------------------------


@pytest.mark.parametrize("finish", ["length", "content_filter"])
@pytest.mark.parametrize("streamed", [False, True])
def test_answer_cut_short_is_recorded(server: FakeOpenAI, provider: OpenAIProvider,
                                      store: Store, finish: str, streamed: bool) -> None:
    if streamed:
        server.add(Reply(events=[chunk({"content": "The first half"}), chunk({}, finish)]))
    else:
        server.add(message("The first half", finish_reason=finish))
    agent = Agent(provider, store.session("s"), stream=streamed)
    assert agent.run("hi") == "The first half"
    assert _end(agent) == {"kind": finish}
    step_end = next(n.data for n in agent.session.events() if n.type == "step/end")
    assert step_end["finish_reason"] == finish


# -- error bodies -----------------------------------------------------------------------------


def test_html_error_page_is_one_short_line(server: FakeOpenAI, store: Store) -> None:
    provider = OpenAIProvider(server.url, "m", max_retries=0)
    server.add(Reply(status=502, body=NGINX_502, content_type="text/html"))
    with pytest.raises(ProviderError) as info:
        Agent(provider, store.session("s")).run("hi")
    text = str(info.value)
    assert "\n" not in text and "<" not in text
    assert text.startswith(f"{provider.url} answered 502: 502 Bad Gateway")
    assert "nginx/1.24.0" in text
    provider.close()


def test_multi_line_template_error_is_one_trimmed_line(server: FakeOpenAI,
                                                       provider: OpenAIProvider,
                                                       store: Store) -> None:
    server.add(template_error(400))
    with pytest.raises(ProviderError) as info:
        Agent(provider, store.session("s")).run("hi")
    text = str(info.value)
    detail = text.removeprefix(f"{provider.url} answered 400: ")
    assert detail != text and "\n" not in text
    assert detail.startswith("Conversation roles must alternate")
    assert len(detail) <= 200 and detail.endswith("…")
    recorded = next(n.data for n in store.session("s").events() if n.type == "error")
    assert recorded["message"] == text and recorded["status"] == 400


@pytest.mark.parametrize(("body", "said"), [
    ({"error": {"message": "quota\nexceeded", "type": "billing"}},
     "with an error: quota exceeded (billing)"),
    ({"id": "x", "object": "chat.completion"},
     'with no choices: {"id": "x", "object": "chat.completion"}'),
    (b"<html>\n<body>Sign in</body>\n</html>", "with a body that is not JSON: Sign in"),
])
def test_200_that_is_no_answer_says_who_and_what(server: FakeOpenAI, provider: OpenAIProvider,
                                                 store: Store, body: Any, said: str) -> None:
    server.add(Reply(body=body))
    with pytest.raises(ProviderError) as info:
        Agent(provider, store.session("s")).run("hi")
    assert str(info.value) == f"{provider.url} answered 200 {said}"
