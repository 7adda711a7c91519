"""Many clients at once, through one proxy and through two proxies on one store (each with
its own connection, as two processes would be): nothing lost, no session moved backwards."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream
from proxy_server import RunningProxy

from sesstree import Store, open_store

CLIENTS = 32
TURNS = 2


def conversation(urls: list[str], n: int, errors: list[BaseException]) -> None:
    try:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "shared prompt"},  # every client shares it
            {"role": "user", "content": f"client {n} question"}]
        with httpx.Client(timeout=30) as c:
            for t in range(TURNS):
                url = urls[(n + t) % len(urls)]
                r = c.post(url + "/v1/chat/completions", json={
                    "model": "m", "messages": messages, "stream": t % 2 == 1})
                r.raise_for_status()
                text = (r.json()["choices"][0]["message"]["content"] if t % 2 == 0 else "".join(
                    httpx.Response(200, content=line[6:]).json()["choices"][0]["delta"].get(
                        "content", "")
                    for line in r.text.splitlines()
                    if line.startswith("data: {") and '"choices": [{' in line))
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": f"client {n} turn {t}"}]
    except BaseException as exc:
        errors.append(exc)


def check(store: Store, clients: int = CLIENTS) -> None:
    sessions = {s.name: s for s in store.sessions()}
    assert len(sessions) == clients, sorted(sessions)
    for n in range(clients):
        name = f"client-{n}-question" if n else "client-0-question"
        chat = store.messages(name)
        assert [m["role"] for m in chat] == ["system"] + ["user", "assistant"] * TURNS
        assert chat[1]["content"] == f"client {n} question"
        assert [m["content"] for m in chat[3::2]] == [f"client {n} turn {t}"
                                                       for t in range(TURNS - 1)]
        # every move of the session went forward: the old head is on the new path
        for entry in store.reflog(name):
            if entry.old is not None and entry.new is not None:
                assert entry.old in {node.id for node in store.log(entry.new)}


def run_clients(urls: list[str], clients: int = CLIENTS) -> None:
    errors: list[BaseException] = []
    threads = [threading.Thread(target=conversation, args=(urls, n, errors))
               for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def test_32_clients_through_one_proxy(proxy: RunningProxy, store: Store) -> None:
    run_clients([proxy.url])
    proxy.flush()
    check(store)
    stats = proxy.proxy.stats.snapshot()
    assert stats["recorded"] == CLIENTS * TURNS and stats["record_failures"] == 0
    assert stats["prefix_misses"] == 0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_clients_through_two_proxies_on_one_store(
        upstream: FakeUpstream, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    where = str(tmp_path / "s") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    with open_store(where) as a, open_store(where) as b, \
            RunningProxy(a, upstream.url) as pa, RunningProxy(b, upstream.url) as pb:
        # each conversation alternates between the proxies: they race on its session
        run_clients([pa.url, pb.url], 16)
        pa.flush()
        pb.flush()
        check(a, 16)
        total = [p.proxy.stats.snapshot() for p in (pa, pb)]
        # a reply one proxy had not yet written when the other got the next request is
        # written by the other from the re-sent history: counted, not forked
        assert sum(s["recorded"] for s in total) == 16 * TURNS
        assert sum(s["record_failures"] for s in total) == 0
