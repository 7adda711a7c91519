"""The proxy on the Gemini API: the official ``google-genai`` SDK and raw requests, whole
and streamed (server-sent events and a JSON array), function calls, errors, and the key in no
byte of the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream, Scripted, free_port
from proxy_server import RunningProxy, track

from sesstree import Store

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")
errors = pytest.importorskip("google.genai.errors")

KEY = "AIzaSyProxyTest-0123456789abcdefghijk"  # no sk- shape: found only as a secret
PATH = "/v1beta/models/gemini-test:generateContent"
STREAM = "/v1beta/models/gemini-test:streamGenerateContent"
READ_FILE = types.FunctionDeclaration(
    name="read_file", description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}})


def client(proxy: RunningProxy) -> Any:
    """The SDK pointed at the proxy (closed after the test; kept by it meanwhile: a client the
    garbage collector closes cannot send the next turn)."""
    return track(genai.Client(api_key=KEY, http_options=types.HttpOptions(
        base_url=proxy.url, retry_options=types.HttpRetryOptions(attempts=1))))


def store_bytes(path: Path) -> bytes:
    """Every byte of the store's files as they are now (the SQLite file, its WAL)."""
    return b"".join(p.read_bytes() for p in path.iterdir() if p.is_file())


def assert_no_key(proxy: RunningProxy, store_path: Path) -> None:
    for secret in (KEY, KEY[6:26]):
        assert secret.encode() not in store_bytes(store_path)
        assert all(secret not in line for line in proxy.lines)
    proxy.store.close()
    assert KEY[6:26].encode() not in store_bytes(store_path)


def send(chat: Any, message: Any, stream: bool) -> str:
    if stream:
        return "".join(c.text or "" for c in chat.send_message_stream(message))
    return str(chat.send_message(message).text or "")


