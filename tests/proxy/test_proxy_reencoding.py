"""The canonical form against generated re-encodings, for every protocol: every message
position, every role, every content shape. A history re-sent in other shapes has the keys it
had; a history changed in one message (a character, a role, a block dropped or moved, a tool
id) never has them from that message on. First on the keys alone (many examples), then
through the real proxy on loopback: a conversation sent turn after turn, its history
re-encoded every time, is one session with no divergence, and a changed re-send diverges."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import httpx
import pytest
from fake_upstream import FakeUpstream, Scripted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proxy_server import RunningProxy
from reencode import PROTOCOLS, Msg, Shapes, mutations

from sesstree import Store
from sesstree.proxy.canonical import EMPTY_KEY, roll, units
from sesstree.proxy.protocols import parse_request

texts = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                min_size=1, max_size=8)
urls = st.sampled_from(["https://x.test/a.png", "https://x.test/b.png",
                        "data:image/png;base64,AAAA"])
ids = st.text("abcdef0123456789", min_size=4, max_size=8).map(lambda s: "call_" + s)
args = st.dictionaries(st.sampled_from(["path", "all", "n", "q"]),
                       st.one_of(st.integers(-5, 5), st.booleans(), texts), max_size=3)


@st.composite
def inputs(draw: st.DrawFn, shapes: Shapes) -> list[Msg]:
    """A turn's new input: one to three messages of any role but assistant's."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        role = draw(st.sampled_from(("user", *shapes.roles)))
        blocks = draw(st.lists(st.one_of(texts.map(lambda t: ("text", t)),
                                         urls.map(lambda u: ("image", u))),
                               min_size=1, max_size=3))
        out.append(Msg(role, blocks))
    return out


@st.composite
def histories(draw: st.DrawFn, shapes: Shapes) -> tuple[str | None, list[Msg]]:
    """A system prompt (or none) and a whole history: turns of input, replies of text or a
    tool call, each call answered (with an error, in a protocol that can say so)."""
    system = draw(st.none() | texts)
    history: list[Msg] = []
    for _ in range(draw(st.integers(1, 4))):
        history += draw(inputs(shapes))
        if draw(st.booleans()):
            cid, fn, a = draw(ids), draw(st.sampled_from(["ls", "cat"])), draw(args)
            history.append(Msg("assistant", [("call", cid, fn, a)]))
            extra = draw(st.lists(texts.map(lambda t: ("text", t)), max_size=1))
            history.append(shapes.result(cid, fn, draw(texts), draw(st.booleans()), extra))
        else:
            history.append(Msg("assistant", [("text", draw(texts))]))
    return system, history


def unit_keys(shapes: Shapes, body: dict[str, Any]) -> list[bytes]:
    """The history key after each unit of the request (the system prompt's first)."""
    parsed = parse_request(shapes.protocol, body)
    assert parsed is not None
    types, datas = [t for t, _ in parsed.events], [d for _, d in parsed.events]
    key, pending, out = EMPTY_KEY, 0, []
    for (type, data), starts in zip(parsed.events, units(types, datas), strict=True):
        key, pending, _ = roll(key, pending, type, data)
        if starts:
            out.append(key)
    return out


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@settings(max_examples=150, deadline=None)
@given(data=st.data(), seeds=st.tuples(st.integers(), st.integers()))
def test_every_reencoding_has_the_keys(name: str, data: st.DataObject,
                                       seeds: tuple[int, int]) -> None:
    shapes = PROTOCOLS[name]
    system, history = data.draw(histories(shapes))
    a = unit_keys(shapes, shapes.body(system, history, random.Random(seeds[0]), False))
    b = unit_keys(shapes, shapes.body(system, history, random.Random(seeds[1]), True))
    if shapes.one_unit_each:
        assert len(a) == len(history) + (system is not None)
    assert a == b


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@settings(max_examples=150, deadline=None)
@given(data=st.data(), seeds=st.tuples(st.integers(), st.integers()))
def test_no_change_keeps_the_keys(name: str, data: st.DataObject,
                                  seeds: tuple[int, int]) -> None:
    shapes = PROTOCOLS[name]
    system, history = data.draw(histories(shapes))
    at = data.draw(st.integers(0, len(history) - 1))
    offset = system is not None
    keys = unit_keys(shapes, shapes.body(system, history, random.Random(seeds[0]), False))
    for what, changed in mutations(history, at, shapes):
        if what == "a dropped message" and history[at + 1:at + 2] == [history[at]]:
            continue  # the same history as dropping the next one
        other = unit_keys(shapes, shapes.body(system, changed, random.Random(seeds[1]), False))
        if not shapes.one_unit_each:  # units are turns: the whole history is another input
            assert other[-1:] != keys[-1:], what
            continue
        # the history before the change keeps its keys, and from the change on none matches
        assert other[:at + offset] == keys[:at + offset], what
        assert not set(other[at + offset:]) & set(keys[at + offset:]), what


