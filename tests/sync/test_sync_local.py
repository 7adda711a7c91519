"""Sync between two SQLite stores opened in-process: clone, fetch, pull, push, negotiation."""

from __future__ import annotations

from pathlib import Path

import pytest
from sync_kit import all_ids, grow, refs_of

from sesstree import PushRejectedError, RemoteError, Store, open_store, sync
from sesstree.sync import add_remote, clone, list_remotes, remove_remote
from sesstree.sync.remotes import remotes_file


@pytest.fixture
def origin(tmp_path: Path) -> Store:
    s = open_store(tmp_path / "origin")
    grow(s, "main", 30)
    grow(s, "side", 5, start="main~10")
    s.tag("v1", "main~3")
    yield s
    s.close()


@pytest.fixture
def mine(tmp_path: Path, origin: Store) -> Store:
    s = clone(tmp_path / "origin", tmp_path / "mine")
    yield s
    s.close()


def test_clone_has_the_same_ids_sessions_and_tags(origin: Store, mine: Store) -> None:
    assert refs_of(mine) == refs_of(origin)
    assert all_ids(mine) == all_ids(origin)
    assert mine.fsck() == [] and origin.fsck() == []
    assert [r.name for r in list_remotes(mine)] == ["origin"]
    # Remote-tracking refs, readable as REMOTE/NAME wherever a revision is.
    assert mine.resolve("origin/side") == origin.session_head("side")
    assert [n.id for n in mine.log("origin/main", limit=3)] == \
        [n.id for n in origin.log("main", limit=3)]
    assert mine.diff("origin/main", "origin/side").base == origin.resolve("main~10")
    assert mine.fork("copy", "origin/side~1").head == origin.resolve("side~1")


def test_clone_checks_out_main_or_else_the_first_session(tmp_path: Path, origin: Store,
                                                       mine: Store) -> None:
    assert mine.head() == ("main", origin.session_head("main"))
    other = open_store(tmp_path / "no-main")
    grow(other, "zeta", 2)
    grow(other, "alpha", 1)
    other.close()
    with clone(tmp_path / "no-main", tmp_path / "copy") as copy:
        assert copy.head()[0] == "alpha"


def test_clone_refuses_a_store_with_sessions(tmp_path: Path, origin: Store) -> None:
    other = open_store(tmp_path / "other")
    grow(other, "x", 1)
    other.close()
    with pytest.raises(RemoteError, match="already holds"):
        clone(tmp_path / "origin", tmp_path / "other")


def test_push_sends_only_what_is_missing_in_three_round_trips(origin: Store, mine: Store,
                                                               tmp_path: Path) -> None:
    before = origin.backend.count_nodes()
    grow(mine, "main", 1, text="new")
    result = sync.push(mine, "origin", ["main"])
    assert (result.nodes, result.round_trips) == (1, 3)
    assert origin.session_head("main") == mine.session_head("main")
    assert origin.backend.count_nodes() == before + 1
    assert mine.resolve("origin/main") == mine.session_head("main")
    # Nothing new: one round trip to read the refs, nothing sent.
    again = sync.push(mine, "origin", ["main"])
    assert (again.nodes, again.round_trips) == (0, 1)
    assert again.results[0].status == "up-to-date"


def test_forks_share_their_prefix_on_the_wire(origin: Store, mine: Store) -> None:
    base = grow(mine, "long", 200, start="main")
    grow(mine, "fork-a", 3, start=base)
    grow(mine, "fork-b", 4, start="long~50")
    result = sync.push(mine, "origin", ["long", "fork-a", "fork-b"])
    # 200 + 3 + 4 distinct nodes, each sent once.
    assert result.nodes == 207
    assert origin.fsck() == []
    assert origin.session_head("fork-b") == mine.session_head("fork-b")


def test_fetch_of_nothing_new_is_one_round_trip(mine: Store) -> None:
    assert sync.fetch(mine, "origin").round_trips == 1


def test_fetch_moves_tracking_refs_and_prunes_gone_sessions(origin: Store, mine: Store) -> None:
    head = grow(origin, "main", 2)
    origin.delete_session("side")
    grow(origin, "fresh", 1)
    result = sync.fetch(mine, "origin")
    assert result.nodes == 3
    assert mine.resolve("origin/main") == head
    assert mine.has_session("side")  # the local session is kept
    with pytest.raises(Exception, match="unknown revision"):
        mine.resolve("origin/side")
    assert mine.resolve("origin/fresh") == origin.session_head("fresh")
    # Every move of a tracking ref is in the reflog: the deleted one can be read back.
    assert mine.resolve("origin/side@{1}") == mine.session_head("side")


