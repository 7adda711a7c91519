"""Sync over HTTP against a real uvicorn server on 127.0.0.1: clone, push, the token, the CAS
race, hostile peers, size limits."""

from __future__ import annotations

import asyncio
import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from sync_kit import TOKEN, all_ids, grow, refs_of, served, serving

from sesstree import PushRejectedError, RemoteError, Store, open_store, sync
from sesstree.server import app as server_app
from sesstree.server import create_app
from sesstree.sync import clone
from sesstree.sync import pack as pack_module
from sesstree.sync.pack import encode_pack
from sesstree.sync.peer import read_chains
from sesstree.web.throttle import Throttle


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "origin")
    grow(s, "main", 20)
    grow(s, "side", 3, start="main~5")
    s.tag("v1", "main~2")
    yield s
    s.close()


@pytest.fixture
def url(origin: Store) -> Iterator[str]:
    with served(origin) as u:
        yield u


@pytest.fixture
def mine(tmp_path: Path, url: str) -> Iterator[Store]:
    s = clone(url, tmp_path / "mine")
    yield s
    s.close()


def test_clone_over_http_has_identical_ids(origin: Store, mine: Store) -> None:
    assert refs_of(mine) == refs_of(origin)
    assert all_ids(mine) == all_ids(origin)
    assert mine.fsck() == [] and origin.fsck() == []
    assert mine.resolve("origin/side") == origin.session_head("side")