def test_a_system_prompt_in_each_shape_and_protocol_is_one_key() -> None:
    keys = set()
    for shapes in PROTOCOLS.values():
        for seed in range(12):
            keys.add(unit_keys(shapes, shapes.body("be brief", [Msg("user", [("text", "hi")])],
                                                   random.Random(seed), False))[-1])
    assert len(keys) == 1  # a text-only history has one key whichever protocol carried it


# -- through the real proxy ----------------------------------------------------------------

_unique = itertools.count()


def _stored_inputs(store: Store, session: str, shapes: Shapes, system: bool) -> list[Any]:
    """The input messages a session's path holds (no reply, no system prompt)."""
    nodes = list(reversed(store.log(session)))
    starts = units([n.type for n in nodes], [n.data for n in nodes])
    if shapes.raw_type is not None:
        starts = [n.type == shapes.raw_type and "systemInstruction" not in n.data
                  for n in nodes]
        system = False
    out, in_call = [], False
    for node, start in zip(nodes, starts, strict=True):
        in_call = (in_call or node.type == "step/start") and node.type != "step/end"
        if start and not in_call:
            out.append(node.data)
    return out[1:] if system else out


@st.composite
def plans(draw: st.DrawFn, shapes: Shapes) -> tuple[str | None, list[Any]]:
    """A conversation to hold: a system prompt, and per turn its new input, whether the model
    answers with a tool call, whether the call streams."""
    system = draw(st.none() | texts)
    turns = []
    for _ in range(draw(st.integers(2, 4))):
        call = (draw(ids), draw(st.sampled_from(["ls", "cat"])), json.dumps(draw(args))) \
            if draw(st.booleans()) else None
        turns.append((draw(inputs(shapes)), call, draw(st.booleans()), draw(texts),
                      draw(st.booleans())))
    return system, turns


