"""Gemini contents as chat messages: turns, text, media, calls and their responses."""

from __future__ import annotations

import base64
from typing import Any

from sesstree.interop.gemini import (
    RAW_TYPE,
    gemini_contents_events,
    gemini_system_events,
    gemini_turns,
)


def messages(contents: list[Any]) -> list[Any]:
    return [d for t, d in gemini_contents_events(contents) if t != RAW_TYPE]


def test_each_content_is_its_raw_form_then_its_turns_messages() -> None:
    contents = [{"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"text": "hel"}]},
                {"role": "model", "parts": [{"text": "lo"}]},
                {"parts": [{"text": "bye"}]}]
    events = gemini_contents_events(contents)
    assert events == [
        (RAW_TYPE, contents[0]), ("user/message", {"role": "user", "content": "hi"}),
        (RAW_TYPE, contents[1]), (RAW_TYPE, contents[2]),
        ("assistant/message", {"role": "assistant", "content": "hello"}),
        (RAW_TYPE, contents[3]), ("user/message", {"role": "user", "content": "bye"})]
    assert gemini_turns(contents) == 3
    # raw forms are the contents themselves, as sent
    assert events[0][1] is contents[0]


def test_calls_are_numbered_by_turn_and_responses_paired_by_id_or_name() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "read both"}]},
        {"role": "model", "parts": [
            {"thought": True, "text": "I should read them."},
            {"functionCall": {"name": "read", "args": {"path": "a", "n": 1.0}},
             "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "read", "args": {"path": "b"}, "id": "server-id"}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "read", "id": "server-id", "response": {"out": "B"}}},
            {"functionResponse": {"name": "read", "id": "read__cli_17_0",
                                  "response": {"z": 1, "a": "A"}}}]}]
    assert messages(contents) == [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1_0", "type": "function",
             "function": {"name": "read", "arguments": '{"n":1,"path":"a"}'}},
            {"id": "call_1_1", "type": "function",
             "function": {"name": "read", "arguments": '{"path":"b"}'}}]},
        {"role": "tool", "tool_call_id": "call_1_1", "content": '{"out":"B"}'},
        {"role": "tool", "tool_call_id": "call_1_0", "content": '{"a":"A","z":1}'}]


def test_media_and_other_parts() -> None:
    png = bytes(range(250, 256)) * 3
    urlsafe = base64.urlsafe_b64encode(png).decode().rstrip("=")
    standard = base64.b64encode(png).decode()
    contents = [{"role": "user", "parts": [
        {"text": "look: "}, {"inlineData": {"mimeType": "image/png", "data": urlsafe}},
        {"inline_data": {"mime_type": "application/pdf", "data": standard}},
        {"fileData": {"mimeType": "video/mp4", "fileUri": "https://x/v"}},
        {"executableCode": {"language": "PYTHON", "code": "1"}, "thoughtSignature": "x"}]}]
    assert messages(contents) == [{"role": "user", "content": [
        {"type": "text", "text": "look: "},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{standard}"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{standard}"}},
        {"type": "file", "file": {"file_url": "https://x/v", "mime_type": "video/mp4"}},
        {"executableCode": {"language": "PYTHON", "code": "1"}}]}]


def test_empty_and_thought_only_turns_make_no_message() -> None:
    assert messages([{"role": "model", "parts": []}]) == []
    assert messages([{"role": "model", "parts": [{"text": "hm", "thought": True}]}]) == []
    assert messages([{"role": "user", "parts": [{"text": ""}]}]) == []
    assert messages([{"role": "function", "parts": [{"text": "x"}]}]) == [
        {"role": "function", "content": "x"}]


def test_system_instruction() -> None:
    system = {"role": "user", "parts": [{"text": "Be terse."}, {"text": "Be kind."}]}
    assert gemini_system_events(system) == [
        (RAW_TYPE, {"systemInstruction": system}),
        ("system/message", {"role": "system", "content": "Be terse.\nBe kind."})]
    assert gemini_system_events("Be terse.")[1] == (
        "system/message", {"role": "system", "content": "Be terse."})
    assert gemini_system_events({"parts": []}) == [(RAW_TYPE, {"systemInstruction": {
        "parts": []}})]


