"""Deriving chat messages from events (DESIGN.md), through sessions on every backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from core_testkit import assistant, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sesstree import InvalidEventError, Store, derive_messages, make_node, repair_messages
from sesstree.events import MESSAGE_TYPES, VOCABULARY, Derived, is_registered, message_type
from sesstree.sending import ORPHAN_RESULT, PENDING_RESULT


def call(cid: str, name: str = "talk_to") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def calls(*cids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [call(c) for c in cids]}


def result(cid: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def test_plain_messages_sent_unchanged(store: Store) -> None:
    q = store.session("q")
    msgs = [
        {"role": "system", "content": "You are a guide."},
        user("hi", name="bob"),
        assistant("hello", refusal=None, extra={"k": [1, 2]}),
    ]
    for m in msgs:
        q.add_message(m)
    assert [e.type for e in q.events()] == ["system/message", "user/message", "assistant/message"]
    assert q.messages() == msgs
    assert store.messages("q") == msgs
    assert store.session("q").messages() == msgs
    assert q.derive().problems == []


def test_role_filled_in_for_typed_events_without_one(store: Store) -> None:
    q = store.session("q")
    q.append("user/message", {"content": "no role"})
    q.append("assistant/message", {"content": "neither"})
    assert q.messages() == [{"role": "user", "content": "no role"},
                            {"role": "assistant", "content": "neither"}]
    assert q.events()[0].data == {"content": "no role"}  # stored as given


def test_chunks_and_run_records_not_sent(store: Store) -> None:
    q = store.session("q")
    q.append("turn/start", {"turn": 1})
    q.add_message(user("go"))
    q.append("step/start", {"step": 1})
    q.append("assistant/chunk", {"delta": "he"})
    q.append("assistant/chunk", {"delta": "llo"})
    q.add_message(assistant("hello"))
    q.append("usage", {"prompt_tokens": 10, "completion_tokens": 2})
    q.append("error", {"message": "transient"})
    q.append("step/end", {})
    q.append("turn/end", {"reason": "stop"})
    assert q.messages() == [user("go"), assistant("hello")]
    assert len(q.events()) == 10


def test_context_and_steering_become_tagged_user_messages(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("go"))
    q.append("context/message", {"content": "The mayor is out."})
    q.append("steering/message", {"content": "Be brief."})
    q.append("context/message", {"content": {"gold": 12}})
    q.append("steering/message", "plain string")
    out = q.messages()
    assert out[0] == user("go")
    assert out[1] == {"role": "user", "content": "<context>\nThe mayor is out.\n</context>"}
    assert out[2] == {"role": "user", "content": "<steering>\nBe brief.\n</steering>"}
    assert out[3]["role"] == "user"
    assert out[3]["content"].startswith("<context>\n") and '"gold":12' in out[3]["content"]
    assert out[4] == {"role": "user", "content": "<steering>\nplain string\n</steering>"}


def test_compaction_marker_replaces_everything_before(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("a"))
    q.add_message(assistant("b"))
    q.append("compaction/marker", {"summary": "the user said a, we said b"})
    q.add_message(user("c"))
    assert q.messages() == [
        {"role": "user", "content": "<summary>\nthe user said a, we said b\n</summary>"},
        user("c"),
    ]
    assert len(q.events()) == 4  # nothing is lost from the history itself


def test_compaction_marker_with_first_kept(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("a"))
    q.add_message(assistant("b"))
    keep = q.add_message(user("c"))
    q.add_message(assistant("d"))
    q.append("compaction/marker", {"summary": "S", "first_kept": keep.id[:12]})
    q.add_message(user("e"))
    summary = {"role": "user", "content": "<summary>\nS\n</summary>"}
    assert q.messages() == [summary, user("c"), assistant("d"), user("e")]
    # a second compaction keeps working on the positions after the first
    q.append("compaction/marker", {"summary": "T", "first_kept": q.events()[-1].id})
    assert q.messages() == [{"role": "user", "content": "<summary>\nT\n</summary>"}, user("e")]


def test_tool_calls_paired_in_order(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("go"))
    q.add_message(calls("c1", "c2"))
    q.append("tool/call", {"id": "c1"})  # a record of the run, not sent
    q.add_message(result("c1", "r1"))
    q.add_message(result("c2", "r2"))
    q.add_message(assistant("done"))
    d = q.derive()
    assert d.problems == []
    assert d.messages == [user("go"), calls("c1", "c2"), result("c1", "r1"), result("c2", "r2"),
                          assistant("done")]


def test_out_of_order_results_come_back_as_stored_and_are_moved_up_to_send(store: Store) -> None:
    q = store.session("q")
    stored = [calls("c1", "c2"), result("c2", "r2"), user("interjection"), result("c1", "r1")]
    for m in stored:
        q.add_message(m)
    d = q.derive()
    assert d.problems == []
    assert d.messages == stored
    sent = q.sending_view()
    assert sent.problems == []
    assert sent.messages == [calls("c1", "c2"), result("c2", "r2"), result("c1", "r1"),
                             user("interjection")]
    assert q.messages() == stored  # the sending view changed nothing


def test_orphan_call_reported_not_invented(store: Store) -> None:
    q = store.session("q")
    stored = [calls("c1", "c2"), result("c1"), user("next")]
    for m in stored:
        q.add_message(m)
    d = q.derive()
    assert [(p.kind, p.tool_call_id) for p in d.problems] == [("orphan-call", "c2")]
    assert d.messages == stored
    sent = q.sending_view()
    assert [(p.kind, p.tool_call_id) for p in sent.problems] == [("orphan-call", "c2")]
    assert sent.messages == [
        calls("c1", "c2"),
        result("c1"),
        {"role": "tool", "tool_call_id": "c2", "content": ORPHAN_RESULT},
        user("next"),
    ]
    q.add_message(assistant("the session is still usable"))
    assert q.sending_view().messages[-1] == assistant("the session is still usable")


def test_pending_call_at_the_tail_is_not_an_orphan(store: Store) -> None:
    # Guards a past bug: a call another process is still running read back with a result
    # nobody wrote, so a user message and a call read back as three messages.
    q = store.session("q")
    q.add_message(user("go"))
    q.add_message(calls("c1", "c2"))
    assert store.session("q").messages() == [user("go"), calls("c1", "c2")]
    d = store.session("q").derive()
    assert [(p.kind, p.tool_call_id) for p in d.problems] == [
        ("pending-call", "c1"), ("pending-call", "c2")]
    q.add_message(result("c1"))
    d = store.session("q").derive()
    assert d.messages == [user("go"), calls("c1", "c2"), result("c1")]
    assert [(p.kind, p.tool_call_id) for p in d.problems] == [("pending-call", "c2")]
    sent = q.sending_view()
    assert sent.messages[-1] == {"role": "tool", "tool_call_id": "c2", "content": PENDING_RESULT}
    assert [p.kind for p in sent.problems] == ["pending-call"]


def test_orphan_result_reported_kept_and_not_sent(store: Store) -> None:
    q = store.session("q")
    stored = [user("go"), result("ghost", "boo"), calls("c1"), result("c1"), result("c1", "twice")]
    for m in stored:
        q.add_message(m)
    d = q.derive()
    assert [(p.kind, p.tool_call_id) for p in d.problems] == [
        ("orphan-result", "ghost"), ("orphan-result", "c1")]
    assert d.messages == stored
    sent = q.sending_view()
    assert [(p.kind, p.tool_call_id) for p in sent.problems] == [
        ("orphan-result", "ghost"), ("orphan-result", "c1")]
    assert sent.messages == [user("go"), calls("c1"), result("c1")]


def test_consecutive_user_messages_joined_only_when_sending(store: Store) -> None:
    q = store.session("q")
    stored = [user("a"), user("b"), assistant("x"),
              {"role": "user", "content": [{"type": "text", "text": "c"}]}, user("d"),
              user("e", name="bob"), user("f", name="eve")]
    for m in stored:
        q.add_message(m)
    q.append("steering/message", {"content": "hurry"})
    assert q.messages()[:-1] == stored
    sent = q.sending_view()
    assert sent.messages == [
        user("a\n\nb"), assistant("x"),
        {"role": "user", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]},
        # two names (or a name and none): joining would lose one, so they stay apart
        user("e", name="bob"),
        user("f", name="eve"),
        {"role": "user", "content": "<steering>\nhurry\n</steering>"},
    ]
    assert [p.kind for p in sent.problems] == ["merged-user", "merged-user"]


def test_unknown_roles_and_extra_keys_untouched(store: Store) -> None:
    q = store.session("q")
    odd = [
        {"role": "critic", "content": "meh", "score": 3},
        {"role": "developer", "content": "rules", "x": {"nested": [None, True]}},
        {"content": "no role at all"},
        user("u", metadata={"b": 1, "a": 2}, cache_control={"type": "ephemeral"}),
        {"role": "assistant", "content": [{"type": "text", "text": "parts"}], "reasoning": "r"},
    ]
    for m in odd:
        q.add_message(m)
    assert [e.type for e in q.events()] == [
        "message", "message", "message", "user/message", "assistant/message"]
    assert q.messages() == odd
    assert store.session("q").messages() == odd


def test_message_type_by_role() -> None:
    assert message_type({"role": "system"}) == "system/message"
    assert message_type({"role": "tool"}) == "tool/result"
    assert message_type({"role": "wizard"}) == "message"
    assert message_type({"role": 3}) == "message"
    with pytest.raises(InvalidEventError):
        message_type(["not", "a", "dict"])


def test_registered_type_with_renderer(store: Store, registry: Callable[..., None]) -> None:
    registry("myapp/note", lambda d: {"role": "user", "content": "note: " + d["text"]})
    registry("myapp/silent-render", lambda d: None)
    q = store.session("q")
    q.add_message(user("a"))
    q.append("myapp/note", {"text": "remember the key"})
    q.append("myapp/silent-render", {"x": 1})
    assert q.messages() == [user("a"), {"role": "user", "content": "note: remember the key"}]
    assert [e.type for e in store.session("q").events()][1:] == [
        "myapp/note", "myapp/silent-render"]


def test_registered_type_without_renderer(store: Store, registry: Callable[..., None]) -> None:
    registry("myapp/bookmark")
    q = store.session("q")
    q.add_message(user("a"))
    q.append("myapp/bookmark", {"label": "here"})
    assert q.messages() == [user("a")]
    assert store.show("q").data == {"label": "here"}


def test_unregistered_type_refused(store: Store) -> None:
    q = store.session("q")
    q.add_message(user("a"))
    head, nodes = q.head, store.backend.count_nodes()
    for bad in ("myapp/never-registered", "user", "", "User/Message"):
        with pytest.raises(InvalidEventError):
            q.append(bad, {"x": 1})
    assert q.head == head == store.session_head("q")
    assert store.backend.count_nodes() == nodes


def test_non_json_data_refused_on_append(store: Store) -> None:
    q = store.session("q")
    with pytest.raises(InvalidEventError):
        q.append("usage", {"x": object()})
    with pytest.raises(InvalidEventError):
        q.add_message({"role": "user", 1: "int key"})  # type: ignore[dict-item]
    assert not store.has_session("q")
    assert store.backend.count_nodes() == 0


def test_register_rules(registry: Callable[..., None]) -> None:
    for builtin in sorted(VOCABULARY)[:3]:
        with pytest.raises(InvalidEventError):
            registry(builtin)
    for bad in ("nonamespace", "Upper/case", "a/", "/b", "a b/c", "-a/b"):
        with pytest.raises(InvalidEventError):
            registry(bad)
    assert not is_registered("myapp/later")
    registry("myapp/later")
    assert is_registered("myapp/later")
    registry("myapp/later", lambda d: {"role": "user", "content": "again"})  # replaces
    assert derive_messages(["myapp/later"], [{}]).messages == [{"role": "user", "content": "again"}]


def test_derive_keeps_stored_order_and_repair_moves_results_up() -> None:
    types = ["assistant/message", "user/message", "tool/result"]
    datas = [calls("c1"), user("x"), result("c1")]
    raw = derive_messages(types, datas)
    assert raw.messages == datas and raw.problems == []
    repaired = derive_messages(types, datas, repair=True)
    assert repaired.messages == [calls("c1"), result("c1"), user("x")]
    assert repair_messages(datas).messages == repaired.messages


def test_the_sending_view_does_not_check_pairs_it_then_throws_away(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The view reports its own changes; the exact pass's pairing check (a second walk of
    # every message, on each agent step) was computed and dropped.
    import sesstree.events as events

    types = ["tool/result", "assistant/message", "user/message", "tool/result"]
    datas = [result("gone"), calls("c1"), user("x"), result("c1")]
    exact = derive_messages(types, datas)
    assert [p.kind for p in exact.problems] == ["orphan-result"]

    def refused(messages: Any) -> Any:
        raise AssertionError("the exact pairing check ran for the sending view")

    monkeypatch.setattr(events, "find_problems", refused)
    repaired = derive_messages(types, datas, repair=True)
    assert repaired == repair_messages(exact.messages)
    assert events.derive_exact(types, datas, problems=False) == events.Derived(exact.messages, [])


def test_the_exact_derivation_knows_nothing_of_the_sending_view() -> None:
    """events is the lower layer: the sending view builds on it, never the other way."""
    import sesstree
    import sesstree.events as events

    source = Path(events.__file__).read_text()
    assert "sending" not in "".join(line for line in source.splitlines() if "import" in line)
    types, datas = ["assistant/message"], [calls("c1")]
    assert events.derive_exact(types, datas) == sesstree.derive_messages(types, datas)
    assert sesstree.derive_messages is sesstree.sending.derive_messages


def test_derive_returns_messages_for_every_builtin(store: Store) -> None:
    """Derivation never crashes on odd data, whatever wrote it (message events with data that
    is not an object are refused by append, so they are written at the node level here)."""
    nodes = []
    parent = None
    for t in sorted(VOCABULARY):
        for data in ({"content": "x"}, "str", 3, None, [1]):
            node = make_node(parent, t, data)
            nodes.append(node)
            parent = node.id
    store.write(nodes)
    d = store.derive(nodes[-1].id)
    assert isinstance(d.messages, list)
    assert all(isinstance(m, dict) for m in d.messages)


def test_compaction_marker_with_a_message_sends_that_message() -> None:
    """A marker that carries the message its tool sent is replaced by exactly that message."""
    kept = {"role": "user", "content": "Summary, as the tool wrote it"}
    derived = derive_messages(
        ["user/message", "assistant/message", "compaction/marker", "user/message"],
        [
            {"role": "user", "content": "old"},
            {"role": "assistant", "content": "old reply"},
            {"summary": "short", "message": kept},
            {"role": "user", "content": "new"},
        ],
    )
    assert derived.messages == [kept, {"role": "user", "content": "new"}]


@pytest.mark.parametrize("type", sorted(MESSAGE_TYPES))
def test_message_events_must_hold_an_object(store: Store, type: str) -> None:
    """A message event with data that is not an object would vanish from the history: refused."""
    q = store.session("q")
    with pytest.raises(InvalidEventError, match="JSON object"):
        q.append(type, [1, 2])
    assert store.session_head("q") is None


def test_a_message_event_must_match_its_role(store: Store) -> None:
    """An assistant/message holding a user message would be sent as something it is not."""
    q = store.session("q")
    with pytest.raises(InvalidEventError, match="user/message"):
        q.append("assistant/message", {"role": "user", "content": "hi"})
    with pytest.raises(InvalidEventError, match="message"):
        q.append("user/message", {"role": "developer", "content": "x"})
    assert store.session_head("q") is None
    q.append("message", {"role": "developer", "content": "x"})  # other roles: type message
    q.append("user/message", {"content": "no role: the type gives it"})
    assert [m["role"] for m in q.messages()] == ["developer", "user"]


def test_compaction_keeps_the_system_prompt() -> None:
    system = {"role": "system", "content": "You are a guide."}
    derived = derive_messages(
        ["system/message", "user/message", "assistant/message", "compaction/marker", "user/message"],
        [system, user("old"), assistant("old reply"), {"summary": "they talked"}, user("new")],
    )
    assert derived.messages == [
        system, {"role": "user", "content": "<summary>\nthey talked\n</summary>"}, user("new")]


# -- the fast path: a history of plain messages is its payloads -------------------------------

_CALL_IDS = st.one_of(st.sampled_from(["c1", "c2", "c3"]), st.integers(0, 2), st.none(),
                      st.just(["not", "hashable"]))
_ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer"])
_TEXT = st.text("ab ", max_size=4)
_NOT_AN_OBJECT = st.one_of(st.none(), st.integers(), _TEXT, st.lists(st.integers(), max_size=2))


class _Subclass(dict):  # type: ignore[type-arg]
    """An object that is not exactly a dict: the per-event path leaves it out."""


def _with_role(body: st.SearchStrategy[dict[str, Any]], role: st.SearchStrategy[str]
               ) -> st.SearchStrategy[dict[str, Any]]:
    """``body`` with a role, with none, or with some other role."""
    return st.tuples(body, st.one_of(role, _ROLES, st.none())).map(
        lambda br: br[0] if br[1] is None else {"role": br[1], **br[0]})


def _message(role: str) -> st.SearchStrategy[Any]:
    plain = st.fixed_dictionaries({"content": _TEXT})
    calls = st.fixed_dictionaries({"content": st.none(), "tool_calls": st.one_of(
        st.lists(st.one_of(st.fixed_dictionaries({"id": _CALL_IDS}), _TEXT), max_size=3),
        _TEXT)})
    result = st.fixed_dictionaries({"tool_call_id": _CALL_IDS, "content": _TEXT})
    body = {"assistant": st.one_of(plain, calls), "tool": result}.get(role, plain)
    return st.one_of(_with_role(body, st.just(role)), _NOT_AN_OBJECT,
                     body.map(lambda b: _Subclass(role=role, **b)))


_MESSAGE_DATA = {"system/message": _message("system"), "user/message": _message("user"),
                 "assistant/message": _message("assistant"), "tool/result": _message("tool"),
                 "message": _message("developer")}
_MARKER = st.one_of(st.fixed_dictionaries({"summary": _TEXT}, optional={
    "first_kept": st.text("ab", max_size=2), "message": _with_role(
        st.fixed_dictionaries({"content": _TEXT}), _ROLES)}), _NOT_AN_OBJECT)
_RECORDS = ["turn/start", "turn/end", "step/start", "step/end", "usage", "error", "tool/call",
            "assistant/chunk", "myapp/bookmark", "myapp/unregistered"]
_ANY = st.one_of(st.fixed_dictionaries({"content": _TEXT}), _NOT_AN_OBJECT, _MESSAGE_DATA["tool/result"])


def _events(types: list[str]) -> st.SearchStrategy[list[tuple[str, Any]]]:
    data = {**_MESSAGE_DATA, "compaction/marker": _MARKER}
    return st.lists(st.sampled_from(types).flatmap(
        lambda t: st.tuples(st.just(t), data.get(t, _ANY))), max_size=12)


#: Histories the fast path takes (messages, records between them), ones it must not (an
#: extension event that renders a message, every rule), and ones in between.
_HISTORIES = st.one_of(
    _events(sorted(MESSAGE_TYPES)),
    _events([*sorted(MESSAGE_TYPES), *_RECORDS]),
    _events([*sorted(MESSAGE_TYPES), "myapp/note"]),
    _events([*sorted(VOCABULARY), *_RECORDS, "myapp/note"]),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=400)
@given(events=_HISTORIES, id_letters=st.lists(st.text("ab", min_size=1, max_size=3), min_size=12))
def test_the_fast_path_derives_what_the_per_event_path_does(
        registry: Callable[..., None], events: list[tuple[str, Any]], id_letters: list[str]) -> None:
    """On any mix of events and payloads, ``derive_exact`` (which takes the fast path when it
    can) gives exactly the messages and problems of the per-event path, and the messages do
    not depend on whether problems were asked for."""
    import sesstree.events as events_module

    registry("myapp/bookmark")
    registry("myapp/note", lambda d: d if isinstance(d, dict) and "role" in d else None)
    types, datas = [t for t, _ in events], [d for _, d in events]
    ids = id_letters[: len(events)]
    for given_ids in (None, ids, lambda: ids):
        each = events_module._derive_each(types, datas, given_ids, True)
        assert events_module.derive_exact(types, datas, given_ids) == each
        assert events_module.derive_exact(types, datas, given_ids, problems=False) == (
            events_module._derive_each(types, datas, given_ids, False)) == Derived(each.messages, [])


def test_plain_messages_are_derived_without_the_per_event_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages with their roles, with records of the run between them, are the history as
    they are: the same objects, in a new list; the per-event path is not run for them."""
    import sesstree.events as events

    datas = [user("hi"), calls("c1"), result("c1"), calls("c2")]
    types = [message_type(m) for m in datas]
    with_records = (["turn/start", *types, "usage"], [{}, *datas, {}])
    expected = [events.derive_exact(*history).messages for history in ((types, datas), with_records)]

    def refused(*args: Any) -> Any:
        raise AssertionError("the per-event path ran for plain messages")

    monkeypatch.setattr(events, "_derive_each", refused)
    for history, messages in zip(((types, datas), with_records), expected, strict=True):
        derived = events.derive_exact(*history, problems=False)
        assert derived == Derived(messages, []) and derived.messages == datas
        assert derived.messages is not datas
        assert all(a is b for a, b in zip(derived.messages, datas, strict=True))


def test_a_tool_call_id_that_is_not_a_string_is_a_problem_not_a_crash() -> None:
    """An id that cannot be hashed (a list) made the pairing check raise TypeError: now the
    full check reads it, as it reads every id, as text."""
    types = ["assistant/message", "tool/result"]
    call = {"role": "assistant", "tool_calls": [{"id": ["x"]}]}
    answered = derive_messages(types, [call, {"role": "tool", "tool_call_id": ["x"]}])
    assert answered.problems == []
    other = derive_messages(types, [call, {"role": "tool", "tool_call_id": ["y"]}])
    assert [(p.kind, p.tool_call_id) for p in other.problems] == [
        ("orphan-result", "['y']"), ("pending-call", "['x']")]