def _post(proxy: RunningProxy, path: str, body: dict[str, Any]) -> Any:
    r = httpx.post(proxy.url + path, json=body, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _send(proxy: RunningProxy, shapes: Shapes, body: dict[str, Any],
          stream: bool = False) -> list[Msg]:
    """Send a request through the proxy; the reply, as the client appends it."""
    r = httpx.post(proxy.url + shapes.target(stream), json=body, timeout=10,
                   headers={"authorization": "Bearer sk-test-reencoding-0123456789"})
    assert r.status_code == 200, r.text
    return shapes.reply(r.text, stream)


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_reencoded_conversation_is_one_session_and_a_changed_one_diverges(
        name: str, data: st.DataObject, proxy: RunningProxy, upstream: FakeUpstream,
        store: Store) -> None:
    shapes = PROTOCOLS[name]
    system, turns = data.draw(plans(shapes))
    rnd = random.Random(data.draw(st.integers()))
    before = proxy.proxy.stats.sessions()
    misses = proxy.proxy.stats.snapshot()["prefix_misses"]
    history: list[Msg] = []
    first_sent: list[Any] = []  # each input message as the client sent it the first time
    tag = f"conversation {next(_unique)}"  # no two examples hold the same conversation
    for number, (new, call, stream, result, error) in enumerate(turns):
        if number == 0:
            new = [Msg("user", [("text", tag)]), *new]
        elif history[-1].blocks[0][0] == "call":
            last = history[-1].blocks[0]
            new = [shapes.result(last[1], last[2], result, error, []), *new]
        history += new
        if call is not None:
            upstream.add(Scripted(tool_call=call))
        body = shapes.body(system, history, rnd, stream)
        first_sent += shapes.inputs_sent(body, system is not None)[-len(new):]
        history += _send(proxy, shapes, body, stream)
    proxy.flush()
    grown = {k: v for k, v in proxy.proxy.stats.sessions().items() if before.get(k) != v}
    assert len(grown) == 1, (grown, proxy.lines[-len(turns):])
    (session, counts), = grown.items()
    assert counts["calls"] == len(turns) and counts["unmatched"] == 0, proxy.lines[-len(turns):]
    assert counts["matched"] > 0
    # a tool result is new input, not a re-sent message that missed (it was counted so)
    assert proxy.proxy.stats.snapshot()["prefix_misses"] == misses
    # what is stored of the input is each message as the client first sent it (every key and
    # value; a node's maps keep their keys sorted, as every node's do)
    assert _stored_inputs(store, session, shapes, system is not None) == first_sent

    # a change to any message the model had read makes the re-send diverge
    last_output = max(i for i, m in enumerate(history) if m.role == "assistant")
    at = data.draw(st.integers(0, last_output))
    # (the last reply dropped, or given another role, leaves the history sent before it
    # intact: a rewind and a new input, not a divergence)
    what, changed = data.draw(st.sampled_from([
        (what, changed) for what, changed in mutations(history, at, shapes)
        if at != last_output or not (what == "a dropped message" or what.startswith("role"))]))
    misses = proxy.proxy.stats.snapshot()["prefix_misses"]
    _send(proxy, shapes, shapes.body(system, changed, rnd, False))
    proxy.flush()
    assert proxy.proxy.stats.snapshot()["prefix_misses"] == misses + 1, (what, proxy.lines[-1])
    assert " did not match" in proxy.lines[-1], (what, proxy.lines[-1])


@pytest.mark.parametrize("role", ["system", "developer", "user"])
def test_a_message_resent_as_a_string_after_a_cached_block_is_one_session(
        proxy: RunningProxy, role: str) -> None:
    # Guards the case seen with a Claude Code release: a message of its history sent first
    # as one text block with a cache marker, then as a plain string, in a message of a role
    # the mapping to chat messages treated apart (its role was kept for a string only).
    first = {"role": role, "content": [{"type": "text", "text": "context: repo at HEAD",
                                        "cache_control": {"type": "ephemeral"}}]}
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the build"}, first]
    for turn in range(3):
        reply = _post(proxy, "/v1/messages", {"model": "m", "max_tokens": 9,
                                              "messages": history})
        history[1] = {"role": role, "content": "context: repo at HEAD"}
        history += [{"role": "assistant", "content": reply["content"]},
                    {"role": "user", "content": f"go on {turn}"}]
    proxy.flush()
    sessions = proxy.proxy.stats.sessions()
    assert list(sessions) == ["fix-the-build"]
    assert sessions["fix-the-build"] == {"calls": 3, "resent": 0 + 3 + 5, "matched": 8,
                                         "unmatched": 0, "divergences": 0}
    assert all(" did not match" not in line for line in proxy.lines)


@pytest.mark.parametrize("name", ["anthropic", "responses"])
@settings(max_examples=100, deadline=None)
@given(data=st.data(), seed=st.integers())
def test_a_wire_form_counts_the_messages_its_parser_derives(name: str, data: st.DataObject,
                                                            seed: int) -> None:
    # the index tells a wire form's derived messages from a message of its own by this count
    from sesstree.proxy.canonical import WIRE_FORMS
    shapes = PROTOCOLS[name]
    system, history = data.draw(histories(shapes))
    parsed = parse_request(shapes.protocol, shapes.body(system, history, random.Random(seed),
                                                        False))
    assert parsed is not None
    events = parsed.events
    for i, (type, raw) in enumerate(events):
        if type in WIRE_FORMS:
            derived = list(itertools.takewhile(lambda e: e[0] not in WIRE_FORMS,
                                               events[i + 1:]))
            assert WIRE_FORMS[type].derived(raw) == len(derived), raw


def test_a_chat_call_that_continues_an_anthropic_conversation_keys_its_own_messages(
        proxy: RunningProxy) -> None:
    # A text-only history has one key in every protocol, so a conversation can change
    # protocol; a chat message stored right after an Anthropic message (here: the reply
    # dropped, another message sent instead) is a unit of its own, not one derived from it.
    anthropic = PROTOCOLS["anthropic"]
    first = [Msg("user", [("text", "switch protocols")])]
    _send(proxy, anthropic, anthropic.body("be brief", first, random.Random(1), False))
    history = [{"role": "system", "content": "be brief"},
               {"role": "user", "content": "switch protocols"},
               {"role": "user", "content": "no, on chat"}]
    for turn in range(3):
        r = _post(proxy, "/v1/chat/completions", {"model": "m", "messages": history})
        history += [r["choices"][0]["message"], {"role": "user", "content": f"turn {turn}"}]
    proxy.flush()
    sessions = proxy.proxy.stats.sessions()
    assert sorted(sessions) == ["switch-protocols", "switch-protocols-fork-1"]
    assert sessions["switch-protocols-fork-1"]["calls"] == 3
    assert sessions["switch-protocols-fork-1"]["unmatched"] == 0, proxy.lines
