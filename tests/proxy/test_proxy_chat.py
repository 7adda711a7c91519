"""The proxy with the official ``openai`` client on chat completions: pass-through, dedup of
re-sent history, forks for edits, sessions chosen by header, errors, counters."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy, track

from sesstree import Store

KEY = "sk-proxytest-0123456789abcdefghij"


def client(proxy: RunningProxy, **kw: Any) -> openai.OpenAI:
    return track(openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0, **kw))


def converse(c: openai.OpenAI, turns: int, *, stream: bool = False,
             first: str = "plan the trip to Lyon") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."},
                                      {"role": "user", "content": first}]
    for t in range(turns):
        if stream:
            parts = []
            for ch in c.chat.completions.create(model="gpt-test", messages=messages,  # type: ignore[call-overload]
                                                stream=True,
                                                stream_options={"include_usage": True}):
                if ch.choices and ch.choices[0].delta.content:
                    parts.append(ch.choices[0].delta.content)
            messages.append({"role": "assistant", "content": "".join(parts)})
        else:
            r = c.chat.completions.create(model="gpt-test", messages=messages)  # type: ignore[arg-type]
            messages.append(r.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": f"and then {t}?"})
    return messages


def test_replies_pass_through_byte_for_byte(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    upstream.add(*[Scripted(number=7)] * 4)
    direct = httpx.post(upstream.url + "/v1/chat/completions", json=body)
    via = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert via.status_code == direct.status_code == 200
    assert via.content == direct.content
    assert via.headers["content-type"] == "application/json"
    assert via.headers["content-length"] == direct.headers["content-length"]
    streamed = {**body, "stream": True}
    direct_s = httpx.post(upstream.url + "/v1/chat/completions", json=streamed).content
    via_s = httpx.post(proxy.url + "/v1/chat/completions", json=streamed).content
    assert via_s == direct_s and via_s.endswith(b"data: [DONE]\n\n")
    # what the client sent reached the upstream as sent
    assert upstream.requests[1] == body
    # only encodings the proxy can read back to record are offered upstream
    httpx.post(proxy.url + "/v1/models", headers={"Accept-Encoding": "br, gzip;q=0.5, zstd"})
    assert {k.lower(): v for k, v in upstream.headers[-1].items()}["accept-encoding"] == \
        "gzip;q=0.5"


@pytest.mark.parametrize("stream", [False, True])
def test_fifty_turns_store_fifty_turns(proxy: RunningProxy, store: Store, stream: bool) -> None:
    converse(client(proxy), 50, stream=stream)
    proxy.flush()
    sessions = store.sessions()
    assert [s.name for s in sessions] == ["plan-the-trip-to-lyon"]
    # per turn: user, step/start, assistant, usage, step/end; plus the system prompt
    assert store.stats().nodes == 1 + 50 * 5
    assert sessions[0].length == 1 + 50 * 5
    messages = store.messages("plan-the-trip-to-lyon")
    assert [m["role"] for m in messages[:4]] == ["system", "user", "assistant", "user"]
    assert len(messages) == 1 + 50 * 2
    stats = proxy.proxy.stats.snapshot()
    assert stats["recorded"] == 50
    assert stats["prefix_misses"] == 0
    # turn t > 0 re-sends 1 + 2t stored messages (the first sends nothing stored)
    assert stats["dedup_hits"] == sum(1 + 2 * t for t in range(1, 50))


def test_an_edited_history_forks_where_it_diverged(proxy: RunningProxy, store: Store) -> None:
    c = client(proxy)
    messages = converse(c, 3)
    proxy.flush()
    before = store.session_head("plan-the-trip-to-lyon")
    # the agent rewinds two turns and asks something else
    edited = [*messages[:3], {"role": "user", "content": "actually, Paris"}]
    c.chat.completions.create(model="gpt-test", messages=edited)  # type: ignore[arg-type]
    proxy.flush()
    names = sorted(s.name for s in store.sessions())
    assert names == ["plan-the-trip-to-lyon", "plan-the-trip-to-lyon-fork-1"]
    assert store.session_head("plan-the-trip-to-lyon") == before  # never moved back
    diff = store.diff("plan-the-trip-to-lyon", "plan-the-trip-to-lyon-fork-1")
    assert diff.only_b[0].data == {"role": "user", "content": "actually, Paris"}
    # the fork shares the first reply and what closes it
    assert store.show(diff.base).type == "step/end"
    assert store.messages("plan-the-trip-to-lyon-fork-1")[:3] == \
        store.messages("plan-the-trip-to-lyon")[:3]
    # continuing the fork fast-forwards the fork
    again = [*edited, {"role": "assistant", "content": "answer 4: actually, Paris"},
             {"role": "user", "content": "ok"}]
    c.chat.completions.create(model="gpt-test", messages=again)  # type: ignore[arg-type]
    proxy.flush()
    assert len(store.sessions()) == 2
    assert store.messages("plan-the-trip-to-lyon-fork-1")[-1]["content"] == "answer 5: ok"


def test_reencoded_history_still_matches(proxy: RunningProxy, store: Store) -> None:
    c = client(proxy)
    first = [{"role": "user", "content": "list the files"}]
    c.chat.completions.create(model="m", messages=first,  # type: ignore[arg-type]
                              tools=[{"type": "function", "function": {
                                  "name": "ls", "parameters": {"type": "object"}}}])
    proxy.flush()
    # re-sent with keys in another order, as a list of parts, a cache marker, a null refusal
    reply = httpx.post(proxy.url + "/v1/chat/completions", headers={"Authorization": "Bearer " + KEY},
                       json={"model": "m", "messages": [
                           {"content": [{"type": "text", "text": "list the files",
                                         "cache_control": {"type": "ephemeral"}}],
                            "role": "user"},
                           {"role": "assistant", "content": "answer 1: list the files",
                            "refusal": None},
                           {"role": "user", "content": "go on"}]})
    assert reply.status_code == 200
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["list-the-files"]
    assert proxy.proxy.stats.snapshot()["prefix_misses"] == 0
    # the first encoding seen is what is stored
    assert store.messages("list-the-files")[0] == {"role": "user", "content": "list the files"}


def test_a_changed_parameter_does_not_split_the_path(proxy: RunningProxy, store: Store) -> None:
    c = client(proxy)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "write a haiku"}]
    for t, temperature in enumerate((0.2, 0.9, 0.5)):
        r = c.chat.completions.create(model=f"model-{t}", messages=messages,  # type: ignore[arg-type]
                                      temperature=temperature)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"again {t}"}]
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["write-a-haiku"]
    starts = [n.data for n in store.log("write-a-haiku") if n.type == "step/start"]
    assert [(s["model"], s["params"]["temperature"]) for s in reversed(starts)] == [
        ("model-0", 0.2), ("model-1", 0.9), ("model-2", 0.5)]


def test_header_chooses_the_session_and_is_not_forwarded(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream) -> None:
    c = client(proxy, default_headers={"X-Sess-Session": "team/bugfix"})
    messages = converse(c, 2)
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["team/bugfix"]
    assert all("x-sess-session" not in {k.lower() for k in h} for h in upstream.headers)
    # an edit under a named session: the name follows the client, the old path is kept
    old = store.session_head("team/bugfix")
    c.chat.completions.create(model="m", messages=[*messages[:2], {  # type: ignore[arg-type]
        "role": "assistant", "content": "something else"}, {"role": "user", "content": "?"}])
    proxy.flush()
    assert store.session_head("team/bugfix-fork-1") == old
    assert store.messages("team/bugfix")[2]["content"] == "something else"
    # a bad name is refused before anything is forwarded
    sent = len(upstream.requests)
    bad = httpx.post(proxy.url + "/v1/chat/completions", headers={"X-Sess-Session": "a..b"},
                     json={"model": "m", "messages": []})
    assert bad.status_code == 400
    assert "X-Sess-Session" in bad.json()["error"]["message"]
    assert len(upstream.requests) == sent


def test_other_endpoints_pass_through_unrecorded(proxy: RunningProxy, store: Store,
                                                 upstream: FakeUpstream) -> None:
    models = client(proxy).models.list()
    assert [m.id for m in models.data] == ["fake-1"]
    missing = httpx.get(proxy.url + "/v1/files/x?purpose=a")
    assert missing.status_code == 404
    assert upstream.paths[-1] == "/v1/files/x?purpose=a"
    proxy.flush()
    assert store.sessions() == []
    assert proxy.proxy.stats.snapshot()["passed_through"] == 2


@pytest.mark.parametrize("status", [401, 429, 500])
def test_upstream_errors_pass_through_and_are_recorded(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream, status: int) -> None:
    body = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "x",
                      "code": status}}
    upstream.add(Scripted(status=status, body=body, headers={"Retry-After": "7"}))
    reply = httpx.post(proxy.url + "/v1/chat/completions", headers={"Authorization": "Bearer " + KEY},
                       json={"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    assert reply.status_code == status
    assert reply.json() == body
    assert reply.headers["retry-after"] == "7"
    proxy.flush()
    nodes = store.log("hello")
    error = next(n.data for n in nodes if n.type == "error")
    assert error["status"] == status
    assert KEY not in str(error) and "[redacted]" in str(error)
    # the retry continues after the failed call instead of forking
    httpx.post(proxy.url + "/v1/chat/completions",
               json={"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["hello"]
    assert store.messages("hello")[-1]["role"] == "assistant"


def test_an_upstream_that_is_down(store: Store) -> None:
    from fake_upstream import free_port

    with RunningProxy(store, f"http://127.0.0.1:{free_port()}") as proxy:
        with pytest.raises(openai.InternalServerError) as raised:
            client(proxy).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "anyone there"}])
        assert raised.value.status_code == 502
        assert "unreachable" in str(raised.value)
        assert KEY not in str(raised.value)
        proxy.flush()
        error = next(n.data for n in store.log("anyone-there") if n.type == "error")
        assert error["status"] == 502
        assert proxy.proxy.stats.snapshot()["upstream_errors"] == 1


def test_stats_endpoint_and_lines(proxy: RunningProxy) -> None:
    converse(client(proxy), 2)
    proxy.flush()
    stats = httpx.get(proxy.url + "/_sess/stats").json()
    assert stats["requests"] == 2 and stats["recorded"] == 2 and stats["dedup_hits"] == 3
    lines = [line for line in proxy.lines if "/v1/chat/completions" in line]
    assert len(lines) == 2
    assert "plan-the-trip-to-lyon (fast-forward)" in lines[1]
    assert "tokens 12 in/5 out" in lines[1]
    assert all(KEY not in line for line in proxy.lines)


def test_a_gzip_encoded_reply_passes_encoded_and_is_recorded(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream) -> None:
    upstream.add(Scripted(gzip=True, text="compressed answer"))
    with httpx.Client() as c:
        reply = c.post(proxy.url + "/v1/chat/completions", headers={"Accept-Encoding": "gzip"},
                       json={"model": "m", "messages": [{"role": "user", "content": "zip it"}]})
    assert reply.headers["content-encoding"] == "gzip"  # passed as the upstream sent it
    assert reply.json()["choices"][0]["message"]["content"] == "compressed answer"
    proxy.flush()
    assert store.messages("zip-it")[-1]["content"] == "compressed answer"


def test_a_recording_failure_never_fails_the_call(proxy: RunningProxy, store: Store) -> None:
    store.close()  # the store is gone: every write fails
    reply = httpx.post(proxy.url + "/v1/chat/completions", headers={"Authorization": "Bearer " + KEY},
                       json={"model": "m", "messages": [{"role": "user", "content": "still?"}]})
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"].endswith("still?")
    proxy.flush()
    assert proxy.proxy.stats.snapshot()["record_failures"] == 1
    failed = [line for line in proxy.lines if "recording failed" in line]
    assert len(failed) == 1 and KEY not in failed[0]
