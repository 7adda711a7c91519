"""Sync hardening: no password of a URL ever shown or logged, bad URLs refused before they
are saved, answers bounded (/walk in total, /nodes in bytes), and a lying server ends in one
error. Real uvicorn servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec
import pytest
from cli_kit import Sess
from sync_kit import TOKEN, all_ids, grow, refs_of, served, serving

from sesstree import RemoteError, Store, open_store, sync
from sesstree.server import create_app
from sesstree.server.app import MAX_WALK, MAX_WALK_IDS
from sesstree.sync import add_remote, clone, list_remotes
from sesstree.sync import negotiate as negotiate_module
from sesstree.sync import pack as pack_module
from sesstree.sync.http import HttpPeer
from sesstree.sync.remotes import remotes_file

PASSWORD = "hunter2"


def with_password(url: str, user: str = "alice") -> str:
    """``url`` with ``user:PASSWORD@`` in its network location (the user kept if it has one)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or user}:{PASSWORD}@{host}"))


def reflog_text(store: Store) -> str:
    return json.dumps([msgspec.to_builtins(e) for e in store.reflog()])


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "origin")
    grow(s, "main", 5)
    yield s
    s.close()


# -- passwords ---------------------------------------------------------------------------------


def test_pull_from_a_url_with_a_password_logs_and_shows_none(tmp_path: Path,
                                                             origin: Store) -> None:
    with served(origin) as url, open_store(tmp_path / "mine") as mine:
        secret_url = with_password(url)
        sync.pull(mine, secret_url, ["main"])
        assert mine.session_head("main") == origin.session_head("main")
        assert PASSWORD not in reflog_text(mine)
        assert "pull http://127.0.0.1:" in reflog_text(mine)
        with pytest.raises(RemoteError, match="has no session 'nosuch'") as info:
            sync.pull(mine, secret_url, ["nosuch"])
        assert PASSWORD not in str(info.value) and "127.0.0.1" in str(info.value)


def test_pull_from_a_postgres_url_with_a_password_logs_none(tmp_path: Path,
                                                            postgres_url: str) -> None:
    with open_store(postgres_url) as pg:
        grow(pg, "main", 3)
    secret_url = with_password(postgres_url)  # the test server trusts: the password is unused
    with open_store(tmp_path / "mine") as mine:
        sync.pull(mine, secret_url, ["main"])
        assert mine.session_head("main") is not None
        assert PASSWORD not in reflog_text(mine)
        with pytest.raises(RemoteError, match="has no session 'nosuch'") as info:
            sync.pull(mine, secret_url, ["nosuch"])
        assert PASSWORD not in str(info.value)


def test_cli_pull_with_a_password_in_the_url(sess: Sess, origin: Store) -> None:
    sess.ok("init")
    with served(origin) as url:
        secret_url = with_password(url)
        line = sess.fail("pull", secret_url, "nosuch", needles=("has no session 'nosuch'",))
        assert PASSWORD not in line
        out = sess.ok("pull", secret_url, "main")  # created here from the remote's
        assert "main: created at" in out and PASSWORD not in out
        sess.ok("append", "user/message", json.dumps({"role": "user", "content": "ahead"}))
        out = sess.ok("pull", secret_url, "main")
        assert out == f"main: ahead of {url}/main, nothing to pull\n"
        with sess.store() as mine:
            assert PASSWORD not in reflog_text(mine)


def test_remote_add_of_an_existing_name_shows_no_password(tmp_path: Path,
                                                          sess: Sess) -> None:
    secret = f"postgresql://bob:{PASSWORD}@db.example/sessions"
    sess.ok("init")
    sess.ok("remote", "add", "lab", secret)
    line = sess.fail("remote", "add", "lab", "/elsewhere", needles=("already exists",))
    assert PASSWORD not in line and "postgresql://bob@db.example/sessions" in line
    with sess.store() as store, pytest.raises(RemoteError) as info:
        add_remote(store, "lab", "/elsewhere")
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize("bad", ["http://u:pw0rd@[::1/x", "http://u:pw0rd/x@127.0.0.1:1/",
                                 "https://u:pw0rd@/x"])
