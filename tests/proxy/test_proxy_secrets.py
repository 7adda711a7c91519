"""What counts as a secret, and where a secret is looked for: placeholder keys, keys as map
keys, keys in a long text error body, keys in the query string."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy

from sesstree import Store
from sesstree.proxy import Exchange, Recorder, ReplyBuilder, parse_request, redact
from sesstree.proxy.protocols import CHAT
from sesstree.proxy.upstream import header_secrets, query_secrets

KEY = "sk-secretstest-0123456789abcdefghij"
GOOGLE = "AIzaSyD4c0ffee0123456789abcdefghijklmno"  # no sk- shape: found only as a secret


def chat(proxy: RunningProxy, text: str, path: str = "/v1/chat/completions",
         **headers: str) -> httpx.Response:
    return httpx.post(proxy.url + path, headers=headers,
                      json={"model": "m", "messages": [{"role": "user", "content": text}]})


def store_bytes(store: Store, path: Path) -> bytes:
    store.close()
    return b"".join(p.read_bytes() for p in path.iterdir() if p.is_file())


def test_a_short_key_is_a_placeholder_and_changes_nothing(proxy: RunningProxy, store: Store,
                                                          upstream: FakeUpstream) -> None:
    assert chat(proxy, "explain the xylophone box", Authorization="Bearer x").status_code == 200
    assert chat(proxy, "is ollama running", **{"x-api-key": "ollama"}).status_code == 200
    assert chat(proxy, "EMPTY means no key", Authorization="EMPTY").status_code == 200
    proxy.flush()
    assert sorted(s.name for s in store.sessions()) == [
        "empty-means-no-key", "explain-the-xylophone-box", "is-ollama-running"]
    assert [m["content"] for m in store.messages("explain-the-xylophone-box")] == [
        "explain the xylophone box", "answer 1: explain the xylophone box"]
    assert store.messages("is-ollama-running")[1]["content"] == "answer 2: is ollama running"
    assert store.messages("empty-means-no-key")[0]["content"] == "EMPTY means no key"
    # forwarded as sent
    sent = [{k.lower(): v for k, v in h.items()} for h in upstream.headers]
    assert [(h.get("authorization"), h.get("x-api-key")) for h in sent] == [
        ("Bearer x", None), (None, "ollama"), ("EMPTY", None)]
    assert "[redacted]" not in "".join(proxy.lines)


def test_which_values_are_secrets() -> None:
    assert header_secrets([(b"authorization", b"Bearer x"), (b"x-api-key", b"ollama"),
                           (b"api-key", b"1234567")]) == []
    assert header_secrets([(b"Authorization", b"Bearer " + KEY.encode()),
                           (b"x-goog-api-key", GOOGLE.encode()),
                           (b"user-agent", b"not-a-secret-at-all")]) == [GOOGLE, KEY]
    assert header_secrets([(b"api-key", b"azurekey1")]) == ["azurekey1"]
    # a version, a date or a number is no key; a value sent percent-encoded is found both ways
    assert query_secrets(b"api-version=2024-06-01&limit=100000000&alt=sse") == []
    assert query_secrets(b"key=abc%2Bdef%2Fghi") == ["abc%2Bdef%2Fghi", "abc+def/ghi"]


def test_a_key_as_a_map_key_is_redacted_and_no_value_is_lost(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream, store_path: Path) -> None:
    other = "sk-secretstest-another-0123456789ab"
    assert redact({KEY: 1, other: 2, "[redacted]": 3, "k": {KEY: [KEY]}}, [KEY, other]) == {
        "[redacted] (2)": 1, "[redacted] (3)": 2, "[redacted]": 3, "k": {"[redacted]": ["[redacted]"]}}
    upstream.add(Scripted(status=400, body={"error": {"message": "bad key",
                                                      "rejected": {KEY: "revoked"}}}))
    reply = chat(proxy, "keyed", Authorization=f"Bearer {KEY}")
    assert reply.status_code == 400 and KEY in reply.text  # the client gets what was sent
    proxy.flush()
    error = next(n.data for n in store.log("keyed") if n.type == "error")
    assert error["message"]["error"]["rejected"] == {"[redacted]": "revoked"}
    assert KEY[4:20].encode() not in store_bytes(store, store_path)


def test_a_key_across_the_cut_of_a_text_error_body(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream, store_path: Path) -> None:
    # Not JSON, longer than what is kept (4000 characters), the key straddling the cut.
    body = b"<html>" + b"." * (4000 - 6 - 10) + GOOGLE.encode() + b" is not valid</html>"
    upstream.add(Scripted(status=403, body=body))
    reply = chat(proxy, "cut the key", Authorization=f"Bearer {GOOGLE}")
    assert reply.status_code == 403 and reply.content == body
    proxy.flush()
    error = next(n.data for n in store.log("cut-the-key") if n.type == "error")
    assert isinstance(error["message"], str) and len(error["message"]) == 4000
    assert error["message"].endswith(".[redacted]")
    assert GOOGLE[:10].encode() not in store_bytes(store, store_path)


def test_a_key_in_the_query_string(proxy: RunningProxy, store: Store, upstream: FakeUpstream,
                                   store_path: Path) -> None:
    upstream.add(Scripted(status=400, body={"error": {"message": f"API key {GOOGLE} expired"}}))
    path = f"/v1/chat/completions?key={GOOGLE}&api-version=2024-06-01"
    assert chat(proxy, f"{GOOGLE} leaked, since 2024-06-01", path).status_code == 400
    assert upstream.paths[-1] == path  # forwarded as sent
    proxy.flush()
    [session] = store.sessions()
    assert session.name == "redacted-leaked-since-2024-06-01"
    assert store.messages(session.name)[0]["content"] == "[redacted] leaked, since 2024-06-01"
    error = next(n.data for n in store.log(session.name) if n.type == "error")
    assert error["message"] == {"error": {"message": "API key [redacted] expired"}}
    printed = "\n".join(proxy.lines)
    assert "-> redacted-leaked-since-2024-06-01 (new)" in printed
    assert GOOGLE[:12].lower() not in printed.lower()
    assert GOOGLE[:12].encode() not in store_bytes(store, store_path)


def test_a_session_line_never_prints_a_key(proxy: RunningProxy) -> None:
    # X-Sess-Session names the session: its name is the client's, printed; a key the client
    # sent is still redacted from the line that names it.
    reply = chat(proxy, "hi", **{"X-Sess-Session": f"k/{GOOGLE}", "x-goog-api-key": GOOGLE})
    assert reply.status_code == 200
    proxy.flush()
    line = next(line for line in proxy.lines if "->" in line)
    assert "-> k/[redacted] (new)" in line and GOOGLE not in line


def test_a_secret_that_json_escapes_is_still_found(store: Store) -> None:
    secret = 'pass"word\\with-escapes'
    parsed = parse_request(CHAT, {"model": "m", "messages": [
        {"role": "user", "content": f"the key is {secret}"}]})
    assert parsed is not None
    reply = ReplyBuilder(CHAT)
    reply.feed_json({"choices": [{"message": {"role": "assistant", "content": "noted"}}]})
    outcome = Recorder(store).record(Exchange(parsed, reply.result(), 200, secrets=[secret]))
    assert store.messages(outcome.session)[0]["content"] == "the key is [redacted]"


AUTH_TOKEN = "tok-6f1c2a9e4b7d8c0f3e5a1b2c"
AZURE = "0123456789abcdef0123456789abcdef"


def test_every_credential_shaped_header_is_a_secret() -> None:
    # By the header's name, whatever the provider; by the value's shape, whatever the name.
    found = header_secrets([
        (b"x-auth-token", AUTH_TOKEN.encode()),
        (b"ocp-apim-subscription-key", AZURE.encode()),
        (b"x-amz-security-token", b"FwoGZXIvYXdzEJr//////////wEaDM"),
        (b"cookie", b"theme=dark; sid=s%3Acookie-session-12345; x=1"),
        (b"x-gateway-credential", b"Bearer gw-credential-98765"),
        (b"x-custom", b"Bearer custom-bearer-24680"),
        (b"authorization", b"AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE1234/20240601/us-east-1/"
                           b"bedrock/aws4_request, SignedHeaders=host;x-amz-date, "
                           b"Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630"),
        (b"proxy-authorization", b"Basic " + base64.b64encode(b"alice:correct-horse")),
        (b"x-client-password", b"hunter2hunter2"),
        (b"user-agent", b"OpenAI/Python 1.40.0"),
        (b"anthropic-version", b"2023-06-01"),
        (b"content-type", b"text/plain; charset=utf-8"),
    ])
    for secret in (AUTH_TOKEN, AZURE, "FwoGZXIvYXdzEJr//////////wEaDM", "s%3Acookie-session-12345",
                   "s:cookie-session-12345", "gw-credential-98765", "custom-bearer-24680",
                   "AKIAEXAMPLE1234/20240601/us-east-1/bedrock/aws4_request",
                   "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630",
                   "alice:correct-horse", "correct-horse", "hunter2hunter2"):
        assert secret in found, secret
    assert not {"OpenAI/Python 1.40.0", "2023-06-01", "text/plain; charset=utf-8",
                "Python", "dark", "host;x-amz-date"} & set(found)
    assert found == sorted(found, key=len, reverse=True)


def test_keys_of_unlisted_headers_echoed_by_the_upstream_are_not_stored(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream, store_path: Path) -> None:
    upstream.add(Scripted(status=401, body={"error": {
        "message": f"token {AUTH_TOKEN} is not valid for subscription {AZURE}",
        "headers": {"X-Auth-Token": AUTH_TOKEN, "Ocp-Apim-Subscription-Key": AZURE}}}))
    upstream.add(Scripted(events=[(None, {"choices": [{"index": 0, "delta": {
        "role": "assistant", "content": f"your password is hunter2hunter2, token {AUTH_TOKEN}"},
        "finish_reason": "stop"}]}), (None, "[DONE]")]))
    headers = {"X-Auth-Token": AUTH_TOKEN, "Ocp-Apim-Subscription-Key": AZURE,
               "X-Client-Password": "hunter2hunter2"}
    assert chat(proxy, f"first with {AZURE}", **headers).status_code == 401
    streamed = httpx.post(proxy.url + "/v1/chat/completions", headers=headers, json={
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "second"}]})
    assert AUTH_TOKEN in streamed.text  # the client gets what was sent
    proxy.flush()
    names = sorted(s.name for s in store.sessions())
    assert names == ["first-with-redacted", "second"]
    error = next(n.data for n in store.log("first-with-redacted") if n.type == "error")
    assert error["message"] == {"error": {
        "message": "token [redacted] is not valid for subscription [redacted]",
        "headers": {"X-Auth-Token": "[redacted]", "Ocp-Apim-Subscription-Key": "[redacted]"}}}
    assert store.messages("second")[1]["content"] == \
        "your password is [redacted], token [redacted]"
    printed = "\n".join(proxy.lines).lower()
    raw = store_bytes(store, store_path)
    for secret in (AUTH_TOKEN, AZURE, "hunter2hunter2"):
        assert secret[:12].encode() not in raw and secret[:12].lower() not in printed
    # forwarded as sent
    sent = {k.lower(): v for k, v in upstream.headers[0].items()}
    assert sent["x-auth-token"] == AUTH_TOKEN and sent["ocp-apim-subscription-key"] == AZURE


def test_a_basic_password_echoed_decoded_is_not_stored(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream, store_path: Path) -> None:
    upstream.add(Scripted(status=403, body={"error": {
        "message": "user alice with password correct-horse-battery may not call this"}}))
    pair = base64.b64encode(b"alice:correct-horse-battery").decode()
    assert chat(proxy, "basic", Authorization=f"Basic {pair}").status_code == 403
    proxy.flush()
    error = next(n.data for n in store.log("basic") if n.type == "error")
    assert error["message"]["error"]["message"] == \
        "user alice with password [redacted] may not call this"
    assert b"correct-horse" not in store_bytes(store, store_path)


def test_a_header_that_merely_starts_with_a_scheme_word_is_no_secret(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream) -> None:
    # OpenRouter's X-Title names the app: "Token Counter App" starts with the word of a
    # scheme but is no credential, and blanking "Counter App" everywhere corrupts the record.
    title = {"X-Title": "Token Counter App", "X-Note": "Key Lime Pie recipes"}
    assert header_secrets([(k.lower().encode(), v.encode()) for k, v in title.items()]) == []
    upstream.add(Scripted(events=[(None, {"choices": [{"index": 0, "delta": {
        "role": "assistant", "content": "Counter App shows Lime Pie recipes"},
        "finish_reason": "stop"}]}), (None, "[DONE]")]))
    reply = httpx.post(proxy.url + "/v1/chat/completions", headers=title, json={
        "model": "m", "stream": True,
        "messages": [{"role": "user", "content": "what does Counter App show"}]})
    assert reply.status_code == 200
    proxy.flush()
    [session] = [s.name for s in store.sessions()]
    assert [m["content"] for m in store.messages(session)] == [
        "what does Counter App show", "Counter App shows Lime Pie recipes"]
    # a one-token credential in any header is still a secret, by its value
    assert header_secrets([(b"x-title", b"Token tok-0123456789abcdef")]) == \
        ["tok-0123456789abcdef"]
