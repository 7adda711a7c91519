"""Long streamed replies: parsed in time linear in their length, and recorded without holding
up the calls that come after them (a regression: the SSE parser copied the rest of its
buffer after every line, and one recorder thread parsed one call at a time); a proxy that
stops during a call records it cut."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, SupportsIndex

import httpx
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy
from raw_upstream import LONG_ANSWER, RawUpstream, read_request, sse_chunk

from sesstree import Store
from sesstree.proxy import ReplyBuilder, SseParser
from sesstree.proxy.protocols import ANTHROPIC, CHAT


class Counted(bytes):
    """Bytes that count every byte copied out of them (slices, joins), and pass the count on
    to what is copied from them: the parser's work, measured without a clock."""

    copied: ClassVar[list[int]] = [0]

    def __getitem__(self, key: SupportsIndex | slice) -> Any:  # type: ignore[override]
        got = bytes.__getitem__(self, key)
        if isinstance(got, bytes):
            Counted.copied[0] += len(got)
            return Counted(got)
        return got

    def __add__(self, other: bytes) -> Counted:  # type: ignore[override]
        Counted.copied[0] += len(self) + len(other)
        return Counted(bytes(self) + bytes(other))

    def __radd__(self, other: bytes) -> Counted:
        Counted.copied[0] += len(self) + len(other)
        return Counted(bytes(other) + bytes(self))


def chat_stream(n: int, text: str = "word ") -> bytes:
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text.encode()
    return chunk * n + b"data: [DONE]\n\n"


@pytest.mark.parametrize("pieces", [1, 7, 1000])
def test_parsing_copies_each_byte_a_bounded_number_of_times(pieces: int) -> None:
    # One reply of 20,000 events, fed whole, in a few large chunks, or in small ones that
    # cut lines in two: the bytes copied grow with the reply, not with its square (the
    # parser that re-sliced its buffer after every line copied about 20,000 times more).
    data = chat_stream(20_000)
    size = -(-len(data) // pieces)
    Counted.copied[0] = 0
    events = []
    parser = SseParser()
    for start in range(0, len(data), size):
        events += parser.feed(Counted(data[start:start + size]))
    assert len(events) == 20_001 and events[-1] == (None, "[DONE]")
    assert Counted.copied[0] <= 3 * len(data)


def test_a_line_split_over_many_chunks_is_joined_once() -> None:
    # A 1 MB data line arriving 100 bytes at a time: its pieces are joined when its newline
    # comes, not re-copied with every piece.
    line = b"data: " + b"x" * 1_000_000 + b"\n\n"
    Counted.copied[0] = 0
    parser = SseParser()
    events = []
    for start in range(0, len(line), 100):
        events += parser.feed(Counted(line[start:start + 100]))
    assert events == [(None, "x" * 1_000_000)]
    assert Counted.copied[0] <= 3 * len(line)


def test_long_replies_built_from_deltas_are_whole() -> None:
    # Text, thinking and tool input grown by thousands of deltas come out whole and in order.
    builder = ReplyBuilder(ANTHROPIC)
    builder.feed_event("message_start", '{"type":"message_start","message":{"model":"m"}}')
    builder.feed_event(None, '{"type":"content_block_start","index":0,'
                             '"content_block":{"type":"thinking","thinking":""}}')
    for i in range(3000):
        builder.feed_event(None, '{"type":"content_block_delta","index":0,"delta":'
                                 f'{{"type":"thinking_delta","thinking":"t{i} "}}}}')
    builder.feed_event(None, '{"type":"content_block_stop","index":0}')
    builder.feed_event(None, '{"type":"content_block_start","index":1,'
                             '"content_block":{"type":"text","text":"A"}}')
    for i in range(3000):
        builder.feed_event(None, '{"type":"content_block_delta","index":1,"delta":'
                                 f'{{"type":"text_delta","text":"{i},"}}}}')
    builder.feed_event(None, '{"type":"content_block_start","index":2,'
                             '"content_block":{"type":"tool_use","id":"t","name":"f"}}')
    builder.feed_event(None, '{"type":"content_block_delta","index":2,"delta":'
                             '{"type":"input_json_delta","partial_json":"{\\"a\\": "}}')
    builder.feed_event(None, '{"type":"content_block_delta","index":2,"delta":'
                             '{"type":"input_json_delta","partial_json":"[1, 2]}"}}')
    builder.feed_event(None, '{"type":"message_stop"}')
    result = builder.result()
    reply = result.events[0][1]
    assert reply["content"] == [
        {"type": "thinking", "thinking": "".join(f"t{i} " for i in range(3000))},
        {"type": "text", "text": "A" + "".join(f"{i}," for i in range(3000))},
        {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1, 2]}}]

    chat = ReplyBuilder(CHAT)
    for i in range(2000):
        chat.feed_event(None, '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
                              f'"function":{{"arguments":"{i % 10}"}}}}]}}}}]}}')
    chat.feed_event(None, '{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}')
    [(_, message)] = chat.result().events
    assert message["tool_calls"][0]["function"]["arguments"] == "0123456789" * 200