def test_an_invalid_url_never_shows_its_password(sess: Sess, bad: str) -> None:
    sess.ok("init")
    for args in (("fetch", bad), ("push", bad), ("remote", "add", "bad", bad)):
        line = sess.fail(*args, needles=("invalid URL",))
        assert "pw0rd" not in line, line
    with pytest.raises(RemoteError) as info:
        HttpPeer(bad)
    assert "pw0rd" not in str(info.value)


# -- remotes: bad URLs refused, credentials never stored -------------------------------------


def test_a_bad_http_url_is_refused_and_nothing_is_saved(sess: Sess) -> None:
    sess.ok("init")
    for bad in ("http://[::1", "http://", "https:///x"):
        line = sess.fail("remote", "add", "bad", bad, needles=("invalid URL",))
        assert "internal error" not in line
    assert sess.ok("remote", "list") == ""
    with sess.store() as store:
        path = remotes_file(store)
        assert path is not None and not path.exists()


def test_remotes_saved_before_with_a_bad_url_still_list_and_remove(sess: Sess) -> None:
    """A remotes file written by an older version may hold a URL that does not parse."""
    sess.ok("init")
    with sess.store() as store:
        path = remotes_file(store)
    assert path is not None
    path.write_text(json.dumps({"remotes": {"bad": {
        "name": "bad", "url": "http://carol:pw0rd@[::1", "token_file": None}}}))
    out = sess.ok("remote", "list", "-v")
    assert out.startswith("bad\t") and "pw0rd" not in out
    assert "pw0rd" not in sess.ok("remote", "list", "--json")
    line = sess.fail("fetch", "bad", needles=("invalid URL",))
    assert "pw0rd" not in line
    out = sess.ok("remote", "remove", "bad")
    assert "Removed remote bad" in out and "pw0rd" not in out
    assert sess.ok("remote", "list") == ""


def test_an_http_remote_is_stored_without_its_user_and_password(tmp_path: Path,
                                                                origin: Store) -> None:
    with served(origin) as url, open_store(tmp_path / "mine") as mine:
        added = add_remote(mine, "origin", with_password(url) + "/")
        assert PASSWORD not in added.url and "alice" not in added.url
        path = remotes_file(mine)
        assert path is not None
        assert PASSWORD not in path.read_text() and "alice" not in path.read_text()
        assert list_remotes(mine)[0].url == url + "/"
        sync.fetch(mine, "origin")  # the stripped URL still reaches the server
        assert mine.resolve("origin/main") == origin.session_head("main")


# -- /walk: bounded in total -------------------------------------------------------------------


def test_walk_answers_are_bounded_in_total(origin: Store) -> None:
    tip = origin.session_head("main")
    assert tip is not None
    starts = MAX_WALK_IDS // MAX_WALK + 1  # each within bounds, together beyond
    body = msgspec.msgpack.encode({"starts": [[bytes.fromhex(tip), MAX_WALK]] * starts})
    with served(origin) as url:
        reply = httpx.post(url + "/api/v1/walk", content=body,
                           headers={"Content-Type": "application/x-msgpack"})
        assert reply.status_code == 413
        assert "ids per /walk answer" in reply.json()["error"]
        # The client splits what it asks so that no answer is refused.
        peer = HttpPeer(url)
        try:
            walks = peer.walk([(tip, MAX_WALK)] * starts)
            assert len(walks) == starts and all(len(w.ids) == 5 for w in walks)
            assert peer.round_trips == 2
        finally:
            peer.close()


# -- /nodes: cut by size -----------------------------------------------------------------------