def test_what_a_media_part_says_beside_its_media_is_kept() -> None:
    # A clip of a video, or an image at another resolution, is another input: the part's
    # other fields stay in its message, in one spelling (the API takes snake_case too).
    video = {"fileData": {"mimeType": "video/mp4", "fileUri": "https://x/v.mp4"}}
    image = {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}

    def content(*parts: Any) -> list[Any]:
        return [{"role": "user", "parts": [{"text": "watch"}, *parts]}]

    clip = messages(content({**video, "videoMetadata": {"startOffset": "10s"}}))
    assert clip != messages(content({**video, "videoMetadata": {"startOffset": "50s"}}))
    assert clip != messages(content(video))
    assert clip == messages(content({"file_data": {"mime_type": "video/mp4",
                                                   "file_uri": "https://x/v.mp4"},
                                     "video_metadata": {"start_offset": "10s"}}))
    high = messages(content({**image, "mediaResolution": {"level": "MEDIA_RESOLUTION_HIGH"}}))
    assert high != messages(content(image))
    assert high == messages(content({**image, "thoughtSignature": "c2ln",
                                     "media_resolution": {"level": "MEDIA_RESOLUTION_HIGH"}}))
    # as in a function's response
    call = {"role": "model", "parts": [{"functionCall": {"name": "shot", "args": {}}}]}

    def answered(*parts: Any) -> list[Any]:
        return messages([{"role": "user", "parts": [{"text": "go"}]}, call, {
            "role": "user", "parts": [{"functionResponse": {"name": "shot", "response": {},
                                                           "parts": list(parts)}}]}])

    assert answered({**image, "mediaResolution": {"level": "MEDIA_RESOLUTION_LOW"}}) != \
        answered(image)


def test_a_response_naming_a_calls_id_under_another_name_is_not_its_answer() -> None:
    # The model reads the name a response gives: the same id under another name is another
    # input, not the same result re-sent.
    def history(name: str) -> list[Any]:
        return messages([
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "x", "name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "x", "name": name,
                                                             "response": {"r": 1}}}]}])

    assert history("f")[-1]["tool_call_id"] == "call_1_0"
    assert history("g") != history("f")


def test_a_file_image_keeps_its_media_type() -> None:
    def user(mime: str) -> list[Any]:
        return messages([{"role": "user", "parts": [
            {"fileData": {"mimeType": mime, "fileUri": "https://x/files/a"}}]}])

    assert user("image/png") != user("image/jpeg")
    assert user("image/png") == [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "https://x/files/a", "mime_type": "image/png"}}]}]