def big_chat_events(megabytes: float) -> list[tuple[str | None, Any]]:
    """A streamed chat reply of about ``megabytes`` MB, in 1 KB chunks."""
    word = "w" * 1000
    n = int(megabytes * 1000)
    head = '{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"%s"},' \
           '"finish_reason":null}]}'
    events: list[tuple[str | None, Any]] = [(None, head % word)] * n
    events.append((None, '{"id":"c","model":"m","choices":[{"index":0,"delta":{},'
                         '"finish_reason":"stop"}]}'))
    events.append((None, "[DONE]"))
    return events


def ask(base: str, text: str) -> httpx.Response:
    return httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "model": "m", "stream": True, "messages": [{"role": "user", "content": text}]})


def test_a_long_stream_does_not_hold_up_the_calls_after_it(
        monkeypatch: pytest.MonkeyPatch, store: Store, upstream: FakeUpstream) -> None:
    # A 4 MB stream, then four short calls. The long one's parsing is held at its first
    # event until the four short calls have passed and been handed to the recorder: they are
    # recorded first, while the long one waits its turn (no clock: the order says it). With
    # one recorder working through one call at a time, the short calls waited for the long
    # one whatever its length.
    from sesstree.proxy.app import Proxy

    submitted = threading.Event()
    count = [0]
    real_submit = Proxy._submit

    def submit(self: Proxy, call: Any) -> None:
        real_submit(self, call)
        count[0] += 1
        if count[0] == 5:
            submitted.set()

    real_feed = ReplyBuilder.feed_event
    held = [False]

    def feed(self: ReplyBuilder, event: str | None, data: str) -> None:
        if not held[0] and '"w' in data:
            held[0] = True
            submitted.wait(30)
        real_feed(self, event, data)

    monkeypatch.setattr(Proxy, "_submit", submit)
    monkeypatch.setattr(ReplyBuilder, "feed_event", feed)
    upstream.add(Scripted(events=big_chat_events(4)))
    with RunningProxy(store, upstream.url) as proxy:
        assert len(ask(proxy.url, "the long one").content) > 4_000_000
        for i in range(4):
            assert ask(proxy.url, f"short {i}").status_code == 200
        assert submitted.wait(30)
        proxy.flush()
        recorded = [line.split(" -> ")[1].split(" ")[0] for line in proxy.lines if " -> " in line]
    assert recorded == ["short-0", "short-1", "short-2", "short-3", "the-long-one"]
    assert len(store.messages("the-long-one")[1]["content"]) == 4_000_000


def test_a_stopping_proxy_waits_a_bounded_time_and_names_what_it_did_not_record(
        monkeypatch: pytest.MonkeyPatch, store: Store, upstream: FakeUpstream) -> None:
    # A store that never answers: the first recording hangs. Stopping gives the calls
    # received a bounded wait, then names each one it could not record; it does not wait
    # for the store forever.
    from sesstree.proxy.recorder import Recorder

    hung = threading.Event()
    release = threading.Event()

    def record(self: Recorder, exchange: Any) -> Any:
        hung.set()
        release.wait(60)
        raise RuntimeError("the store went away")

    monkeypatch.setattr(Recorder, "record", record)
    monkeypatch.setattr("sesstree.proxy.app.RECORD_WAIT", 0.5, raising=False)
    try:
        proxy = RunningProxy(store, upstream.url).start()
        for i in range(3):
            assert ask(proxy.url, f"call {i}").status_code == 200
        assert hung.wait(30)
        proxy.stop()
        assert not proxy._thread.is_alive()
    finally:
        release.set()
    said = "\n".join(proxy.lines)
    assert "sess proxy: stopping: recording the 3 calls received (at most 0.5 s" in said
    assert said.count("not recorded: the proxy stopped while it was being recorded") == 1
    assert said.count("not recorded: the proxy stopped before its turn came") == 2
    assert "3 calls received were not recorded: the proxy stopped first" in said
    assert "record failures 3" in proxy.lines[-1]


