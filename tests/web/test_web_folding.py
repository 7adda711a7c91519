"""The session and diff pages fold each turn's bookkeeping as ``sess log`` does (one rule,
``sesstree.repo.folding``), unfold with ``?all-events=1``, begin a page at a turn's start, keep a
live turn summed, say where a time comes from; search snippets keep the spaces beside the
match and mark only a cut."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from forest_kit import serve
from reading_kit import quest, streamed

import sesstree.interop.claude  # noqa: F401 - registers the claude/* record types
from sesstree import Store, open_store
from sesstree.repo.folding import fold_turns


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[tuple[Store, httpx.Client]]:
    """A store holding a streamed session ``chat`` of four turns, and a client of its view."""
    streamed(tmp_path / "s", turns=4)
    with open_store(tmp_path / "s") as store, serve(store) as url, \
            httpx.Client(base_url=url, timeout=10) as client:
        yield store, client


def test_a_streamed_session_shows_its_messages_and_one_row_per_turn(
        chat: tuple[Store, httpx.Client]) -> None:
    store, client = chat
    events = store.log("chat")[::-1]
    assert sum(n.type == "assistant/chunk" for n in events) >= 60
    items = client.get("/api/v1/web/sessions/chat").json()["items"]
    assert not any(i["type"] in ("assistant/chunk", "usage", "step/start", "step/end",
                                 "turn/start", "tool/call") for i in items)
    turns = [i for i in items if i["kind"] == "turn"]
    rows = [r for r in fold_turns(events, {}) if r.turn is not None]
    assert [t["id"] for t in turns] == [r.node.id for r in rows] and len(turns) == 4
    starts = {}
    opened = None
    for n in events:
        opened = n.id if n.type == "turn/start" else opened
        starts[n.id] = opened
    for t, r in zip(turns, rows, strict=True):  # the turn says what `sess log` says of it
        assert r.turn is not None and t["text"].startswith(r.turn.line())
        assert t["turn"] == starts[r.node.id]  # the start of the turn it sums
    assert next(i["role"] for i in items if i["kind"] == "message") == "user"
    every = client.get("/api/v1/web/sessions/chat", params={"all-events": "1"}).json()["items"]
    assert sum(i["type"] == "assistant/chunk" for i in every) >= 60
    words = [i["text"] for i in every if i["type"] == "turn/start"]
    assert words == ["turn started (user)"] * 4  # words, not a Python dict
    html = client.get("/session/chat").text
    assert 'id="unfold"' in html and "all-events=1" in html and "assistant/chunk" not in html
    assert 'id="fold"' in client.get("/session/chat?all-events=1").text


def test_a_page_of_a_long_session_begins_at_a_turn_with_its_prompt(
        chat: tuple[Store, httpx.Client]) -> None:
    store, client = chat
    for limit in (5, 30, 60):
        page = client.get("/api/v1/web/sessions/chat", params={"limit": limit}).json()
        first = page["items"][0]
        assert first["role"] == "user", (limit, first)
        older = page["older"]
        assert older is not None and store.show(older).type == "turn/end"
        # The page before it ends where this one begins: nothing is skipped.
        before = client.get("/api/v1/web/sessions/chat",
                            params={"limit": limit, "end": older}).json()
        assert before["items"][-1]["id"] == older and before["items"][0]["role"] == "user"
    html = client.get("/session/chat?limit=30").text
    assert html.index('class="item k-message r-user') < html.index("k-turn")


def test_the_live_tail_sums_a_turn_in_the_light_of_its_start(
        chat: tuple[Store, httpx.Client]) -> None:
    store, client = chat
    s = store.session("chat")
    start = s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": "Once more?"})
    s.append("step/start", {"step": 1})
    after = s.append("assistant/chunk", {"content": "Yes"}).id
    page = client.get("/api/v1/web/sessions/chat").json()["items"]
    assert page[-2]["kind"] == "turn" and page[-2]["turn"] == start.id  # shown unfinished
    assert page[-2]["marked"] == "unfinished" and page[-1]["role"] == "user"
    s.add_message({"role": "assistant", "content": "Yes, once more."})
    s.append("usage", {"model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 2}})
    s.append("step/end", {"step": 1, "finish_reason": "stop"})
    end = s.append("turn/end", {"reason": {"kind": "answer"}})
    tail = client.get(f"/api/v1/web/tail/chat?after={after}").json()
    assert [i["kind"] for i in tail["items"]] == ["message", "turn"]
    row = tail["items"][-1]
    assert row["id"] == end.id and row["turn"] == start.id  # replaces the unfinished row
    assert row["text"].startswith("turn: answer (stop), 1 step, 7 in/2 out tokens")
    assert f'data-turn="{start.id}"' in tail["html"]
    every = client.get(f"/api/v1/web/tail/chat?after={after}&all-events=1").json()["items"]
    assert [i["type"] for i in every] == ["assistant/message", "usage", "step/end", "turn/end"]


def test_the_diff_page_folds_each_side(tmp_path: Path) -> None:
    with open_store(quest(tmp_path)) as store, serve(store) as url, \
            httpx.Client(base_url=url, timeout=10) as client:
        d = client.get("/api/v1/web/diff", params={"a": "quest-1", "b": "quest-2"}).json()
        for side in ("items_a", "items_b"):
            types = {i["type"] for i in d[side]}
            assert types <= {"user/message", "assistant/message", "tool/result", "turn/end"}
            assert [i["kind"] for i in d[side]].count("turn") == 1
        assert d["items_b"][0]["role"] == "user" and "another way" in d["items_b"][0]["html"]
        every = client.get("/api/v1/web/diff", params={"a": "quest-1", "b": "quest-2",
                                                        "all-events": "1"}).json()
        assert len(every["items_b"]) > len(d["items_b"])
        assert {"step/start", "usage", "step/end"} <= {i["type"] for i in every["items_b"]}
        html = client.get("/diff", params={"a": "quest-1", "b": "quest-2"}).text
        assert 'id="unfold"' in html and "step/start" not in html


def test_times_are_the_events_own_or_the_stores_labelled(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        s = store.session("t")
        first = s.add_message({"role": "user", "content": "one"})
        time.sleep(0.05)
        second = s.add_message({"role": "assistant", "content": "two"})
        # (When the store recorded each node: kept with it, format 6, to the millisecond.)
        recorded = store.recorded([first.id, second.id])
        assert abs(recorded[second.id] - store.reflog("t")[-1].time) < 0.001
        time.sleep(0.05)
        store.reset("t", first.id)  # back and forth again: neither records anything
        store.reset("t", second.id)
        # An importer's record carries the time the tool wrote; its message follows it.
        s.append("claude/user", {"type": "user", "timestamp": "2025-06-02T18:51:00.000Z"})
        derived = s.add_message({"role": "user", "content": "from a transcript"})
        with serve(store) as url, httpx.Client(base_url=url, timeout=10) as client:
            items = {i["id"]: i for i in client.get("/api/v1/web/sessions/t").json()["items"]}
            html = client.get("/session/t").text
    assert items[second.id]["time"] == recorded[second.id]  # when it was written, not reset
    assert items[second.id]["time_from"] == "reflog"
    assert items[derived.id]["time"] == 1748890260.0 and items[derived.id]["time_from"] == "event"
    assert "stored " in html and "18:51:00" in html and "carries no time of its own" in html


def test_search_snippets_keep_the_spaces_beside_the_match(tmp_path: Path) -> None:
    long = "word " * 60 + "the key is here " + "word " * 60
    with open_store(tmp_path / "s") as store:
        store.session("a").add_message(
            {"role": "user", "content": "Suppose the key doesn't fit."})
        store.session("b").add_message({"role": "user", "content": long})
        with serve(store) as url, httpx.Client(base_url=url, timeout=10) as client:
            hits = {h["session"]: h for h in client.get(
                "/api/v1/web/search", params={"q": "key"}).json()["hits"]}
            html = client.get("/search", params={"q": "key"}).text
    whole = hits["a"]
    assert (whole["before"], whole["match"], whole["after"]) == ("Suppose the ", "key",
                                                                  " doesn't fit.")
    cut = hits["b"]
    assert cut["before"].startswith("…") and cut["before"].endswith("the ")
    assert cut["after"].startswith(" is here") and cut["after"].endswith("…")
    assert "Suppose the <mark>key</mark> doesn" in html


@pytest.mark.parametrize("bogus", [1e30, -1e12, 2**63, "0001-01-01T00:00:00+14:00",
                                   "2999-01-01T00:00:00Z", "yesterday", [2025]])
def test_a_time_no_clock_could_have_written_is_the_stores(tmp_path: Path, bogus: object) -> None:
    # An imported record's timestamp is whatever the file said: out of range, before 1970,
    # later than now. The page neither fails nor shows it: the event is dated by the store.
    with open_store(tmp_path / "s") as store:
        s = store.session("t")
        s.append("claude/user", {"type": "user", "timestamp": bogus})
        message = s.add_message({"role": "user", "content": "from a transcript"})
        recorded = store.recorded([message.id])
        with serve(store) as url, httpx.Client(base_url=url, timeout=10) as client:
            page = client.get("/session/t")
            every = client.get("/session/t", params={"all-events": "1"})
            items = {i["id"]: i for i in client.get("/api/v1/web/sessions/t").json()["items"]}
            raw = client.get("/api/v1/web/sessions/t", params={"all-events": "1"}).json()
    assert page.status_code == 200 and every.status_code == 200
    assert "from a transcript" in page.text and "the event's own time" not in every.text
    assert [i["time_from"] for i in raw["items"]] == ["reflog", "reflog"]
    assert items[message.id]["time_from"] == "reflog"
    assert items[message.id]["time"] == recorded[message.id]


def test_a_snippet_marks_the_match_where_case_folding_changes_lengths(tmp_path: Path) -> None:
    # "ß" folds to "ss" and "İ" to two code points: the match is found in the folded text
    # but marked in the text as written. An accent written as a combining mark stays on its
    # letter; what the message holds of HTML is text, inside the match and beside it.
    messages = {
        "a": "Straße, große Maße: the Key <b>opens</b> it",
        "b": "İİİ the KEY",  # the match at the very end
        "c": "STRASSE first",  # the query folds to what a longer text folds to
        "d": "cafe\u0301 <script>x</script> café",  # a combining acute accent
    }
    with open_store(tmp_path / "s") as store:
        for name, text in messages.items():
            store.session(name).add_message({"role": "user", "content": text})
        with serve(store) as url, httpx.Client(base_url=url, timeout=10) as client:
            def hits(q: str) -> dict[str, tuple[str, str, str]]:
                return {h["session"]: (h["before"], h["match"], h["after"]) for h in client.get(
                    "/api/v1/web/search", params={"q": q}).json()["hits"]}
            key, strasse, cafe = hits("key"), hits("straße"), hits("cafe")
            html = client.get("/search", params={"q": "key"}).text
    assert key["a"] == ("Straße, große Maße: the ", "Key", " <b>opens</b> it")
    assert key["b"] == ("İİİ the ", "KEY", "")
    assert strasse["a"] == ("", "Straße", ", große Maße: the Key <b>opens</b> it")
    assert strasse["c"] == ("", "STRASSE", " first")
    assert cafe["d"] == ("", "cafe\u0301", " <script>x</script> café")
    assert "the <mark>Key</mark> &lt;b&gt;opens&lt;/b&gt; it" in html


def _counting_chain(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of nodes each ``store.chain`` call reads, in order."""
    reads: list[int] = []
    chain = store.chain

    def counted(rev: Any, limit: int | None = None) -> Any:
        out = chain(rev, limit)
        reads.append(len(out))
        return out

    monkeypatch.setattr(store, "chain", counted)
    return reads