def test_pull_fast_forwards_and_refuses_a_divergence(origin: Store, mine: Store) -> None:
    head = grow(origin, "main", 2)
    result = sync.pull(mine, "origin", ["main"])
    assert result.sessions == [("main", "fast-forward", head and origin.resolve("main~2"), head)]
    assert mine.session_head("main") == head
    base = head
    grow(origin, "main", 1, text="theirs")
    mine_head = grow(mine, "main", 2, text="ours")
    with pytest.raises(RemoteError) as info:
        sync.pull(mine, "origin", ["main"])
    message = str(info.value)
    assert f"diverged at {base[:12]}" in message
    assert "sess branch origin/main" in message
    assert mine.session_head("main") == mine_head  # nothing changed
    # The remote's side is fetched all the same, under origin/main.
    assert mine.resolve("origin/main") == origin.session_head("main")


def test_non_fast_forward_push_is_refused_then_forced_and_undoable(origin: Store,
                                                                   mine: Store) -> None:
    theirs = grow(origin, "main", 1, text="theirs")
    ours = grow(mine, "main", 1, text="ours")
    log_before = origin.reflog("main")
    with pytest.raises(PushRejectedError) as info:
        sync.push(mine, "origin", ["main"])
    assert theirs[:12] in str(info.value) and ours[:12] in str(info.value)
    assert origin.session_head("main") == theirs
    assert origin.reflog("main") == log_before
    sync.push(mine, "origin", ["main"], force=True)
    assert origin.session_head("main") == ours
    assert origin.reflog("main")[-1].reason == "push: forced update"
    assert origin.resolve("main@{1}") == theirs  # the forced push is undoable there
    origin.reset("main", "main@{1}")
    assert origin.session_head("main") == theirs


def test_tags_travel_with_tags_and_are_never_moved_silently(origin: Store, mine: Store) -> None:
    mine.tag("v2", "main~1")
    result = sync.push(mine, "origin", tags=True)
    assert {r.ref: r.status for r in result.results}["tags/v2"] == "ok"
    assert origin.resolve("v2") == mine.resolve("v2")
    mine.delete_tag("v1")
    mine.tag("v1", "main")
    with pytest.raises(PushRejectedError, match="tag v1 already exists"):
        sync.push(mine, "origin", tags=True)
    assert origin.resolve("v1") == origin.resolve("main~3")
    sync.push(mine, "origin", tags=True, force=True)
    assert origin.resolve("v1") == mine.resolve("main")


def test_a_session_named_like_a_remote_one_comes_first(origin: Store, mine: Store) -> None:
    mine.fork("origin/side", "main~5")
    assert mine.resolve("origin/side") == mine.resolve("main~5")
    assert mine.resolve("remotes/origin/side") == origin.session_head("side")


def test_remotes_are_kept_beside_the_store_without_tokens(tmp_path: Path, mine: Store) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("very-secret\n")
    add_remote(mine, "lab", "http://127.0.0.1:9/x", token_file=str(token_file))
    path = remotes_file(mine)
    assert path == tmp_path / "mine" / "remotes.json"
    assert "very-secret" not in path.read_text()
    assert [r.name for r in list_remotes(mine)] == ["lab", "origin"]
    with pytest.raises(RemoteError, match="already exists"):
        add_remote(mine, "lab", "/elsewhere")
    with pytest.raises(RemoteError, match="invalid remote name"):
        add_remote(mine, "a/b", "/elsewhere")
    remove_remote(mine, "origin")
    assert [r.name for r in list_remotes(mine)] == ["lab"]
    with pytest.raises(Exception, match="unknown revision"):
        mine.resolve("origin/main")
    with pytest.raises(RemoteError, match="no remote named 'origin'"):
        sync.fetch(mine, "origin")


def test_a_store_can_be_given_directly(tmp_path: Path, origin: Store) -> None:
    other = open_store(":memory:")
    try:
        fetched = sync.fetch(other, origin)
        assert fetched.nodes == origin.backend.count_nodes()
        sync.pull(other, origin, ["side"])
        assert other.session_head("side") == origin.session_head("side")
    finally:
        other.close()


