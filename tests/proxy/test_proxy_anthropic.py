"""The proxy on the Anthropic Messages API: the official ``anthropic`` client and raw
requests, streams, tool use, cut streams."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy, track

from sesstree import Store

anthropic = pytest.importorskip("anthropic")

KEY = "sk-ant-proxytest-0123456789abcdef"


def raw(proxy: RunningProxy, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/messages", json=body,
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", **headers})


@pytest.mark.parametrize("stream", [False, True])
def test_sdk_conversation_dedups(proxy: RunningProxy, store: Store, stream: bool) -> None:
    c = track(anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0))
    system = [{"type": "text", "text": "You are a careful coder.",
               "cache_control": {"type": "ephemeral"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the flaky test"}]
    for t in range(8):
        if stream:
            with c.messages.stream(model="claude-test", max_tokens=100, system=system,
                                   messages=messages) as s:
                reply = s.get_final_message()
        else:
            reply = c.messages.create(model="claude-test", max_tokens=100, system=system,
                                      messages=messages)
        messages.append({"role": "assistant", "content": [
            b.model_dump(exclude_none=True) for b in reply.content]})
        # Claude Code moves the cache marker to the newest message every time
        for m in messages:
            if isinstance(m["content"], list):
                for block in m["content"]:
                    block.pop("cache_control", None)
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"next {t}", "cache_control": {"type": "ephemeral"}}]})
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["fix-the-flaky-test"]
    assert proxy.proxy.stats.snapshot()["prefix_misses"] == 0
    chat = store.messages("fix-the-flaky-test")
    assert chat[0] == {"role": "system", "content": "You are a careful coder."}
    assert [m["role"] for m in chat[1:]] == ["user", "assistant"] * 8
    # raw + message for the system prompt; then per call: raw user + its message, and the
    # call (start, raw reply, its message, usage, end)
    assert store.stats().nodes == 2 + 8 * (2 + 5)
    # what the client sent is kept: the first system prompt with its cache marker
    raw_system = next(n.data for n in reversed(store.log("fix-the-flaky-test"))
                      if n.type == "anthropic/message")
    assert raw_system["content"] == system


def test_tool_use_round_trip(proxy: RunningProxy, upstream: FakeUpstream, store: Store) -> None:
    upstream.add(Scripted(tool_call=("toolu_1", "read_file", '{"path": "a.py"}')))
    body: dict[str, Any] = {"model": "c", "max_tokens": 50, "stream": True,
                            "messages": [{"role": "user", "content": "read a.py"}]}
    first = raw(proxy, body)
    assert first.status_code == 200 and b"input_json_delta" in first.content
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "read_file", "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "print(1)"}]}]
    assert raw(proxy, body).status_code == 200
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["read-a-py"]
    chat = store.messages("read-a-py")
    assert chat[1]["tool_calls"][0]["function"] == {"name": "read_file",
                                                    "arguments": '{"path":"a.py"}'}
    assert chat[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "print(1)"}


def test_stream_cut_by_upstream_is_recorded_incomplete(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store) -> None:
    upstream.add(Scripted(cut_after=3, text="a long answer that never ends"))
    body = {"model": "c", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "tell me everything"}]}
    with pytest.raises(httpx.RemoteProtocolError):
        raw(proxy, body)  # the client sees the cut as it would without the proxy
    proxy.flush()
    nodes = store.log("tell-me-everything")
    end = nodes[0].data
    assert nodes[0].type == "step/end"
    assert end["incomplete"] is True and end["cut_by"] == "upstream"
    chunk = next(n.data for n in nodes if n.type == "assistant/chunk")
    assert chunk["content"][0]["text"] == "a long answer "  # what had passed
    assert store.messages("tell-me-everything") == [{"role": "user",
                                                     "content": "tell me everything"}]
    # the client retries: the same session goes on, no fork
    assert raw(proxy, body).status_code == 200
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["tell-me-everything"]
    assert proxy.proxy.stats.snapshot()["incomplete"] == 1


def test_stream_cut_by_client_is_recorded_incomplete(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store) -> None:
    upstream.add(Scripted(stall_after=3, text="slow answer"))
    upstream.release.clear()
    body = {"model": "c", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "start streaming"}]}
    # read the first events, then hang up while the upstream is still sending
    with httpx.Client() as c, c.stream("POST", proxy.url + "/v1/messages", json=body) as r:
        for line in r.iter_lines():
            if "text_delta" in line:
                break
    # the proxy notices while the upstream is still quiet
    for _ in range(200):
        proxy.flush()
        if store.has_session("start-streaming"):
            break
    upstream.release.set()
    nodes = store.log("start-streaming")
    assert nodes[0].data["incomplete"] is True and nodes[0].data["cut_by"] == "client"
    chunk = next(n.data for n in nodes if n.type == "assistant/chunk")
    assert chunk["content"] == [{"type": "text", "text": "slow "}]


def test_errors_keep_the_anthropic_shape(store: Store) -> None:
    from fake_upstream import free_port

    with RunningProxy(store, f"http://127.0.0.1:{free_port()}") as proxy:
        reply = raw(proxy, {"model": "c", "max_tokens": 5,
                            "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 502
        assert reply.json()["type"] == "error"
        assert KEY not in reply.text
        c = track(anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0))
        with pytest.raises(anthropic.InternalServerError):
            c.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}])


def test_secrets_never_reach_the_store(proxy: RunningProxy, upstream: FakeUpstream,
                                       store_path: Any) -> None:
    upstream.add(Scripted(status=401, body={"type": "error", "error": {
        "type": "authentication_error", "message": f"invalid x-api-key {KEY}"}}))
    assert raw(proxy, {"model": "c", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hello"}]}).status_code == 401
    bearer = "sk-proxytest-bearer-abcdefghijklmnop"
    httpx.post(proxy.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {bearer}"},
               json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    proxy.flush()
    sent = [{k.lower(): v for k, v in h.items()} for h in upstream.headers]
    assert sent[0]["x-api-key"] == KEY  # forwarded
    assert sent[1]["authorization"] == f"Bearer {bearer}"
    proxy.store.close()
    data = b"".join(p.read_bytes() for p in store_path.iterdir() if p.is_file())
    for secret in (KEY, bearer, KEY[8:24], bearer[10:30]):
        assert secret.encode() not in data
    assert all(KEY not in line and bearer not in line for line in proxy.lines)
    assert json.dumps(proxy.proxy.stats.snapshot())  # counters carry no text at all


def test_an_error_inside_a_stream_is_recorded(proxy: RunningProxy, upstream: FakeUpstream,
                                              store: Store) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error",
                                             "message": "Overloaded"}}
    upstream.add(Scripted(events=[("message_start", {"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "content": [], "model": "c",
        "usage": {"input_tokens": 3, "output_tokens": 0}}}), ("error", overloaded)]))
    body = {"model": "c", "max_tokens": 5, "stream": True,
            "messages": [{"role": "user", "content": "busy?"}]}
    reply = raw(proxy, body)
    assert reply.status_code == 200 and b"overloaded_error" in reply.content
    proxy.flush()
    error = next(n.data for n in store.log("busy") if n.type == "error")
    assert error["message"] == overloaded["error"]
    assert proxy.proxy.stats.snapshot()["upstream_errors"] == 1
