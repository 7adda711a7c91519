"""The proxy with the official ``openai`` client on the Responses API: stateless histories,
``previous_response_id`` chains, streams."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy, track

from sesstree import Store

KEY = "sk-proxytest-responses-0123456789"


def client(proxy: RunningProxy) -> openai.OpenAI:
    return track(openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0))


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_chain_records_as_one_path(
        proxy: RunningProxy, store: Store, stream: bool) -> None:
    c = client(proxy)
    previous = None
    texts = []
    for t in range(6):
        kw: dict[str, Any] = {"model": "gpt-test", "instructions": "Be brief.",
                              "input": f"step {t} of the plan"}
        if previous is not None:
            kw["previous_response_id"] = previous
        if stream:
            with c.responses.stream(**kw) as events:
                final = events.get_final_response()
        else:
            final = c.responses.create(**kw)
        previous = final.id
        texts.append(final.output_text)
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["step-0-of-the-plan"]
    messages = store.messages("step-0-of-the-plan")
    # the instructions once, then each input and its answer, in order
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 6
    assert [m["content"] for m in messages[2::2]] == texts
    stats = proxy.proxy.stats.snapshot()
    assert stats["recorded"] == 6 and stats["prefix_misses"] == 0
    starts = [n.data for n in store.log("step-0-of-the-plan") if n.type == "step/start"]
    assert starts[0]["params"]["instructions"] == "Be brief."  # a parameter of a chained call
    ends = [n.data for n in store.log("step-0-of-the-plan") if n.type == "step/end"]
    assert ends[0]["response_id"] == previous


def test_stateless_history_dedups(proxy: RunningProxy, store: Store) -> None:
    c = client(proxy)
    history: list[Any] = [{"role": "user", "content": "name three rivers"}]
    for t in range(5):
        final = c.responses.create(model="gpt-test", input=history, store=False)
        # the client sends the output items back as they came
        history += [item.model_dump(exclude_none=True) for item in final.output]
        history.append({"role": "user", "content": f"another {t}"})
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["name-three-rivers"]
    stats = proxy.proxy.stats.snapshot()
    assert stats["prefix_misses"] == 0
    # per call: the raw input item and its message, the call (start, raw output item, its
    # message, usage, end); the first call's input adds nothing else
    assert store.stats().nodes == 5 * (2 + 5)
    assert len(store.messages("name-three-rivers")) == 10


def test_unknown_previous_response_starts_a_session_and_counts_a_miss(
        proxy: RunningProxy, store: Store) -> None:
    c = client(proxy)
    c.responses.create(model="m", input="where were we", previous_response_id="resp_unknown")
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["where-were-we"]
    assert proxy.proxy.stats.snapshot()["prefix_misses"] == 1


def test_a_client_that_hangs_up_after_the_reply_ended(
        proxy: RunningProxy, store: Store, upstream: FakeUpstream) -> None:
    # Codex drops the stream as soon as response.completed arrives
    upstream.add(Scripted(stall_after=99, text="done already"))
    upstream.release.clear()
    body = {"model": "m", "input": "quick one", "stream": True}
    with httpx.Client() as c, c.stream("POST", proxy.url + "/v1/responses", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("event: response.completed"):
                break
    for _ in range(200):
        proxy.flush()
        if store.has_session("quick-one"):
            break
    upstream.release.set()
    end = store.log("quick-one")[0].data
    assert end["incomplete"] is True and end["cut_by"] == "client"
    # the reply had ended: it is a message, and the next call continues after it
    assert store.messages("quick-one")[-1] == {"role": "assistant", "content": "done already"}
    c2 = client(proxy)
    c2.responses.create(model="m", input=[{"role": "user", "content": "quick one"},
                                          {"role": "assistant", "content": "done already"},
                                          {"role": "user", "content": "and another"}])
    proxy.flush()
    assert [s.name for s in store.sessions()] == ["quick-one"]