def test_interrupted_push_moves_no_ref_and_a_rerun_sends_the_rest(origin: Store,
                                                                  mine: Store) -> None:
    from sesstree.sync.peer import LocalPeer, read_chains

    grow(mine, "main", 40, text="new")
    # Half of the new nodes reached the remote, then the sender died: no ref moved.
    half = read_chains(mine, [(mine.resolve("main~20"), 20)])
    LocalPeer(origin, "origin", owned=False).receive(half, [])
    assert origin.session_head("main") == mine.resolve("main~40")
    assert origin.fsck() == []
    result = sync.push(mine, "origin", ["main"])
    assert result.nodes == 20
    assert origin.session_head("main") == mine.session_head("main")


def test_gc_keeps_what_remote_sessions_reach(origin: Store, mine: Store) -> None:
    grow(origin, "only-there", 5, start="main")
    sync.fetch(mine, "origin")
    head = origin.session_head("only-there")
    assert not mine.has_session("only-there")
    mine.gc()
    assert [n.id for n in mine.log("origin/only-there", limit=1)] == [head]
    assert mine.fsck() == []


def test_the_remotes_file_is_private(tmp_path: Path, mine: Store) -> None:
    path = remotes_file(mine)
    assert path is not None
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_progress_is_drawn_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from sesstree.cli.remote import _Progress

    quiet = _Progress("Sending")
    quiet(10, 2048)
    quiet.done()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    shown = _Progress("Sending")
    shown(10, 4096)
    shown.done()
    err = capsys.readouterr().err
    assert "\rSending 10 nodes, 4.0 KiB, " in err and err.endswith("/s   \n")


def _agent_turn(store: Store, name: str, prompt: str) -> None:
    s = store.session(name)
    s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": prompt})
    s.append("step/start", {"step": 1})
    s.add_message({"role": "assistant", "content": f"about {prompt}"})
    s.append("turn/end", {"reason": {"kind": "answer"}, "steps": 1})


def test_sync_decides_by_the_graph_not_by_what_the_views_call_shared(tmp_path: Path) -> None:
    # Two stores whose sessions share only the agent's turn/start root: by the sharing rule
    # they are unrelated, yet what sync sends, accepts and refuses follows the stored graph.
    here, there = open_store(tmp_path / "here"), open_store(tmp_path / "there")
    try:
        _agent_turn(here, "chat", "hello")
        _agent_turn(here, "solo", "only here")
        _agent_turn(there, "chat", "will it rain?")
        root = here.chain("chat").ids[0]
        assert there.chain("chat").ids[0] == root
        theirs, ours = there.session_head("chat"), here.session_head("chat")
        created = sync.push(here, there, ["solo"])
        assert [r.status for r in created.results] == ["ok"]
        assert created.nodes == 4  # the shared turn/start is there already, and not sent
        with pytest.raises(PushRejectedError):
            sync.push(here, there, ["chat"])
        assert there.session_head("chat") == theirs
        with pytest.raises(RemoteError, match=r"session chat and \S+ diverged at .*nothing changed") \
                as info:
            sync.pull(here, there, ["chat"])
        # What is shown follows the sharing rule (the two hold one event, not one history).
        assert "diverged at their start (no history in common)" in str(info.value)
        assert here.session_head("chat") == ours
        _agent_turn(there, "chat", "and tomorrow?")
        assert sync.pull(here, there, ["solo"]).sessions[0][1] == "up-to-date"
        sync.push(here, there, ["chat"], force=True)
        assert there.session_head("chat") == ours and there.fsck() == []
    finally:
        here.close()
        there.close()


def test_nodes_pulled_or_pushed_are_dated_when_they_arrived(origin: Store, mine: Store) -> None:
    """A node's recorded time is when *this* store recorded it (docs/sync.md, docs/web.md):
    nodes a pull or a push brings are dated by their arrival, not by the sender's clock, on
    both sides, and a node the receiver already had keeps its own older time."""
    import time

    head = grow(origin, "main", 2)
    new = [n.id for n in origin.log("main", limit=2)]
    sent = origin.recorded(new)
    time.sleep(0.05)
    before_pull = time.time()
    sync.pull(mine, "origin", ["main"])
    got = mine.recorded(new)
    assert set(got) == set(new)
    assert all(got[i] >= before_pull - 0.001 > sent[i] for i in new)
    shared = mine.log("main", limit=3)[-1].id  # cloned before: its time is the clone's
    cloned_at = mine.recorded([shared])[shared]
    assert cloned_at < before_pull
    # And a push: the remote dates what it receives by its own clock.
    ours = grow(mine, "main", 1, text="ours")
    time.sleep(0.05)
    before_push = time.time()
    sync.push(mine, "origin", ["main"])
    assert origin.session_head("main") == ours != head
    assert origin.recorded([ours])[ours] >= before_push - 0.001 > mine.recorded([ours])[ours]
