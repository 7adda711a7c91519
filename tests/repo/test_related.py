"""Sessions are related only where they share history a reader recognises: the rule of
:mod:`sesstree.repo.related`, through ``Store.diff`` (the merge base), the web's bounded diff and
``sess diff`` / ``sess log A..B``."""

from __future__ import annotations

from cli_kit import Sess
from core_testkit import agent_turn

from sesstree import Store
from sesstree.store.base import Chain
from sesstree.web.diffing import bounded_diff


def both_diffs(store: Store, a: str, b: str) -> tuple[str | None, int, int]:
    """``Store.diff`` and the web's bounded diff, which must agree: base, and counts."""
    d = store.diff(a, b)
    bd = bounded_diff(store, a, b, shown=100)
    assert (bd.base.id if bd.base else None, bd.only_a, bd.only_b) == (
        d.base, len(d.only_a), len(d.only_b))
    assert [n.id for n in bd.shown_a] == [n.id for n in d.only_a]
    assert [n.id for n in bd.shown_b] == [n.id for n in d.only_b]
    return d.base, len(d.only_a), len(d.only_b)


def test_sessions_that_share_only_a_turn_start_are_unrelated(store: Store) -> None:
    agent_turn(store, "chat", "hello", "hi")
    agent_turn(store, "weather", "will it rain?", "no")
    # The two share their first node (the same turn/start), and nothing a reader knows.
    assert store.chain("chat").ids[0] == store.chain("weather").ids[0]
    assert both_diffs(store, "chat", "weather") == (None, 7, 7)


def test_a_shared_system_prompt_alone_does_not_relate_sessions(store: Store) -> None:
    for name in ("a", "b"):
        store.session(name).add_message({"role": "system", "content": "Be terse."})
        agent_turn(store, name, f"question for {name}", "ok")
    assert both_diffs(store, "a", "b") == (None, 8, 8)


def test_a_fork_at_the_end_of_a_turn_parts_there_not_at_the_next_turn_start(
        store: Store) -> None:
    agent_turn(store, "quest-1", "find the key", "it is in the cave")
    end = store.session_head("quest-1")
    store.fork("quest-2", "quest-1")
    agent_turn(store, "quest-1", "go in", "done")
    agent_turn(store, "quest-2", "ask the mayor", "he says no")
    assert both_diffs(store, "quest-1", "quest-2") == (end, 7, 7)
    d = store.diff("quest-1", "quest-2")
    # Each side lists its own turn/start: the same node, repeated by both after the fork.
    assert d.only_a[0].id == d.only_b[0].id and d.only_a[0].type == "turn/start"
    assert d.only_a[0].parent == end


def test_a_fork_mid_turn_parts_at_the_message(store: Store) -> None:
    agent_turn(store, "quest-1", "find the key", "it is in the cave")
    answer = store.resolve("quest-1~0m")
    store.fork("quest-2", "quest-1~0m").add_message({"role": "user", "content": "why?"})
    assert both_diffs(store, "quest-1", "quest-2") == (answer, 3, 1)


def test_an_ancestor_and_an_identical_history_are_shared_whole(store: Store) -> None:
    agent_turn(store, "chat", "hello", "hi")
    # chat~1 is a record of the run (step/end): still chat's own past, shared whole.
    assert both_diffs(store, "chat~1", "chat") == (store.resolve("chat~1"), 0, 1)
    assert both_diffs(store, "chat~6", "chat")[0] == store.resolve("chat~6")
    agent_turn(store, "copy", "hello", "hi")  # the same history written again: one history
    assert store.session_head("copy") == store.session_head("chat")
    assert both_diffs(store, "copy", "chat") == (store.session_head("chat"), 0, 0)


def test_cli_diff_and_ranges_follow_the_rule(sess: Sess) -> None:
    with sess.store() as store:
        agent_turn(store, "chat", "hello", "hi")
        agent_turn(store, "weather", "will it rain?", "no")
        store.fork("chat-b", "chat")
        agent_turn(store, "chat-b", "and then?", "more")
        end = store.session_head("chat")
    assert sess.lines("diff", "chat", "weather")[0] == "no common ancestor"
    assert sess.lines("diff", "chat", "chat-b")[0].startswith(f"common ancestor {end[:10]}")
    assert sess.json("diff", "weather", "chat-b")["base"] is None
    # What chat-b added since chat is its whole turn, its turn/start included.
    added = sess.json("log", "chat..chat-b")
    assert [e["type"] for e in added][-1] == "turn/start"
    assert len(added) == 7


def test_a_prompt_asked_again_parts_at_the_prompt(store: Store) -> None:
    agent_turn(store, "chat", "find the key", "it is in the cave")
    prompt = store.resolve("chat~1m")
    retry = store.fork("retry", "chat~1m")  # asked again: the step opens the same way
    retry.append("step/start", {"step": 1})
    retry.add_message({"role": "assistant", "content": "under the mat"})
    assert store.resolve("retry~1") == store.resolve("chat~4")  # the same step/start node
    assert both_diffs(store, "chat", "retry") == (prompt, 5, 2)


