"""The web view's JSON API, over HTTP against a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

from sesstree import Store
from sesstree.store.base import ImportOrigin


def test_forest_draws_shared_prefixes_once_and_forks(client: httpx.Client, forest_store: Store) -> None:
    data = client.get("/api/v1/web/forest").json()
    assert [s["name"] for s in data["sessions"]] == ["scratch", "notes", "quest-2", "quest-1"]
    rows = data["rows"]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a node is drawn once"
    root = forest_store.log("quest-1")[-1].id
    assert ids.count(root) == 1
    heads = {s: r["id"] for r in rows for s in r["sessions"]}
    assert heads == {n: forest_store.session_head(n) for n in ("scratch", "notes", "quest-2", "quest-1")}
    forks = {r["id"] for r in rows if r["fork"]}
    assert forks == {forest_store.resolve("before-answer"), forest_store.resolve("quest-1~6")}
    tagged = [r for r in rows if r["tags"]]
    assert [r["tags"] for r in tagged] == [["before-answer"]]
    # Children come before parents, and every parent named is drawn.
    position = {r["id"]: i for i, r in enumerate(rows)}
    for r in rows:
        if r["parent"] is not None:
            assert position[r["parent"]] > position[r["id"]]
    # The edge from quest-2's head to its fork point holds the events between them.
    q2 = next(r for r in rows if r["sessions"] == ["quest-2"])
    assert q2["hidden"] + 1 == forest_store.depth("quest-2") - forest_store.depth("before-answer")
    # The newest session is on top, on the first lane, a tree of its own.
    assert rows[0]["sessions"] == ["scratch"] and rows[0]["lane"] == 0
    assert [r["separate"] for r in rows] == [False, True] + [False] * (len(rows) - 2)


def test_forest_filters_by_name_source_and_date(client: httpx.Client, forest_store: Store) -> None:
    def names(**params: str) -> list[str]:
        response = client.get("/api/v1/web/forest", params=params)
        assert response.status_code == 200, response.text
        return [s["name"] for s in response.json()["sessions"]]

    assert names(name="QUEST") == ["quest-2", "quest-1"]
    assert names(source="manual") == ["scratch"]
    assert set(names(source="agent")) == {"notes", "quest-2", "quest-1"}
    assert names(source="claude") == []
    forest_store.set_session_origin("quest-2", ImportOrigin("claude", "/tmp/x.jsonl"))
    assert names(source="claude") == ["quest-2"]
    assert names(source="import") == ["quest-2"]
    forest_store.set_session_meta("scratch", {"sesstree.source": "proxy"})
    assert names(source="proxy") == ["scratch"]
    assert names(since="2999-01-01") == []
    assert names(until="2000-01-01") == []
    assert len(names(since="2000-01-01")) == 4
    bad = client.get("/api/v1/web/forest", params={"source": "nowhere"})
    assert bad.status_code == 400 and "unknown source 'nowhere'" in bad.json()["error"]
    bad = client.get("/api/v1/web/forest", params={"since": "yesterday"})
    assert bad.status_code == 400 and bad.json() == {"error": "date 'yesterday' is not YYYY-MM-DD"}
    bad = client.get("/api/v1/web/forest", params={"offset": "x"})
    assert bad.status_code == 400 and "offset" in bad.json()["error"]


def test_session_pages_through_events_and_marks_the_run(client: httpx.Client, forest_store: Store) -> None:
    data = client.get("/api/v1/web/sessions/quest-1").json()
    assert data["depth"] == 11 and data["head"] == forest_store.session_head("quest-1")
    items = data["items"]
    assert [i["id"] for i in items] != []
    # The tool result and the loop's tool/call record fold into the assistant's call.
    asking = next(i for i in items if i["calls"])
    assert asking["calls"][0]["name"] == "read_file"
    assert "missing symbol" in asking["calls"][0]["result"]
    assert not any(i["type"] in ("tool/result", "tool/call") for i in items)
    # Folded as `sess log` folds: the turn's bookkeeping is one row at its end.
    assert not any(i["type"] in ("usage", "step/start", "step/end", "turn/start") for i in items)
    end = next(i for i in items if i["type"] == "turn/end")
    assert end["kind"] == "turn" and "1 step, 1200 in/40 out tokens" in end["text"]
    markdown = next(i for i in items if i["role"] == "user")
    assert "<strong>build</strong>" in markdown["html"]
    # Every event with ?all-events=1, as `sess log --all-events`.
    every = client.get("/api/v1/web/sessions/quest-1", params={"all-events": "1"}).json()["items"]
    usage = next(i for i in every if i["type"] == "usage")
    assert "prompt 1,200" in usage["text"]
    end = next(i for i in every if i["type"] == "turn/end")
    assert end["took"] is not None and end["took"] >= 0
    # A page of 3 ends at the head and names the node before it, to go on from.
    page = client.get("/api/v1/web/sessions/quest-1",
                      params={"limit": 3, "all-events": "1"}).json()
    assert [i["id"] for i in page["items"]] == [n.id for n in reversed(forest_store.log("quest-1", 3))]
    assert page["older"] == forest_store.resolve("quest-1~3")
    older = client.get("/api/v1/web/sessions/quest-1", params={
        "limit": 3, "end": page["older"], "all-events": "1"}).json()
    assert older["items"][-1]["id"] == page["older"] and older["at_head"] is False
    q2 = client.get("/api/v1/web/sessions/quest-2").json()["items"]
    assert [i["marked"] for i in q2 if i["marked"]] == ["interrupted", "interrupted"]
    notes = client.get("/api/v1/web/sessions/notes").json()["items"]
    assert any(i["kind"] == "compaction" and "read the log" in i["html"] for i in notes)


def test_tail_sends_what_was_appended_and_resets_after_a_rewind(client: httpx.Client,
                                                                forest_store: Store) -> None:
    head = forest_store.session_head("quest-1")
    assert client.get(f"/api/v1/web/tail/quest-1?after={head}").json() == {
        "head": head, "items": [], "reset": False, "html": ""}
    node = forest_store.session("quest-1").add_message({"role": "user", "content": "and now?"})
    tail = client.get(f"/api/v1/web/tail/quest-1?after={head}").json()
    assert tail["head"] == node.id and [i["id"] for i in tail["items"]] == [node.id]
    assert "and now?" in tail["html"] and tail["reset"] is False
    forest_store.reset("quest-1", "quest-1~3")
    assert client.get(f"/api/v1/web/tail/quest-1?after={node.id}").json()["reset"] is True


def test_node_names_parent_children_and_sessions(client: httpx.Client, forest_store: Store) -> None:
    fork = forest_store.resolve("before-answer")
    data = client.get(f"/api/v1/web/nodes/{fork[:10]}").json()
    assert data["id"] == fork and data["parent"] == forest_store.resolve("before-answer~1")
    assert data["sessions"] == ["quest-2", "quest-1"]
    assert set(data["children"]) == {forest_store.resolve("quest-1~1"), forest_store.resolve("quest-2~2")}
    assert data["tags"] == ["before-answer"] and data["type"] == "step/end"
    assert data["sessions_checked"] == 4 and "json" not in data
    missing = client.get("/api/v1/web/nodes/ffffffff")
    assert missing.status_code == 404 and "ffffffff" in missing.json()["error"]


def test_diff_reflog_and_errors(client: httpx.Client, forest_store: Store) -> None:
    d = client.get("/api/v1/web/diff", params={"a": "quest-1", "b": "quest-2"}).json()
    assert d["base"] == forest_store.resolve("before-answer")
    assert (d["only_a"], d["only_b"]) == (2, 3)
    assert [i["id"] for i in d["items_b"]] == [n.id for n in reversed(forest_store.log("quest-2", 3))]
    assert client.get("/api/v1/web/diff", params={"a": "quest-1"}).status_code == 400
    log = client.get("/api/v1/web/reflog/quest-2").json()
    assert log["entries"][-1]["reason"].startswith("branch: created from")
    assert log["entries"][0]["new"] == forest_store.session_head("quest-2")
    gone = client.get("/api/v1/web/sessions/nobody")
    assert gone.status_code == 404 and gone.json() == {"error": "no session named 'nobody'"}
    assert client.get("/api/v1/web/reflog/nobody").status_code == 404


def test_search_finds_each_node_once_with_the_sessions_that_hold_it(client: httpx.Client,
                                                                    forest_store: Store) -> None:
    page = client.get("/api/v1/web/search", params={"q": "FROBNICATE"}).json()
    assert sorted(h["type"] for h in page["hits"]) == ["assistant/message", "tool/result"]
    assert all(h["match"].lower() == "frobnicate" for h in page["hits"])
    assert page["cursor"] is None and page["mode"] == "words" and not page["case"]
    # The tool result is one node, held by quest-1 and its fork quest-2: one hit naming both.
    shared = next(h for h in page["hits"] if h["type"] == "tool/result")
    holders = {i.name for i in forest_store.sessions()
               if shared["id"] in forest_store.chain(i.head).ids}
    assert shared["session_count"] == len(holders) == 2 and shared["complete"]
    assert {p["name"] for p in shared["sessions"]} == holders
    assert shared["session"] == shared["sessions"][0]["name"]
    # Match case: the text says "frobnicate", so the capitals find nothing.
    exact = client.get("/api/v1/web/search", params={"q": "FROBNICATE", "case": "1"}).json()
    assert exact["hits"] == [] and exact["case"]
    # Pages of one go on from their cursor and together are the whole answer, once each.
    whole = [h["id"] for h in client.get("/api/v1/web/search", params={"q": "the"}).json()["hits"]]
    paged: list[str] = []
    cursor = ""
    while True:
        one = client.get("/api/v1/web/search",
                         params={"q": "the", "limit": 1, "cursor": cursor}).json()
        paged += [h["id"] for h in one["hits"]]
        if one["cursor"] is None:
            break
        cursor = one["cursor"]
    assert len(whole) > 2 and paged == whole
    # What has no word in it is searched as text, and the answer says so.
    marks = client.get("/api/v1/web/search", params={"q": "FROBNICATE!"}).json()
    assert marks["mode"] == "words" and len(marks["hits"]) == 2
    bare = client.get("/api/v1/web/search", params={"q": "**"}).json()
    assert bare["mode"] == "substring" and [h["match"] for h in bare["hits"]] == ["**"]


@pytest.mark.parametrize(("params", "says"), [
    ({"q": "x" * 1001}, "1,000"), ({"q": "a", "mode": "regex"}, "unknown search mode 'regex'"),
    ({"q": "a", "cursor": "zz"}, "cursor 'zz'")])
def test_a_search_that_cannot_be_made_is_one_400_saying_why(client: httpx.Client,
                                                            params: dict[str, str],
                                                            says: str) -> None:
    r = client.get("/api/v1/web/search", params=params)
    assert r.status_code == 400 and says in r.json()["error"], r.text
    page = client.get("/search", params=params)
    assert page.status_code == 400 and 'id="search-error"' in page.text
    assert 'name="q"' in page.text  # the form again, to mend the query


def test_a_proxy_recording_is_told_apart_and_its_cut_call_marked(client: httpx.Client,
                                                                forest_store: Store) -> None:
    s = forest_store.session("recorded")
    s.add_message({"role": "user", "content": "hi"})
    s.append("step/start", {"protocol": "openai-chat", "model": "gpt-x", "params": {}})
    s.add_message({"role": "assistant", "content": "hel"})
    s.append("step/end", {"status": 200, "finish_reason": None, "incomplete": True, "cut_by": "client"})
    s.append("step/start", {"protocol": "openai-chat", "model": "gpt-x", "params": {}})
    s.append("error", {"kind": "upstream", "status": 429, "message": "rate limited"})
    s.append("step/end", {"status": 429, "finish_reason": None})
    names = [x["name"] for x in client.get("/api/v1/web/forest?source=proxy").json()["sessions"]]
    assert names == ["recorded"]
    every = client.get("/api/v1/web/sessions/recorded?all-events=1").json()["items"]
    assert [i["text"] for i in every if i["type"] == "step/start"] == ["openai-chat call to gpt-x"] * 2
    # Folded, the calls that went wrong still stand out (a recording has no turns to sum).
    items = client.get("/api/v1/web/sessions/recorded").json()["items"]
    assert [i["type"] for i in items] == ["user/message", "assistant/message", "step/end",
                                          "error", "step/end"]
    assert [i["marked"] for i in items if i["marked"]] == ["incomplete", "error", "error"]
    error = next(i for i in items if i["type"] == "error")
    assert error["text"] == "upstream: rate limited"
    assert "(HTTP 429)" in items[-1]["text"]


def test_names_with_slashes_reach_every_view(client: httpx.Client, forest_store: Store) -> None:
    forest_store.fork("team/alice", "quest-1~2")
    head = forest_store.session_head("team/alice")
    assert client.get("/api/v1/web/sessions/team/alice").json()["head"] == head
    assert client.get(f"/api/v1/web/tail/team/alice?after={head}").json()["items"] == []
    assert client.get("/api/v1/web/reflog/team/alice").json()["name"] == "team/alice"
    assert client.get("/session/team/alice").status_code == 200
    assert 'href="/session/team/alice"' in client.get("/").text


def test_a_rewound_away_message_is_found_outside_sessions_only(client: httpx.Client,
                                                               forest_store: Store) -> None:
    s = forest_store.session("scratch")
    s.add_message({"role": "user", "content": "keep this"})
    gone = s.add_message({"role": "user", "content": "the zyzzyva plan"})
    forest_store.reset("scratch", "scratch~1")
    assert client.get("/api/v1/web/search", params={"q": "zyzzyva"}).json()["hits"] == []
    found = client.get("/api/v1/web/search", params={"q": "zyzzyva", "all": "1"}).json()
    assert [(h["id"], h["session"], h["session_count"]) for h in found["hits"]] == [
        (gone.id, None, 0)]
    assert found["everything"]
    page = client.get("/search", params={"q": "zyzzyva", "all": "1"}).text
    assert "in no session" in page and "<mark>zyzzyva</mark>" in page
