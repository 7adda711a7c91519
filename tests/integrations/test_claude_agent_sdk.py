"""SesstreeSessionStore: the same nodes as ``sess import``, idempotent appends, subagents,
deletes, race-free appends from two processes, and the store work off the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import fold_session_summary
from claude_sdk_transcripts import TRANSCRIPTS, lines_of, session_id_of
from cli_kit import Sess

import sesstree.integrations.claude_agent_sdk as adapter
from sesstree import Store, open_store
from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore
from sesstree.interop.jsonl import session_base

ROOT = Path(__file__).resolve().parents[2]


def _transcripts(store: Store) -> list[Any]:
    """The sessions a user reads: not the adapter's indexes (``claude-sdk-index/NAME``)."""
    return [i for i in store.sessions() if not i.name.startswith("claude-sdk-index/")]


def _trees(store: Store, prefix: str = "") -> tuple[Any, set[Any], set[str]]:
    """The main session's head, the other sessions' heads and every node their chains hold."""
    main = None
    heads = set()
    nodes: set[str] = set()
    for info in store.sessions():
        if not info.name.startswith(prefix):
            continue
        if "/branch-" in info.name:
            heads.add(info.head)
        else:
            main = info.head
        nodes.update(store.chain_at(info.head).ids)
    return main, heads, nodes


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name[-24:])
def test_the_same_lines_give_the_nodes_sess_import_gives(path: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Node for node: the main line, every branch and every node, with the importer's name."""
    monkeypatch.chdir(tmp_path)
    # A fresh copy: a transcript written just now may still be growing, as a store key always
    # may, so the importer keeps a last reply without a stop_reason raw, as the store does.
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    sess = Sess(tmp_path)
    sess.ok("--store", "imported", "init")
    sess.ok("--store", "imported", "import", str(copy))
    lines = lines_of(path)
    sid = session_id_of(lines, path)
    with open_store(tmp_path / "imported") as imported, open_store(tmp_path / "sdk") as mirrored:
        sdk = SesstreeSessionStore(mirrored)
        key = {"project_key": "-home-me-proj", "session_id": sid}

        async def feed() -> None:
            for start in range(0, len(lines), 7):  # batches, as the SDK sends them
                await sdk.append(key, lines[start:start + 7])  # type: ignore[arg-type]

        asyncio.run(feed())
        want_main, want_branches, want_nodes = _trees(imported)
        got_main, got_branches, got_nodes = _trees(mirrored, "home-me-proj/")
        assert got_main == want_main
        assert got_branches == want_branches
        assert got_nodes == want_nodes
        # Named as sess import names them, the file being the CLI's own, SESSION_ID.jsonl
        imported_base = session_base("claude", sid, copy, by_id=False)
        base = "home-me-proj/" + session_base("claude", sid, Path(sid + ".jsonl"), by_id=False)
        assert {i.name: i.head for i in _transcripts(mirrored)} == {
            base + i.name[len(imported_base):]: i.head for i in imported.sessions()}
        assert asyncio.run(sdk.load(key)) == lines  # type: ignore[arg-type]
        assert mirrored.get_session_meta(_transcripts(mirrored)[0].name) == {
            "format": "claude", "sessionId": sid, "source": f"claude-agent-sdk:-home-me-proj/{sid}"}


def _entry(uuid: str | None, text: str, parent: str | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {"type": "user", "sessionId": "s", "parentUuid": parent,
                            "message": {"role": "user", "content": text},
                            "timestamp": "2026-01-01T00:00:00.000Z"}
    if uuid is not None:
        line["uuid"] = uuid
    return line


def test_a_retried_batch_adds_nothing_and_lines_without_a_uuid_are_appended(sqlite_store: Store) -> None:
    sdk = SesstreeSessionStore(sqlite_store)
    key: Any = {"project_key": "p", "session_id": "s"}
    batch = [_entry("u1", "one"), _entry("u2", "two", "u1")]
    title = {"type": "custom-title", "customTitle": "t", "sessionId": "s"}

    async def run() -> Any:
        await sdk.append(key, batch)
        refs = {r.name: r.target for r in sqlite_store.refs()}
        nodes = sqlite_store.count_nodes()
        await sdk.append(key, batch)  # the SDK's retry of a batch that did land
        assert {r.name: r.target for r in sqlite_store.refs()} == refs
        assert sqlite_store.count_nodes() == nodes
        await sdk.append(key, [title])
        await sdk.append(key, [title, _entry("u2", "two", "u1")])
        return await sdk.load(key)

    assert asyncio.run(run()) == [*batch, title, title]


def test_a_subagent_is_its_own_session_that_names_its_main_one(sqlite_store: Store) -> None:
    sdk = SesstreeSessionStore(sqlite_store)
    main: Any = {"project_key": "p", "session_id": "0b9a3c1e-1111-4222-8333-444455556666"}
    sub: Any = {**main, "subpath": "subagents/agent-a1"}
    side = {**_entry("x1", "sub task"), "isSidechain": True, "sessionId": main["session_id"]}

    async def run() -> None:
        await sdk.append(main, [{**_entry("m1", "main"), "sessionId": main["session_id"]}])
        await sdk.append(sub, [side])
        assert await sdk.list_subkeys(main) == ["subagents/agent-a1"]
        assert await sdk.load(sub) == [side]
        await sdk.delete(main)
        assert await sdk.load(sub) is None
        assert await sdk.list_sessions("p") == []

    names_before: list[str] = []

    async def probe() -> None:
        await sdk.append(main, [{**_entry("m1", "main"), "sessionId": main["session_id"]}])
        await sdk.append(sub, [side])
        names_before.extend(i.name for i in sqlite_store.sessions())

    asyncio.run(probe())
    assert names_before == ["claude-sdk-index/p/claude-0b9a3c1e",
                            "claude-sdk-index/p/claude-0b9a3c1e/subagents/agent-a1",
                            "p/claude-0b9a3c1e", "p/claude-0b9a3c1e/subagents/agent-a1"]
    assert sqlite_store.get_session_meta("claude-sdk-index/p/claude-0b9a3c1e") == {
        "format": "claude-agent-sdk-index", "indexOf": "p/claude-0b9a3c1e"}
    meta = sqlite_store.get_session_meta("p/claude-0b9a3c1e/subagents/agent-a1")
    assert meta is not None and meta["subagentOf"] == "p/claude-0b9a3c1e"
    assert sqlite_store.messages("p/claude-0b9a3c1e/subagents/agent-a1") == [
        {"role": "user", "content": "sub task"}]
    asyncio.run(run())
    assert sqlite_store.sessions() == []
    # the deleted sessions are in the reflog, nothing is lost
    assert sqlite_store.reflog("p/claude-0b9a3c1e")[-1].new is None


_WRITER = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore
sdk = SesstreeSessionStore(sys.argv[1])
who = sys.argv[2]
async def run():
    for i in range(15):
        await sdk.append({{"project_key": "p", "session_id": "s"}}, [
            {{"type": "user", "uuid": f"{{who}}-{{i}}",
             "message": {{"role": "user", "content": f"{{who}} {{i}}"}},
             "timestamp": f"2026-01-01T00:00:{{i:02d}}.000Z", "customTitle": f"{{who}} {{i}}"}}])
asyncio.run(run())
sdk.close()
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_processes_appending_at_once_lose_no_line_and_no_fold(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """Every append is a compare-and-set: the one that loses reads the other's and retries,
    so both writers' lines are kept and the summary is the fold of every line, in order."""
    where = request.getfixturevalue("postgres_url") if kind == "postgres" else str(tmp_path / "s")
    open_store(where).close()
    script = _WRITER.format(tests=str(ROOT / "tests" / "integrations"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    writers = [subprocess.Popen([sys.executable, "-c", script, where, who], env=env)
               for who in ("a", "b")]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    sdk = SesstreeSessionStore(where)
    try:
        key: Any = {"project_key": "p", "session_id": "s"}
        loaded = asyncio.run(sdk.load(key))
        assert loaded is not None
        assert sorted(e["uuid"] for e in loaded) == sorted(f"{w}-{i}" for w in "ab" for i in range(15))
        [summary] = asyncio.run(sdk.list_session_summaries("p"))
        assert summary["data"] == fold_session_summary(None, key, loaded)["data"]
    finally:
        sdk.close()


def test_the_store_work_runs_off_the_event_loop(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    real = adapter.append_entries

    def recorded(*args: Any) -> None:
        threads.append(threading.get_ident())
        real(*args)

    monkeypatch.setattr(adapter, "append_entries", recorded)
    sdk = SesstreeSessionStore(sqlite_store)

    async def run() -> int:
        await sdk.append({"project_key": "p", "session_id": "s"}, [_entry("u1", "hi")])  # type: ignore[list-item]
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert threads and threads[0] != loop_thread


def test_a_location_string_opens_a_store_the_adapter_closes(tmp_path: Path) -> None:
    sdk = SesstreeSessionStore(str(tmp_path / "s"))
    asyncio.run(sdk.append({"project_key": "p", "session_id": "s"}, [_entry("u1", "hi")]))  # type: ignore[list-item]
    sdk.close()
    with open_store(tmp_path / "s") as store:
        assert [i.name for i in store.sessions()] == ["claude-sdk-index/p/s", "p/s"]
        assert json.loads(json.dumps(store.messages("p/s"))) == [{"role": "user", "content": "hi"}]


def test_lines_load_after_gc_when_a_later_line_relinks_the_tree(sqlite_store: Store) -> None:
    """A reply continued by a later entry (one reply split over entries, as Claude Code
    writes them) stops being a message of its own: what hung below it, a spliced record,
    gets another node. The index follows it, so gc, which removes the old node, loses nothing."""
    sdk = SesstreeSessionStore(sqlite_store)
    key: Any = {"project_key": "p", "session_id": "s"}
    user = _entry("u1", "hi")
    first = {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s",
             "message": {"id": "msg_1", "role": "assistant", "stop_reason": "tool_use",
                         "content": [{"type": "text", "text": "let me look"}]}}
    prompt = {"type": "last-prompt", "lastPrompt": "hi", "sessionId": "s"}
    rest = {"type": "assistant", "uuid": "a2", "parentUuid": "a1", "sessionId": "s",
            "message": {"id": "msg_1", "role": "assistant", "stop_reason": "tool_use",
                        "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                     "input": {"path": "a"}}]}}

    async def run() -> Any:
        await sdk.append(key, [user, first])
        await sdk.append(key, [prompt])
        await sdk.append(key, [rest])
        return await sdk.load(key)

    assert asyncio.run(run()) == [user, first, prompt, rest]
    for info in sqlite_store.sessions():
        sqlite_store.expire_reflog(info.name)  # nothing but the refs keeps a node now
    assert sqlite_store.gc().removed > 0
    assert asyncio.run(sdk.load(key)) == [user, first, prompt, rest]


def test_a_cloned_or_pulled_store_loads_what_the_sdk_appended(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The transcript and its index are sessions: clone and pull carry them, and the SDK
    resumes from the copy (as on another machine)."""
    monkeypatch.chdir(tmp_path)
    key: Any = {"project_key": "p", "session_id": "0b9a3c1e-1111-4222-8333-444455556666"}
    one, two = _entry("u1", "hi"), _entry("u2", "again", "u1")
    sdk = SesstreeSessionStore(tmp_path / "here")
    asyncio.run(sdk.append(key, [one]))
    sess = Sess(tmp_path)
    sess.ok("clone", str(tmp_path / "here"), str(tmp_path / "there"))
    asyncio.run(sdk.append(key, [two]))
    sdk.close()
    for name in ("p/claude-0b9a3c1e", "claude-sdk-index/p/claude-0b9a3c1e"):
        sess.ok("--store", str(tmp_path / "there" / ".sess"), "pull", "origin", name)
    there = SesstreeSessionStore(tmp_path / "there" / ".sess")
    try:
        assert asyncio.run(there.load(key)) == [one, two]
        assert there.store.messages("p/claude-0b9a3c1e") == [
            {"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]
    finally:
        there.close()


def test_a_name_taken_by_another_key_or_by_the_user_is_never_taken_over(sqlite_store: Store) -> None:
    """Two session ids with the same first 8 digits, and a session the user made with the
    name one of them would take: each key lands on a name of its own, and finds it again."""
    sqlite_store.session("p/claude-0b9a3c1e").add_message({"role": "user", "content": "mine"})
    sdk = SesstreeSessionStore(sqlite_store)
    a: Any = {"project_key": "p", "session_id": "0b9a3c1e-1111-4222-8333-444455556666"}
    b: Any = {"project_key": "p", "session_id": "0b9a3c1e-9999-4222-8333-444455556666"}

    async def run() -> None:
        await sdk.append(a, [_entry("u1", "from a")])
        await sdk.append(b, [_entry("u2", "from b")])
        await sdk.append(a, [_entry("u3", "a again", "u1")])
        assert [e["uuid"] for e in await sdk.load(a) or []] == ["u1", "u3"]
        assert [e["uuid"] for e in await sdk.load(b) or []] == ["u2"]

    asyncio.run(run())
    assert sqlite_store.messages("p/claude-0b9a3c1e") == [{"role": "user", "content": "mine"}]
    assert [m["content"] for m in sqlite_store.messages("p/claude-0b9a3c1e-2")] == ["from a", "a again"]
    assert [m["content"] for m in sqlite_store.messages("p/claude-0b9a3c1e-3")] == ["from b"]


def test_the_longest_keys_the_sdk_makes_still_name_sessions(sqlite_store: Store) -> None:
    """The SDK cuts a project key at 200 characters (plus a hash); a ref name holds 200 bytes
    in all, so long parts are cut too, with a hash that keeps two long keys apart."""
    sdk = SesstreeSessionStore(sqlite_store)
    long_a, long_b = "-home-" + "a" * 194, "-home-" + "a" * 193 + "b"
    keys: list[Any] = [{"project_key": p, "session_id": "0b9a3c1e-1111-4222-8333-444455556666",
                        **({"subpath": "subagents/agent-" + "x" * 150} if sub else {})}
                       for p in (long_a, long_b) for sub in (False, True)]

    async def run() -> list[Any]:
        for n, key in enumerate(keys):
            await sdk.append(key, [_entry(f"u{n}", f"line {n}")])
        return [await sdk.load(key) for key in keys]

    assert [[e["uuid"] for e in got or []] for got in asyncio.run(run())] == [["u0"], ["u1"], ["u2"], ["u3"]]
    assert all(len(i.name.encode()) <= 200 for i in sqlite_store.sessions())
    assert len(asyncio.run(sdk.list_sessions(long_a))) == 1