@pytest.mark.parametrize("kind", ["imported", "proxy"])
def test_a_session_with_no_turns_is_paged_as_unfolded(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # An import holds the tool's raw records beside the messages, a proxy's session a
    # step/start and step/end around each call: bookkeeping, but of no turn. A page of one is
    # the newest events, not the whole session read back for a turn's start that is not there.
    with open_store(tmp_path / "s") as store:
        events: list[tuple[str, Any]] = []
        for i in range(1500):
            if kind == "imported":
                events += [("claude/user", {"type": "user", "timestamp": "2025-06-02T18:51:00Z"}),
                           ("user/message", {"role": "user", "content": f"message {i}"})]
            else:
                events += [("step/start", {"step": 1}),
                           ("user/message", {"role": "user", "content": f"message {i}"}),
                           ("step/end", {"step": 1, "finish_reason": "stop"})]
        store.session("s").extend(events)
        with serve(store) as url, httpx.Client(base_url=url, timeout=30) as client:
            folded = client.get("/api/v1/web/sessions/s", params={"limit": "200"}).json()
            every = client.get("/api/v1/web/sessions/s",
                               params={"limit": "200", "all-events": "1"}).json()
    assert folded["first"] == every["first"] == len(events) - 199
    assert folded["older"] == every["older"]
    texts = [i["html"] for i in folded["items"] if i["kind"] == "message"]
    assert "message 1499" in texts[-1] and 60 <= len(texts) <= 100
    assert not any(i["kind"] == "turn" for i in folded["items"])


def test_a_live_poll_inside_a_long_turn_reads_only_what_is_new(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.web.views import Views

    with open_store(tmp_path / "s") as store:
        s = store.session("chat")
        s.append("turn/start", {"trigger": {"kind": "user"}})
        s.add_message({"role": "user", "content": "write a long story"})
        s.extend([("assistant/chunk", {"delta": f"word {i} "}) for i in range(3000)])
        seen = store.session_head("chat")
        assert seen is not None
        s.extend([("assistant/chunk", {"delta": "more "}) for _ in range(3)])
        views = Views(store)
        reads = _counting_chain(store, monkeypatch)
        running = views.tail("chat", seen)
        assert running["items"] == [] and not running["reset"]
        assert sum(reads) <= 10, reads  # the three new events, not the turn read back
        seen = running["head"]
        s.add_message({"role": "assistant", "content": "Once upon a time."})
        s.append("usage", {"model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 3003}})
        s.append("turn/end", {"reason": {"kind": "answer"}})
        ended = views.tail("chat", seen)["items"]
        start = store.log("chat")[-1].id
    assert [i.kind for i in ended] == ["message", "turn"]
    assert "7 in/3003 out tokens" in ended[-1].text  # summed with the part read before
    assert ended[-1].turn == start


def test_a_page_inside_a_turn_begun_beyond_reach_is_not_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A reply streamed as more chunks than a page reads back for the turn's start: each of
    # its pages folds to nothing, and shows its events as they are rather than a blank page.
    from sesstree.web import views

    monkeypatch.setattr(views, "TURN_READ", 300)
    with open_store(tmp_path / "s") as store:
        s = store.session("chat")
        s.append("turn/start", {"trigger": {"kind": "user"}})
        s.add_message({"role": "user", "content": "write a long story"})
        s.extend([("assistant/chunk", {"delta": f"word {i} "}) for i in range(1000)])
        page = views.Views(store).session("chat", None, 100)
        first = views.Views(store).session("chat", "chat~950", 100)
    assert [i.type for i in page["items"]] == ["assistant/chunk"] * 100
    assert page["first"] == 1002 - 99
    assert [i.kind for i in first["items"]] == ["turn", "message"]  # its start in reach
    assert first["items"][0].marked == "unfinished"


def test_a_diff_whose_sides_part_inside_one_turn_shows_their_events(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        s = store.session("a")
        s.append("turn/start", {"trigger": {"kind": "user"}})
        s.add_message({"role": "user", "content": "write a story"})
        store.fork("b", "a")
        s.extend([("assistant/chunk", {"delta": "a-side "}) for _ in range(2)])
        store.session("b").extend([("assistant/chunk", {"delta": "b-side "}) for _ in range(3)])
        with serve(store) as url, httpx.Client(base_url=url, timeout=10) as client:
            d = client.get("/api/v1/web/diff", params={"a": "a", "b": "b"}).json()
            html = client.get("/diff", params={"a": "a", "b": "b"}).text
    assert [i["type"] for i in d["items_a"]] == ["assistant/chunk"] * 2
    assert [i["type"] for i in d["items_b"]] == ["assistant/chunk"] * 3
    assert html.count("b-side") >= 3