def test_large_nodes_travel_in_several_answers(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers are cut at about PACK_BYTES, and the client asks again: a store whose nodes
    together exceed what one answer may hold (MAX_UNPACKED, lowered here) still clones."""
    monkeypatch.setattr(pack_module, "PACK_BYTES", 20_000)
    monkeypatch.setattr(pack_module, "MAX_UNPACKED", 100_000)
    paths: list[str] = []
    with open_store(tmp_path / "big") as big:
        for name, n in (("main", 25), ("side", 10)):
            if name == "side":
                big.fork("side", "main~3")
            big.session(name).extend(
                [("user/message", {"role": "user", "content": os.urandom(4000).hex()})
                 for _ in range(n)])
        app = create_app(big, token=TOKEN)

        async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                paths.append(scope["path"])
            await app(scope, receive, send)

        with serving(counting) as url, clone(url, tmp_path / "mine") as mine:
            assert refs_of(mine) == refs_of(big)
            assert all_ids(mine) == all_ids(big)
            assert mine.fsck() == []
    # 35 nodes of 8 KB: 3 per answer of at most ~28 KB, so about a dozen answers.
    assert paths.count("/api/v1/nodes") >= 10


def test_a_server_that_sends_other_nodes_than_asked_stores_nothing(tmp_path: Path,
                                                                   origin: Store) -> None:
    from sesstree.sync.pack import encode_pack
    from sesstree.sync.peer import read_chains

    app = create_app(origin, token=TOKEN)
    tip = grow(origin, "other", 3, text="unasked")  # sound nodes, but not the ones asked for
    origin.delete_session("other")

    async def swap(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/api/v1/nodes":
            body = encode_pack(read_chains(origin, [(tip, 8)]))
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    with open_store(tmp_path / "victim") as victim, serving(swap) as url:
        with pytest.raises(RemoteError, match="other than those asked for"):
            sync.fetch(victim, url)
        assert victim.backend.list_refs("") == []


# -- a lying server ----------------------------------------------------------------------------


def lying_walks(origin: Store, extra: int, depth: int) -> Any:
    """An app whose /walk lists ``extra`` more random ids than asked, reports ``depth``, and
    always claims more lies behind; every other route is the real one. After 300 walks it
    answers garbage, so a client that never stops still ends (with the wrong error)."""
    app = create_app(origin, token=TOKEN)
    calls = [0]

    async def lying(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/api/v1/walk":
            chunks = []
            while True:
                event = await receive()
                chunks.append(event.get("body", b""))
                if not event.get("more_body"):
                    break
            starts = msgspec.msgpack.decode(b"".join(chunks))["starts"]
            calls[0] += 1
            walks = [[depth, os.urandom(32 * (n + extra)), os.urandom(32)] for _, n in starts]
            body = msgspec.msgpack.encode({"walks": walks} if calls[0] < 300 else {})
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return lying


def test_a_walk_longer_than_asked_is_refused(tmp_path: Path, origin: Store) -> None:
    with open_store(tmp_path / "victim") as victim, \
            serving(lying_walks(origin, extra=1, depth=10**12)) as url:
        with pytest.raises(RemoteError, match=r"listed 17 ids back from [0-9a-f]{12} when "
                                              r"asked for at most 16"):
            sync.fetch(victim, url)
        assert victim.backend.count_nodes() == 0
        assert victim.backend.list_refs("") == []


def test_a_server_listing_ids_forever_ends_in_one_error(tmp_path: Path, origin: Store,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(negotiate_module, "MAX_WALKED", 50_000)
    with open_store(tmp_path / "victim") as victim:
        with serving(lying_walks(origin, extra=0, depth=10**12)) as url, \
                pytest.raises(RemoteError, match="more than 50000 ids to walk"):
            sync.fetch(victim, url)
        # A server claiming a short line but listing on is stopped at the depth it gave.
        with serving(lying_walks(origin, extra=0, depth=100)) as url, \
                pytest.raises(RemoteError, match=r"more than 100 ids back from .* the depth"):
            sync.fetch(victim, url)
        assert victim.backend.count_nodes() == 0