def test_a_fork_at_a_record_of_the_run_parts_there(store: Store) -> None:
    agent_turn(store, "chat", "find the key", "it is in the cave")
    usage = store.resolve("chat~2")
    store.fork("other", "chat~2").add_message({"role": "user", "content": "and?"})
    assert both_diffs(store, "chat", "other") == (usage, 2, 1)


def _trees(lines: list[str]) -> list[list[str]]:
    """The trees of a ``log --graph`` drawing: runs of lines between blank ones."""
    trees: list[list[str]] = [[]]
    for line in lines:
        if line:
            trees[-1].append(line)
        else:
            trees.append([])
    return trees


def test_log_graph_draws_unrelated_sessions_apart_and_forks_at_the_turn_end(sess: Sess) -> None:
    with sess.store() as store:
        store.session("notes").add_message({"role": "user", "content": "a note"})
        agent_turn(store, "chat", "hello", "hi")
        agent_turn(store, "weather", "will it rain?", "no")
        agent_turn(store, "quest-1", "find the key", "in the cave")
        end = store.session_head("quest-1")
        agent_turn(store, "quest-1", "go in", "done")
        store.fork("quest-2", end)
        agent_turn(store, "quest-2", "ask the mayor", "no key")
        store.fork("inside", "quest-1~3")  # a head on quest-1's trunk, at a step/start
        # notes moves last: its line is drawn first, and the others are read past it.
        store.session("notes").add_message({"role": "user", "content": "another"})
        root = store.chain("chat").ids[0]
    def tree_names(lines: list[str]) -> tuple[list[list[str]], list[set[str]]]:
        trees = _trees(lines)
        names = [{n for n in ("notes", "chat", "weather", "quest-1", "quest-2", "inside")
                  if any(f"({n})" in line or f" {n})" in line or f"({n}," in line for line in t)}
                 for t in trees]
        assert sorted(map(sorted, names)) == [
            ["chat"], ["inside", "quest-1", "quest-2"], ["notes"], ["weather"]]
        return trees, names

    tree_names(sess.lines("log", "--graph", "--all", "--oneline"))  # folded: the same trees
    # Every event drawn: where the trees end and the fork joins can be seen node by node.
    trees, names = tree_names(sess.lines("log", "--graph", "--all", "--oneline", "--all-events"))
    # Each agent tree ends at its own drawing of the turn/start they all begin with.
    agent_trees = [t for t, n in zip(trees, names, strict=True) if "notes" not in n]
    assert all(t[-1].startswith(f"* {root[:10]} ") for t in agent_trees)
    quest = next(t for t, n in zip(trees, names, strict=True) if "quest-1" in n)
    # quest-2 joins quest-1's line at the end of the first turn, each with its own turn/start.
    join = next(i for i, line in enumerate(quest) if line == "|/")
    assert quest[join + 1].startswith(f"* {end[:10]} ")
    above = quest[:join]
    starts = [line for line in above if "turn starts" in line]
    ids = [line.replace("|", "").replace("*", "").split()[0] for line in starts]
    assert len(starts) == 2 and ids[0] == ids[1]
    # inside's head is on quest-1's line, not a branch of its own.
    assert any(line.startswith("| * ") and "(inside)" in line for line in above)
    assert sum(line.count("|/") for line in quest) == 1


def test_the_web_diff_reads_within_its_bound_past_a_long_run_of_openers(store: Store) -> None:
    store.session("a").add_message({"role": "user", "content": "hi"})
    with store.batch():
        for i in range(300):  # a long run of records with no mark among them
            store.session("a").append("step/start", {"step": i})
    store.fork("b", "a")
    store.session("a").add_message({"role": "user", "content": "left"})
    store.session("b").add_message({"role": "user", "content": "right"})
    # Unbounded, the two part at the prompt, each with the whole run of its own.
    full = bounded_diff(store, "a", "b", shown=0, most=1000)
    assert full.base is not None and full.base.type == "user/message" and not full.cut
    assert (full.only_a, full.only_b) == (301, 301)
    read: list[int] = []
    chain = store.chain

    def counted(rev: str, limit: int | None = None) -> Chain:
        out = chain(rev, limit)
        read.append(len(out.ids))
        return out

    store.chain = counted  # type: ignore[method-assign]
    cut = bounded_diff(store, "a", "b", shown=5, most=50)
    assert max(read) <= 50, read  # each read within the bound, not back to the prompt
    assert cut.cut and cut.base is None and cut.only_a >= 1 and cut.only_b >= 1
    assert [n.data for n in cut.shown_b][-1] == {"content": "right", "role": "user"}