def test_a_system_instruction_keeps_its_media_and_other_parts() -> None:
    # The model reads an image in the system instruction: without it, it is another input.
    image = {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}
    with_image = gemini_system_events({"parts": [{"text": "Style:"}, image, {"text": "Be terse."}]})
    text_only = gemini_system_events({"parts": [{"text": "Style:"}, {"text": "Be terse."}]})
    assert with_image[1] == ("system/message", {"role": "system", "content": [
        {"type": "text", "text": "Style:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "Be terse."}]})
    assert with_image[1] != text_only[1]
    assert gemini_system_events({"parts": [image]})[1][0] == "system/message"


def test_the_messages_keep_the_order_of_the_parts() -> None:
    """Text before or after a function response (or a model's call) is a different input to
    the model: the two orders map to different messages, each in its parts' order."""
    call = {"functionCall": {"name": "ls", "args": {}}}
    response = {"functionResponse": {"name": "ls", "response": {"ok": 1}}}
    first = messages([{"role": "model", "parts": [call]},
                      {"role": "user", "parts": [response, {"text": "and now?"}]}])
    second = messages([{"role": "model", "parts": [call]},
                       {"role": "user", "parts": [{"text": "and now?"}, response]}])
    assert [m["role"] for m in first[1:]] == ["tool", "user"]
    assert [m["role"] for m in second[1:]] == ["user", "tool"]
    spoke_then_called = messages([{"role": "model", "parts": [{"text": "look"}, call]}])
    called_then_spoke = messages([{"role": "model", "parts": [call, {"text": "look"}]}])
    assert spoke_then_called == [{"role": "assistant", "content": "look", "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}]
    assert called_then_spoke == [
        {"role": "assistant", "content": None, "tool_calls": spoke_then_called[0]["tool_calls"]},
        {"role": "assistant", "content": "look"}]


_MEDIA_PARTS: list[dict[str, Any]] = [
    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo-_w"}},  # URL-safe, unpadded
    {"inline_data": {"mime_type": "image/jpeg", "data": "/9j/4AAQ"}},
    {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0x"}},
    {"inlineData": {"data": "AAAA"}},
    {"fileData": {"mimeType": "image/webp", "fileUri": "gs://bucket/a.webp"}},
    {"fileData": {"mimeType": "video/mp4", "fileUri": "https://example.com/v.mp4"},
     "videoMetadata": {"startOffset": "1s", "endOffset": "5s"}},
    {"file_data": {"file_uri": "https://example.com/doc.txt"}, "thoughtSignature": "c2ln"},
]


def test_a_media_part_is_one_node_through_the_proxy_and_the_importer() -> None:
    # The proxy maps a request's contents with gemini_contents_events, the Gemini CLI importer
    # a session's records with record_contents and content_events: one content, one node.
    from sesstree.interop.gemini_content import CallIds, content_events, record_contents
    from sesstree.node import make_node

    for part in _MEDIA_PARTS:
        for parts in ([part], [{"text": "look at this"}, part]):
            content = {"role": "user", "parts": parts}
            proxied = [e for e in gemini_contents_events([content]) if e[0] != RAW_TYPE]
            imported = content_events(content, CallIds())
            recorded = [e for c in record_contents({"type": "user", "content": parts})
                        for e in content_events(c, CallIds())]
            if len(parts) == 1:
                assert recorded == []  # Gemini CLI does not re-send a prompt without text
            ids = {make_node(None, t, d).id for t, d in (*proxied, *imported, *recorded)}
            assert len(proxied) == 1 and len(ids) == 1, (proxied, imported, recorded)


def test_a_users_text_parts_keep_their_boundaries_and_a_models_are_one_text() -> None:
    # A user's parts are re-sent as they were made (Gemini CLI puts a file it was pointed at
    # in a part of its own): cut elsewhere, they are another input. A model's text parts are
    # where its stream happened to be cut, and Gemini CLI joins them before it re-sends them.
    from sesstree.interop.gemini_content import CallIds, content_events

    def both(role: str, texts: list[str]) -> list[Any]:
        content = {"role": role, "parts": [{"text": t} for t in texts]}
        proxied = [d for t, d in gemini_contents_events([content]) if t != RAW_TYPE]
        assert proxied == [d for _, d in content_events(content, CallIds())]
        return proxied

    assert both("user", ["ab", "c"]) != both("user", ["a", "bc"])
    assert both("user", ["ab", "c"]) == [{"role": "user", "content": [
        {"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]}]
    assert both("user", ["abc"]) == [{"role": "user", "content": "abc"}]
    assert both("user", ["ab", "", "c"]) == both("user", ["ab", "c"])  # empty parts vanish
    assert both("model", ["ab", "c"]) == both("model", ["a", "bc"]) == both("model", ["abc"])
    # A user turn sent as one content per part is the same turn.
    split = [{"role": "user", "parts": [{"text": "ab"}]}, {"role": "user", "parts": [{"text": "c"}]}]
    assert messages(split) == both("user", ["ab", "c"])