def test_a_second_ctrl_c_gives_up_the_recording_wait(tmp_path: Path,
                                                     upstream: FakeUpstream) -> None:
    # A real `sess proxy`, whose store another process holds locked: each recording waits
    # the store's 10 s for the lock, so 4 calls would take 40 s, beyond the 30 s wait. The
    # proxy says "Ctrl-C to give up"; a Ctrl-C then must give up at once, naming the 4 calls
    # (the server's own handler took it and the wait went on: 30 s, with 3 of them tried).
    from test_proxy_cli import start

    from sesstree import open_store

    open_store(tmp_path / "s").close()
    proc, url = start(tmp_path / "s", "--upstream", upstream.url, "--port", "0")
    holder = open_store(tmp_path / "s")
    try:
        assert holder.backend._queue.acquire(10)  # type: ignore[attr-defined]
        for i in range(4):
            assert ask(url, f"call {i}").status_code == 200
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        said = []
        while not said or "Ctrl-C to give up" not in said[-1]:
            said.append(proc.stderr.readline())
            assert said[-1], said
        assert "recording the 4 calls received" in said[-1]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)  # a hang guard, not a measure
    finally:
        if proc.poll() is None:
            proc.kill()
        holder.close()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert err.count("not recorded: the proxy stopped while it was being recorded") == 1, err
    assert err.count("not recorded: the proxy stopped before its turn came") == 3, err
    assert "4 calls received were not recorded: the proxy stopped first" in err
    assert err.count("recording failed") <= 1, err  # the one being recorded, at most


@pytest.mark.parametrize("thinking", [False, True], ids=["streaming", "thinking"])
def test_stopping_during_a_call_records_it_cut_by_the_proxy(
        store: Store, thinking: bool, capfd: pytest.CaptureFixture[str]) -> None:
    """A call still running when the server's grace period ends is cut and recorded as
    incomplete, and no traceback is printed: a stream is broken off, a client still waiting
    for the reply to begin gets a 503 in its protocol's shape."""
    def slow(conn: socket.socket) -> None:
        if read_request(conn) is None:
            return
        if thinking:
            conn.settimeout(5)
            conn.recv(1)  # until the proxy drops the call
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(100):
            conn.sendall(sse_chunk(i))
            time.sleep(0.05)

    got: list[bytes] = []
    status: list[int] = []
    with RawUpstream(slow) as up:
        proxy = RunningProxy(store, up.url, grace=0.2).start()
        started = threading.Event()

        def client() -> None:
            try:
                with httpx.stream("POST", proxy.url + "/v1/chat/completions",
                                  json={**LONG_ANSWER, "stream": True}, timeout=10) as r:
                    status.append(r.status_code)
                    for chunk in r.iter_raw():
                        got.append(chunk)
                        started.set()
            except httpx.HTTPError:
                pass  # the proxy cut the stream: what is tested
        reader = threading.Thread(target=client)
        reader.start()
        if thinking:
            time.sleep(0.3)
        else:
            assert started.wait(5)
        proxy.stop()
        reader.join(10)
    if thinking:
        assert status == [503]
        assert b"".join(got) == (b'{"error":{"message":"sess proxy: the proxy is stopping",'
                                 b'"type":"proxy_error","code":null}}')
    else:
        assert status == [200] and got
    assert [s.name for s in store.sessions()] == ["a-long-answer"]
    event = store.log("a-long-answer")[0]
    assert event.type == "step/end"
    assert event.data["incomplete"] is True and event.data["cut_by"] == "proxy"
    assert any("cut by the proxy (stopping)" in line for line in proxy.lines), proxy.lines
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Cancel" not in err, err