def test_push_over_http_needs_the_token(origin: Store, mine: Store,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_TOKEN", raising=False)
    head = origin.session_head("main")
    grow(mine, "main", 2, text="new")
    with pytest.raises(RemoteError, match="needs a token to write"):
        sync.push(mine, "origin", ["main"])
    with pytest.raises(RemoteError, match="refused the token") as info:
        sync.push(mine, "origin", ["main"], token="wrong-token")
    assert "wrong-token" not in str(info.value)
    assert origin.session_head("main") == head
    monkeypatch.setenv("SESS_TOKEN", TOKEN)
    result = sync.push(mine, "origin", ["main"])
    assert result.nodes == 2
    assert origin.session_head("main") == mine.session_head("main")


def test_a_pusher_guessing_tokens_is_made_to_wait(tmp_path: Path, origin: Store,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_TOKEN", raising=False)
    now = [0.0]  # the throttle's clock, moved by hand
    app = create_app(origin, token=TOKEN, throttle=Throttle(free=2, clock=lambda: now[0]))
    with serving(app) as u:
        mine = clone(u, tmp_path / "mine")
        try:
            grow(mine, "main", 1, text="new")
            for _ in range(2):
                with pytest.raises(RemoteError, match="refused the token"):
                    sync.push(mine, u, ["main"], token="guess-" + TOKEN)
            with pytest.raises(RemoteError) as info:  # now even the right token must wait
                sync.push(mine, u, ["main"], token=TOKEN)
            assert str(info.value) == (f"{u} refused /api/v1/push (HTTP 429): too many wrong "
                                       "tokens from this address: try again in 1 s")
            sync.fetch(mine, u)  # reading never waits
            now[0] += 1
            assert sync.push(mine, u, ["main"], token=TOKEN).nodes == 1
            assert origin.session_head("main") == mine.session_head("main")
        finally:
            mine.close()


def test_a_server_without_a_token_is_read_only(tmp_path: Path, origin: Store) -> None:
    with served(origin, token=None) as u:
        other = clone(u, tmp_path / "ro")
        try:
            grow(other, "main", 1)
            with pytest.raises(RemoteError, match="read-only"):
                sync.push(other, "origin", ["main"], token=TOKEN)
        finally:
            other.close()


def _counting(app: Any, seen: list[str]) -> Any:
    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await app(scope, receive, send)
    return wrapped


@pytest.mark.parametrize("extra", [0, 10_000])
def test_one_new_event_on_a_long_session_is_one_node_in_three_round_trips(
        tmp_path: Path, extra: int) -> None:
    # Whatever else the remote holds, the same one node in the same three requests.
    remote = open_store(tmp_path / "remote")
    local = open_store(tmp_path / "local")
    try:
        grow(remote, "big", 10_000)
        if extra:
            grow(remote, "other", extra)
        sync.pull(local, remote, ["big"])  # in-process: the setup need not go through HTTP
        grow(local, "big", 1, text="one more")
        seen: list[str] = []
        with serving(_counting(create_app(remote, token=TOKEN), seen)) as u:
            result = sync.push(local, u, ["big"], token=TOKEN)
        assert result.nodes == 1
        assert result.round_trips == len(seen) <= 3
        assert seen == ["/api/v1/refs", "/api/v1/has", "/api/v1/push"]
        assert remote.session_head("big") == local.session_head("big")
    finally:
        local.close()
        remote.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_concurrent_pushers_one_wins_the_other_is_refused(
        tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    # Both pushes read the remote's refs, then reach the server together: the CAS decides.
    where = request.getfixturevalue("postgres_url") if kind == "postgres" else tmp_path / "o"
    with open_store(where) as origin:
        grow(origin, "main", 5)
        _race(tmp_path, origin)


def _race(tmp_path: Path, origin: Store) -> None:
    app = create_app(origin, token=TOKEN)
    arrived = 0
    both = asyncio.Event()

    async def gate(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal arrived
        if scope["type"] == "http" and scope["path"] == "/api/v1/push":
            arrived += 1
            if arrived == 2:
                both.set()
            await asyncio.wait_for(both.wait(), 10)
        await app(scope, receive, send)

    with serving(gate) as u:
        a, b = clone(u, tmp_path / "a"), clone(u, tmp_path / "b")
        try:
            heads = {"a": grow(a, "main", 1, text="from a"), "b": grow(b, "main", 1, text="b")}
            outcome: dict[str, object] = {}

            def run(name: str, store: Store) -> None:
                try:
                    outcome[name] = sync.push(store, "origin", ["main"], token=TOKEN)
                except PushRejectedError as exc:
                    outcome[name] = exc
            threads = [threading.Thread(target=run, args=p) for p in (("a", a), ("b", b))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
        finally:
            a.close()
            b.close()
    refused = [n for n, r in outcome.items() if isinstance(r, PushRejectedError)]
    assert len(refused) == 1, outcome
    winner = "a" if refused == ["b"] else "b"
    assert origin.session_head("main") == heads[winner]
    assert "moved meanwhile" in str(outcome[refused[0]])
    assert origin.fsck() == []


def test_a_client_sending_a_node_that_does_not_hash_is_refused(origin: Store, url: str) -> None:
    good = read_chains(origin, [(origin.resolve("main"), 1)])[0]
    # A new child of main whose bytes were changed after its id was computed.
    child = msgspec.structs.replace(good, parent=good.id)
    fake_id = "ab" * 32
    forged = msgspec.structs.replace(child, id=fake_id)
    before = origin.backend.count_nodes()
    body = msgspec.msgpack.encode({"pack": encode_pack([forged]), "updates": [
        {"ref": "sessions/main", "old": good.id, "new": fake_id, "force": True}]})
    reply = httpx.post(url + "/api/v1/push", content=body,
                       headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status_code == 400
    assert "do not hash to its id" in reply.json()["error"]
    assert origin.backend.count_nodes() == before
    assert origin.session_head("main") == good.id


def test_pushed_refs_are_checked_by_the_server(origin: Store, url: str) -> None:
    head = origin.session_head("main")
    for ref, new in [("remotes/x/main", head), ("HEAD", head), ("sessions/../x", head),
                     ("config", head), ("sessions/fine", "zz"), ("sessions/fine", head.upper())]:
        body = msgspec.msgpack.encode({"pack": encode_pack([]), "updates": [
            {"ref": ref, "old": None, "new": new}]})
        reply = httpx.post(url + "/api/v1/push", content=body,
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert reply.status_code == 400, ref
    assert {r.name for r in origin.backend.list_refs("")} == {
        "sessions/main", "sessions/side", "tags/v1"}


def test_a_server_sending_nodes_that_do_not_hash_is_refused(tmp_path: Path,
                                                            origin: Store) -> None:
    app = create_app(origin, token=TOKEN)

    async def tamper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/v1/nodes":
            await app(scope, receive, send)
            return
        parts: list[Any] = []

        async def keep(message: Any) -> None:
            parts.append(message)
        await app(scope, receive, keep)
        body = b"".join(m.get("body", b"") for m in parts if m["type"] == "http.response.body")
        records = msgspec.msgpack.decode(zlib.decompress(body))
        records[-1][3] = msgspec.msgpack.encode({"role": "user", "content": "forged"})
        forged = zlib.compress(msgspec.msgpack.encode(records))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(forged)).encode())]})
        await send({"type": "http.response.body", "body": forged})

    with serving(tamper) as u:
        with pytest.raises(RemoteError, match="do not hash to its id"):
            clone(u, tmp_path / "victim")
    assert not (tmp_path / "victim").exists()  # nothing stored, and the new folder removed


def test_a_forged_pack_into_an_existing_store_stores_nothing(tmp_path: Path,
                                                             origin: Store) -> None:
    app = create_app(origin, token=TOKEN)

    async def tamper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/api/v1/nodes":
            good = read_chains(origin, [(origin.resolve("main"), 3)])
            forged = [good[0], good[1], msgspec.structs.replace(good[2], encoded=b"\xa1x")]
            body = encode_pack(forged)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    with open_store(tmp_path / "victim") as victim, serving(tamper) as u:
        with pytest.raises(RemoteError, match="do not hash to its id"):
            sync.fetch(victim, u)
        assert victim.backend.count_nodes() == 0
        assert victim.backend.list_refs("") == []


def test_oversized_and_inflating_bodies_are_refused(origin: Store, mine: Store, url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    mine.session("main").extend(  # random text: a pack that does not compress away
        [("user/message", {"role": "user", "content": os.urandom(200).hex()})
         for _ in range(30)])
    head = origin.session_head("main")
    monkeypatch.setattr(server_app, "MAX_BODY", 2000)
    with pytest.raises(RemoteError, match="HTTP 413"):
        sync.push(mine, "origin", ["main"], token=TOKEN)
    reply = httpx.post(url + "/api/v1/has", content=b"\x00" * 5000)
    assert reply.status_code == 413
    monkeypatch.setattr(server_app, "MAX_BODY", pack_module.MAX_BODY)
    monkeypatch.setattr(pack_module, "MAX_UNPACKED", 1000)
    with pytest.raises(RemoteError, match="inflates past"):
        sync.push(mine, "origin", ["main"], token=TOKEN)
    assert origin.session_head("main") == head
    monkeypatch.setattr(pack_module, "MAX_UNPACKED", 2**27)
    sync.push(mine, "origin", ["main"], token=TOKEN)
    assert origin.session_head("main") == mine.session_head("main")


def test_garbage_requests_get_one_clear_error(url: str) -> None:
    reply = httpx.post(url + "/api/v1/walk", content=b"not msgpack")
    assert reply.status_code == 400 and "msgpack" in reply.json()["error"]
    reply = httpx.post(url + "/api/v1/walk", content=msgspec.msgpack.encode({"starts": [[b"x", 1]]}))
    assert reply.status_code == 400 and "32-byte id" in reply.json()["error"]
    assert httpx.get(url + "/api/v1/nothing").status_code == 404
    assert httpx.get(url + "/").status_code == 200  # the browser view


def test_an_unreachable_or_foreign_server_is_one_clear_error(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        with pytest.raises(RemoteError, match=r"cannot reach http://127\.0\.0\.1:1"):
            sync.fetch(store, "http://127.0.0.1:1")
        with pytest.raises(RemoteError, match="invalid URL"):
            sync.fetch(store, "http://")

        async def other(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"nope"})
        with serving(other) as u:
            with pytest.raises(RemoteError, match="is not a sesstree server"):
                sync.fetch(store, u)
    finally:
        store.close()


@pytest.mark.parametrize("refs", [{"sessions/../evil": "ab" * 32}, {"remotes/x/y": "ab" * 32},
                                  {"sessions/ok": "not an id"}])
def test_a_server_listing_impossible_refs_is_refused(tmp_path: Path, refs: dict[str, str]
                                                     ) -> None:
    async def liar(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = msgspec.json.encode({"version": 1, "refs": refs})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    with open_store(tmp_path / "s") as store, serving(liar) as u:
        store.session("main").append("user/message", {"role": "user", "content": "x"})
        for action in (lambda: sync.fetch(store, u), lambda: sync.push(store, u, ["main"], token=TOKEN)):
            with pytest.raises(RemoteError, match="lists"):
                action()
        assert [r.name for r in store.backend.list_refs("")] == ["sessions/main"]


def test_an_answer_past_the_bound_is_refused(tmp_path: Path, url: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.sync import http as http_module

    monkeypatch.setattr(http_module, "MAX_UNPACKED", 100)
    with open_store(tmp_path / "s") as store:
        with pytest.raises(RemoteError, match="answered /api/v1/refs with more than"):
            sync.fetch(store, url)
        assert store.backend.count_nodes() == 0
