"""A fork made through the SDK (``fork_session_via_store``) costs the store only what the SDK
changed: the copied lines are the source's records, while ``load`` gives back exactly what
the SDK appended."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from claude_agent_sdk import fork_session_via_store, project_key_for_directory
from claude_sdk_transcripts import INTEROP, lines_of, session_id_of

from sesstree import Store
from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore
from sesstree.integrations.claude_agent_sdk_keys import base_name

#: A real Claude Code session: 57 entries, tool calls, replies split over entries, summaries.
SESSION = next((INTEROP / "samples" / "claude-code").glob("*069508a5*.jsonl"))


class Recording(SesstreeSessionStore):
    """The adapter, keeping what the SDK appended to compare ``load`` with."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.appended: dict[str, list[Any]] = {}

    async def append(self, key: Any, entries: list[Any]) -> None:
        self.appended.setdefault(key["session_id"], []).extend(entries)
        await super().append(key, entries)


def _node_bytes(store: Store) -> dict[str, int]:
    return {n.id: len(n.encoded) for n in store.backend.iter_nodes()}


def test_a_fork_adds_under_5_percent_of_the_forked_session(sqlite_store: Store, tmp_path: Path) -> None:
    lines = lines_of(SESSION)
    sid = session_id_of(lines, SESSION)
    project = tmp_path / "proj"
    project.mkdir()
    key = {"project_key": project_key_for_directory(project), "session_id": sid}
    sdk = Recording(sqlite_store)

    before: dict[str, int] = {}
    sizes: list[int] = []

    async def measured() -> tuple[str, str, str]:
        await sdk.append(key, lines)  # type: ignore[arg-type]
        before.update(_node_bytes(sqlite_store))
        ids = []
        # a fork, a fork of that fork, and a fork of the first ten replies
        for source, upto in ((sid, None), (None, None), (sid, 10)):
            known = _node_bytes(sqlite_store)
            origin = source if source is not None else ids[-1]
            cut = [e["uuid"] for e in lines if e.get("type") == "assistant"][upto] if upto else None
            forked = await fork_session_via_store(sdk, origin, directory=str(project),
                                                  up_to_message_id=cut)
            ids.append(forked.session_id)
            now = _node_bytes(sqlite_store)
            sizes.append(sum(b for i, b in now.items() if i not in known))
        return ids[0], ids[1], ids[2]

    fork, again, part = asyncio.run(measured())
    source_bytes = sum(before.values())
    assert all(size < 0.05 * source_bytes for size in sizes), (sizes, source_bytes)
    print("fork bytes / source bytes:", [round(size / source_bytes, 4) for size in sizes])
    for forked in (fork, again, part):
        fork_key: Any = {**key, "session_id": forked}
        assert asyncio.run(sdk.load(fork_key)) == sdk.appended[forked]
    # The fork's conversation is the source's nodes: its session holds the source's main line
    source_main = sqlite_store.chain_at(
        sqlite_store.session_head(base_name(key["project_key"], sid))).ids  # type: ignore[arg-type]
    fork_chains = [set(sqlite_store.chain_at(i.head).ids) for i in sqlite_store.sessions()
                   if i.name.startswith(base_name(key["project_key"], fork))]
    assert any(len(set(source_main) & c) >= len(source_main) - 2 for c in fork_chains)


def test_a_fork_the_cli_writes_is_kept_as_its_changes(sqlite_store: Store) -> None:
    """Resume with ``fork_session=True``: the CLI writes the lines again under the new session
    id, uuids kept, ``promptId`` renewed, then the new turn; in batches of its choosing."""
    lines = lines_of(SESSION)
    sid = session_id_of(lines, SESSION)
    new_sid = "7f1c2d3e-4b5a-4697-8887-a9b0c1d2e3f4"
    copied = [{**e, "sessionId": new_sid, **({"promptId": "p-new"} if e.get("type") == "user" else {})}
              if "sessionId" in e else e for e in lines]
    turn = [{"type": "user", "uuid": "c0ffee00-0000-4000-8000-000000000001", "sessionId": new_sid,
             "parentUuid": lines[-1].get("uuid"), "message": {"role": "user", "content": "more"}}]
    sdk = Recording(sqlite_store)
    key: Any = {"project_key": "p", "session_id": sid}
    fork_key: Any = {"project_key": "p", "session_id": new_sid}

    async def run() -> None:
        await sdk.append(key, lines)
        before = _node_bytes(sqlite_store)
        await sdk.append(fork_key, copied[:20])
        await sdk.append(fork_key, copied[20:] + turn)
        await sdk.append(fork_key, copied[20:] + turn)  # a retry
        added = sum(b for i, b in _node_bytes(sqlite_store).items() if i not in before)
        assert added < 0.05 * sum(before.values()), (added, sum(before.values()))
        assert await sdk.load(fork_key) == copied + turn
        assert await sdk.load(key) == lines

    asyncio.run(run())