@pytest.mark.parametrize("stream", [False, True])
def test_sdk_conversation_with_a_function_call_is_one_session(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store, store_path: Path,
        stream: bool) -> None:
    config = types.GenerateContentConfig(
        system_instruction="You are a careful coder.",
        tools=[types.Tool(function_declarations=[READ_FILE])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    chat = client(proxy).chats.create(model="gemini-test", config=config)
    assert send(chat, "fix the flaky test", stream) == "answer 1: fix the flaky test"
    upstream.add(Scripted(tool_call=("", "read_file", '{"path": "a.py"}')))
    send(chat, "read a.py", stream)
    reply = types.Part.from_function_response(name="read_file", response={"output": "print(1)"})
    assert send(chat, reply, stream).startswith("answer 3")
    for t in range(3):
        assert send(chat, f"next {t}", stream) == f"answer {4 + t}: next {t}"
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["fix-the-flaky-test"]
    assert proxy.proxy.stats.snapshot()["recorded"] == 6
    # nothing re-sent was written twice: the system prompt (raw, message), then per call the
    # new user content (raw, message) and the call (start, raw reply, message, usage, end)
    assert store.stats().nodes == 2 + 6 * (2 + 5)
    chat_messages = store.messages("fix-the-flaky-test")
    assert chat_messages[:7] == [
        {"role": "system", "content": "You are a careful coder."},
        {"role": "user", "content": "fix the flaky test"},
        {"role": "assistant", "content": "answer 1: fix the flaky test"},
        {"role": "user", "content": "read a.py"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_3_0", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}]},
        {"role": "tool", "tool_call_id": "call_3_0", "content": '{"output":"print(1)"}'},
        {"role": "assistant", "content": "answer 3: read a.py"}]
    assert [m["role"] for m in chat_messages[7:]] == ["user", "assistant"] * 3
    log = store.log("fix-the-flaky-test")
    start = next(n.data for n in log if n.type == "step/start")
    assert start["protocol"] == "gemini.generate" and start["model"] == "gemini-test"
    assert start["params"]["tools"][0]["functionDeclarations"][0]["name"] == "read_file"
    usage = next(n.data for n in log if n.type == "usage")
    assert usage == {"model": "gemini-test-001", "usage": {
        "promptTokenCount": 46, "candidatesTokenCount": 6, "totalTokenCount": 52}}
    # the key was sent upstream, as a header, and is nowhere in the store or the lines
    assert all(h.get("x-goog-api-key") == KEY for h in upstream.headers)
    assert_no_key(proxy, store_path)


def test_automatic_function_calling_is_one_session(proxy: RunningProxy, upstream: FakeUpstream,
                                                   store: Store) -> None:
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    upstream.add(Scripted(tool_call=("", "read_file", '{"path": "b.py"}')))
    c = client(proxy)
    config = types.GenerateContentConfig(tools=[read_file])
    chat = c.chats.create(model="gemini-test", config=config)
    assert chat.send_message("look at b.py").text == "answer 2: look at b.py"
    assert chat.send_message("and then").text == "answer 3: and then"
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["look-at-b-py"]
    assert [m["role"] for m in store.messages("look-at-b-py")] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert store.messages("look-at-b-py")[2]["content"] == '{"result":"contents of b.py"}'
    # three calls, each after one new content (raw, message): nothing written twice
    assert store.stats().nodes == 3 * (2 + 5)


@pytest.mark.parametrize("sse", [True, False])
def test_the_key_in_the_query_is_forwarded_and_never_stored(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store, store_path: Path,
        sse: bool) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
            "generationConfig": {"temperature": 0}}
    query = f"alt=sse&key={KEY}" if sse else f"key={KEY}"
    reply = httpx.post(f"{proxy.url}{STREAM}?{query}", json=body)
    assert reply.status_code == 200
    assert (b"data: " in reply.content) is sse
    if not sse:
        assert [c["candidates"][0]["content"]["parts"] for c in reply.json()][-1] == [
            {"text": ""}]
    body["contents"] += [{"role": "model", "parts": [{"text": "answer 1: hello there"}]},
                         {"role": "user", "parts": [{"text": "again"}]}]
    assert httpx.post(f"{proxy.url}{PATH}?key={KEY}", json=body).status_code == 200
    proxy.flush()
    assert upstream.paths[0] == f"{STREAM}?{query}"  # forwarded as sent
    assert [s.name for s in store.sessions()] == ["hello-there"]
    assert [m["content"] for m in store.messages("hello-there")] == [
        "hello there", "answer 1: hello there", "again", "answer 2: again"]
    assert any(KEY not in line and "hello-there" in line for line in proxy.lines)
    assert_no_key(proxy, store_path)


def test_a_json_array_stream_cut_short_is_recorded_incomplete(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store) -> None:
    upstream.add(Scripted(cut_after=1, text="a long answer that never ends"))
    body = {"contents": [{"role": "user", "parts": [{"text": "tell me everything"}]}]}
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(proxy.url + STREAM, json=body, headers={"x-goog-api-key": KEY})
    proxy.flush()
    nodes = store.log("tell-me-everything")
    assert nodes[0].data["incomplete"] is True and nodes[0].data["cut_by"] == "upstream"
    chunk = next(n.data for n in nodes if n.type == "assistant/chunk")
    assert [p["text"] for p in chunk["parts"]] == ["a long answer "]
    assert store.messages("tell-me-everything") == [
        {"role": "user", "content": "tell me everything"}]


@pytest.mark.parametrize("status", [400, 503])
def test_upstream_errors_are_relayed_and_recorded(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store, store_path: Path,
        status: int) -> None:
    error = {"error": {"code": status, "message": f"API key not valid: {KEY}",
                       "status": "INVALID_ARGUMENT" if status == 400 else "UNAVAILABLE"}}
    upstream.add(Scripted(status=status, body=error))
    c = client(proxy)
    kind = errors.ClientError if status == 400 else errors.ServerError
    with pytest.raises(kind) as raised:
        c.models.generate_content(model="gemini-test", contents="hello")
    assert raised.value.code == status
    proxy.flush()
    recorded = next(n.data for n in store.log("hello") if n.type == "error")
    assert recorded["status"] == status
    assert recorded["message"]["error"]["message"] == "API key not valid: [redacted]"
    assert proxy.proxy.stats.snapshot()["upstream_errors"] == 1
    assert_no_key(proxy, store_path)


def test_an_unreachable_upstream_answers_in_googles_shape(store: Store) -> None:
    with RunningProxy(store, f"http://127.0.0.1:{free_port()}") as proxy:
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        reply = httpx.post(f"{proxy.url}{PATH}?key={KEY}", json=body)
        assert reply.status_code == 502
        assert reply.json()["error"]["code"] == 502
        assert reply.json()["error"]["status"] == "UNAVAILABLE"
        assert KEY not in reply.text
        with pytest.raises(errors.ServerError):
            client(proxy).models.generate_content(model="gemini-test", contents="hi")


def test_an_error_inside_a_stream_is_recorded(proxy: RunningProxy, upstream: FakeUpstream,
                                              store: Store) -> None:
    overloaded = {"error": {"code": 503, "message": "The model is overloaded.",
                            "status": "UNAVAILABLE"}}
    upstream.add(Scripted(events=[(None, {"candidates": [{"content": {
        "role": "model", "parts": [{"text": "Let me"}]}, "index": 0}]}), (None, overloaded)]))
    body = {"contents": [{"role": "user", "parts": [{"text": "busy?"}]}]}
    reply = httpx.post(f"{proxy.url}{STREAM}?alt=sse", json=body)
    assert reply.status_code == 200 and b"overloaded" in reply.content
    proxy.flush()
    nodes = store.log("busy")
    assert next(n.data for n in nodes if n.type == "error")["message"] == overloaded["error"]
    assert next(n.data for n in nodes if n.type == "assistant/chunk")["parts"] == [
        {"text": "Let me"}]
    assert proxy.proxy.stats.snapshot()["upstream_errors"] == 1


def test_other_gemini_calls_pass_through_unrecorded(proxy: RunningProxy, store: Store,
                                                    upstream: FakeUpstream) -> None:
    reply = httpx.post(f"{proxy.url}/v1beta/models/gemini-test:countTokens?key={KEY}",
                       json={"contents": [{"parts": [{"text": "hi"}]}]})
    assert reply.status_code == 404  # the fake knows no countTokens: what matters is the path
    proxy.flush()
    assert list(store.sessions()) == []
    assert proxy.proxy.stats.snapshot()["passed_through"] == 1
    assert json.dumps(proxy.lines).count(KEY) == 0


def test_a_history_re_sent_in_other_encodings_is_one_session(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store) -> None:
    from test_proxy_gemini_canonical import SAME, client_ids

    contents: list[dict[str, Any]] = []
    upstream.add(*[Scripted(), Scripted(tool_call=("", "read_file", '{"path": "a.py"}')),
                   Scripted(), Scripted()])
    turns = ["start the job", "read a.py", None, "and now?"]
    for t, text in enumerate(turns):
        if text is None:
            contents.append({"role": "user", "parts": [{"functionResponse": {
                "name": "read_file", "response": {"output": "print(1)"}}}]})
        else:
            contents.append({"role": "user", "parts": [{"text": text}]})
        # every earlier content re-encoded every way at once, the newest as it is
        sent: list[dict[str, Any]] = []
        for c in client_ids(contents[:-1]):
            pieces = [c]
            for how in SAME:
                pieces = [q for p in pieces for q in how(p)]
            sent += pieces
        path = STREAM + "?alt=sse" if t % 2 else PATH
        reply = httpx.post(proxy.url + path, json={"contents": [*sent, contents[-1]]},
                           headers={"x-goog-api-key": KEY})
        assert reply.status_code == 200
        chunks = [json.loads(line[6:]) for line in reply.text.splitlines()
                  if line.startswith("data: ")] if t % 2 else [reply.json()]
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        contents.append({"role": "model", "parts": parts})
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["start-the-job"]
    assert [m["role"] for m in store.messages("start-the-job")] == [
        "user", "assistant", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert store.stats().nodes == 4 * (2 + 5)


def test_which_paths_are_gemini_calls() -> None:
    from sesstree.proxy.gemini import gemini_model
    from sesstree.proxy.protocols import GEMINI, protocol_of

    for path, expected in [
        ("/v1beta/models/gemini-2.5-flash:generateContent", ("gemini-2.5-flash", False)),
        ("/v1/models/gemini-2.5-pro:streamGenerateContent", ("gemini-2.5-pro", True)),
        ("/v1alpha/tunedModels/my-model:generateContent/", ("my-model", False)),
        ("/api/v1/projects/p/locations/us-central1/publishers/google/models/"
         "gemini-2.5-flash:streamGenerateContent", ("gemini-2.5-flash", True)),
    ]:
        assert gemini_model(path) == expected
        assert protocol_of("POST", path) == GEMINI
    for path in ("/v1beta/models/m:countTokens", "/v1beta/models/m:embedContent",
                 "/v1beta/models/m", "/v1beta/models/m:generateContentX"):
        assert protocol_of("POST", path) is None
    assert protocol_of("GET", "/v1beta/models/m:generateContent") is None


def test_a_streamed_reply_is_merged_as_the_gemini_cli_merges_it() -> None:
    from sesstree.proxy.gemini_reply import GeminiReply

    def chunk(*parts: dict[str, Any], finish: str | None = None) -> str:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)},
                                     "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return json.dumps({"candidates": [candidate], "modelVersion": "g-001"})

    reply = GeminiReply(position=3)
    for data in (chunk({"text": "Thinking", "thought": True}),
                 chunk({"text": " more", "thought": True}),
                 chunk({"text": "The answer", "thoughtSignature": "c2ln"}),
                 chunk({"text": " is 4."}),
                 chunk({"functionCall": {"name": "check", "args": {"n": 4}}}),
                 chunk({"text": ""}, finish="STOP")):
        reply.feed_event(None, data)
    result = reply.result()
    assert result.complete and result.finish_reason == "STOP" and result.model == "g-001"
    assert result.events == [
        ("gemini/content", {"role": "model", "parts": [
            {"text": "Thinking more", "thought": True},
            {"text": "The answer is 4.", "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "check", "args": {"n": 4}}}, {"text": ""}]}),
        ("assistant/message", {"role": "assistant", "content": "The answer is 4.",
                               "tool_calls": [{"id": "call_3_0", "type": "function", "function": {
                                   "name": "check", "arguments": '{"n":4}'}}]})]


def _sse_upstream(body: bytes) -> Any:
    """A raw upstream answering every call with ``body`` as a stream, then closing."""
    from raw_upstream import RawUpstream, read_request

    def handler(conn: Any) -> None:
        if read_request(conn) is None:
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Connection: close\r\n\r\n" + body)

    return RawUpstream(handler)


def _sdk_stream(proxy: RunningProxy, text: str) -> str:
    return "".join(c.text or "" for c in client(proxy).models.generate_content_stream(
        model="gemini-test", contents=text))


def test_a_last_event_with_no_blank_line_after_it_is_read_as_the_sdk_reads_it(
        store: Store) -> None:
    # The SDK takes the event the body ends with, blank line or not: so does the recording.
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}
    last = {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]},
                            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}
    body = b"data: " + json.dumps(first).encode() + b"\r\n\r\ndata: " + \
        json.dumps(last).encode() + b"\r\n"
    with _sse_upstream(body) as up, RunningProxy(store, up.url) as proxy:
        assert _sdk_stream(proxy, "say hello") == "Hello"
        proxy.flush()
    assert store.messages("say-hello") == [{"role": "user", "content": "say hello"},
                                           {"role": "assistant", "content": "Hello"}]
    end = next(n.data for n in store.log("say-hello") if n.type == "step/end")
    assert end["finish_reason"] == "STOP" and "incomplete" not in end


def test_an_error_the_stream_sends_as_raw_json_lines_is_recorded(store: Store) -> None:
    # Mid-stream, the API reports an error as a JSON object over several lines with no
    # "data:" before them; the SDK reads it and raises.
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me"}]}}]}
    error = {"error": {"code": 500, "message": "Internal error {braces} \"quoted\"",
                       "status": "INTERNAL"}}
    body = b"data: " + json.dumps(first).encode() + b"\r\n\r\n" + \
        json.dumps(error, indent=2).replace("\n", "\r\n").encode() + b"\r\n"
    with _sse_upstream(body) as up, RunningProxy(store, up.url) as proxy:
        with pytest.raises(errors.ServerError):
            _sdk_stream(proxy, "busy now")
        proxy.flush()
        assert proxy.proxy.stats.snapshot()["upstream_errors"] == 1
    nodes = store.log("busy-now")
    assert next(n.data for n in nodes if n.type == "error")["message"] == error["error"]
    assert next(n.data for n in nodes if n.type == "assistant/chunk")["parts"] == [
        {"text": "Let me"}]


def test_the_gemini_stream_parser_at_every_split() -> None:
    from sesstree.proxy.gemini_reply import GeminiSse

    error = {"error": {"message": 'a "}" and a \\ and {', "code": 500}}
    raw = json.dumps(error, indent=2).replace("\n", "\r\n").encode()
    body = b'data: {"a": 1}\r\n\r\n' + raw + b'\r\n\r\ndata: {"b":\r\ndata: 2}'
    expected = [(None, '{"a": 1}'), (None, raw.decode().replace("\r\n", "")),
                (None, '{"b":\n2}')]
    for at in range(len(body) + 1):
        parser = GeminiSse()
        events = parser.feed(body[:at]) + parser.feed(body[at:]) + parser.end()
        assert events == expected, at
        assert json.loads(events[1][1]) == error
