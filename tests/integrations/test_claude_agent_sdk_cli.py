"""End to end, offline: the Claude Code CLI the SDK bundles runs a session with a tool call
against a scripted Anthropic Messages server on 127.0.0.1, its transcript mirrored into a
sesstree store; then resumes it from the store with a fresh local config folder (nothing on
disk to resume from), then forks it, as resume with ``fork_session=True`` and as
``fork_session_via_store``."""

from __future__ import annotations

import asyncio
import json
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    TextBlock,
    fork_session_via_store,
    project_key_for_directory,
    query,
)

from sesstree import Store
from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore
from sesstree.integrations.claude_agent_sdk_keys import base_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
from fake_upstream import FakeUpstream, Scripted

TOOL_INPUT = {"command": "echo hello-from-the-tool", "description": "Say hello"}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


class Model(FakeUpstream):
    """The scripted model: asked to run the tool it calls Bash; given the tool's result it
    says what the tool printed; asked what the tool said, it answers from the history it was
    sent (so a resume that lost the history shows in the reply); else it quotes the prompt."""

    def _answer(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any],
                scripted: Scripted, n: int) -> None:
        messages = body.get("messages") or []
        last = _blocks(messages[-1]) if messages else []
        results = [b for b in last if b.get("type") == "tool_result"]
        prompt = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
        history = json.dumps(messages)
        if path.endswith("/messages") and "tools" in body:
            if results:
                scripted = Scripted(text=f"the tool printed: {json.dumps(results[0]['content'])}")
            elif "run the tool" in prompt:
                scripted = Scripted(tool_call=("toolu_e2e_1", "Bash", json.dumps(TOOL_INPUT)))
            elif "what did the tool print" in prompt:
                seen = "hello-from-the-tool" in history.replace("echo hello-from-the-tool", "")
                scripted = Scripted(text="it printed hello-from-the-tool" if seen else "no idea")
        super()._answer(h, path, body, scripted, n)


class Recording(SesstreeSessionStore):
    """The adapter, keeping what the SDK appended to each key: ``load`` must give it back."""

    def __init__(self, location: Path) -> None:
        super().__init__(location)
        self.appended: dict[str, list[Any]] = {}

    async def append(self, key: Any, entries: list[Any]) -> None:
        self.appended.setdefault(key["session_id"], []).extend(json.loads(json.dumps(entries)))
        await super().append(key, entries)

    def expected(self, session_id: str) -> list[Any]:
        """What was appended, a retried line (a uuid seen before) once."""
        seen: set[str] = set()
        out = []
        for entry in self.appended[session_id]:
            uuid = entry.get("uuid")
            if isinstance(uuid, str):
                if uuid in seen:
                    continue
                seen.add(uuid)
            out.append(entry)
        return out


def _options(store: SesstreeSessionStore, up: Model, config: Path, project: Path,
             **extra: Any) -> ClaudeAgentOptions:
    env = {"ANTHROPIC_BASE_URL": up.url, "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
           "CLAUDE_CONFIG_DIR": str(config), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"}
    return ClaudeAgentOptions(session_store=store, env=env, cwd=str(project),
                              allowed_tools=["Bash"], model="claude-sonnet-4-5", max_turns=6,
                              **extra)


def _texts(messages: list[Any]) -> list[str]:
    return [b.text for m in messages if isinstance(m, AssistantMessage)
            for b in m.content if isinstance(b, TextBlock)]


async def _ask(options: ClaudeAgentOptions, prompt: str) -> tuple[str, list[str]]:
    got = [m async for m in query(prompt=prompt, options=options)]
    [result] = [m for m in got if isinstance(m, ResultMessage)]
    assert not result.is_error, result
    return result.session_id, _texts(got)


def _node_bytes(store: Store) -> dict[str, int]:
    return {n.id: len(n.encoded) for n in store.backend.iter_nodes()}


def test_the_cli_runs_resumes_and_forks_from_a_sesstree_store(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pk = project_key_for_directory(project)
    sdk = Recording(tmp_path / "store")
    store = sdk.store
    try:
        with Model() as up:
            async def session() -> tuple[str, list[str]]:
                options = _options(sdk, up, tmp_path / "config-1", project)
                texts: list[str] = []
                sid = ""
                async with ClaudeSDKClient(options) as client:
                    for prompt in ("please run the tool", "thanks, that is all"):
                        await client.query(prompt)
                        got = [m async for m in client.receive_response()]
                        texts += _texts(got)
                        sid = next(m for m in got if isinstance(m, ResultMessage)).session_id
                return sid, texts

            sid, texts = asyncio.run(session())
            assert texts[0].startswith('the tool printed: "hello-from-the-tool')
            assert "thanks, that is all" in texts[1]
            key: Any = {"project_key": pk, "session_id": sid}
            first = asyncio.run(sdk.load(key))
            assert first is not None
            transcript = [e for e in first if e.get("type") in ("user", "assistant")]
            assert [e["type"] for e in transcript] == ["user", "assistant", "user", "assistant",
                                                       "user", "assistant"]
            name = base_name(pk, sid)  # PROJECT/claude-XXXXXXXX, the project's name cut short
            assert name.endswith(f"/claude-{sid[:8]}")
            messages = store.messages(name)
            assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant",
                                                     "user", "assistant"]
            assert messages[1]["tool_calls"][0]["function"] == {
                "name": "Bash", "arguments": json.dumps(TOOL_INPUT, separators=(",", ":"))}
            assert messages[2]["content"] == "hello-from-the-tool"

            # Resume from the store alone: a config folder that has never seen the session.
            fresh = _options(sdk, up, tmp_path / "config-2", project, resume=sid)
            again, texts = asyncio.run(_ask(fresh, "what did the tool print?"))
            assert again == sid
            assert texts == ["it printed hello-from-the-tool"]
            resumed = asyncio.run(sdk.load(key))
            assert resumed is not None and resumed[:len(first)] == first
            assert [m["role"] for m in store.messages(name)][-2:] == ["user", "assistant"]

            # A fork as the CLI makes it, resumed in yet another fresh folder ...
            before = _node_bytes(store)
            forking = _options(sdk, up, tmp_path / "config-3", project, resume=sid,
                               fork_session=True)
            forked, texts = asyncio.run(_ask(forking, "what did the tool print, once more?"))
            assert forked != sid and texts == ["it printed hello-from-the-tool"]
            cli_fork = asyncio.run(sdk.load({"project_key": pk, "session_id": forked}))
            assert cli_fork is not None
            # ... and one through the store, which copies with every uuid remapped.
            known = _node_bytes(store)
            made = asyncio.run(fork_session_via_store(sdk, sid, directory=str(project)))
            via_store = asyncio.run(sdk.load({"project_key": pk, "session_id": made.session_id}))
            assert via_store is not None
            assert [e.get("forkedFrom", {}).get("messageUuid") for e in via_store
                    if e.get("type") in ("user", "assistant")] == [
                e["uuid"] for e in resumed if e.get("type") in ("user", "assistant")]
            now = _node_bytes(store)
            session_bytes = sum(before.values())
            added = sum(b for i, b in now.items() if i not in known)
            assert added < 0.05 * session_bytes, (added, session_bytes)
            # The CLI's fork copies every line under its own uuid with promptId renewed: it
            # costs its new turn (a prompt, context attachments, a reply) and little more.
            cli_added = sum(b for i, b in known.items() if i not in before)
            assert cli_added < 0.10 * session_bytes, (cli_added, session_bytes)
            print(f"fork_session_via_store added {added} bytes, {added / session_bytes:.1%} of "
                  f"{session_bytes}; the CLI's fork with its turn {cli_added} bytes, "
                  f"{cli_added / session_bytes:.1%}")
            # The API key the CLI was given never reaches the store.
            assert not any(b"sk-ant-test-not-a-key" in n.encoded for n in store.backend.iter_nodes())
            for each in (sid, forked, made.session_id):
                assert asyncio.run(sdk.load({"project_key": pk, "session_id": each})) == \
                    sdk.expected(each)
            # The store's sessions: the original, its fork by the CLI and the one via the
            # store, each readable as chat; the store's fork is the original's conversation.
            names = {i.name for i in store.sessions() if "/branch-" not in i.name}
            assert {name, base_name(pk, forked), base_name(pk, made.session_id)} <= names
            chain = store.chain_at(store.session_head(name))  # type: ignore[arg-type]
            # Each fork's conversation is the original's nodes, up to its newest reply (which,
            # as the newest, may still stream: a record only, where in a fork it is followed
            # and so a message, the records spliced after it hanging below that)
            reply = max(i for i, t in enumerate(chain.types) if t == "claude/assistant")
            for fork_name in (base_name(pk, forked), base_name(pk, made.session_id)):
                shared = max(len(set(chain.ids[:reply + 1]) & set(store.chain_at(i.head).ids))
                             for i in store.sessions() if i.name.startswith(fork_name))
                assert shared == reply + 1, (fork_name, shared, reply)
            assert len(asyncio.run(sdk.list_sessions(pk))) == 3
            # What the CLI sent the model when resumed from the store alone: the first
            # session's turns, the tool call and its result among them.
            [asked] = [r for r in up.requests if "tools" in r and r["messages"] and any(
                "what did the tool print?" == b.get("text", "").strip()
                for b in _blocks(r["messages"][-1]))]
            sent = [b for m in asked["messages"] for b in _blocks(m)]
            assert {"type": "tool_use", "id": "toolu_e2e_1", "name": "Bash",
                    "input": TOOL_INPUT} in [{k: b.get(k) for k in ("type", "id", "name", "input")}
                                             for b in sent if b.get("type") == "tool_use"]
            assert any(b.get("type") == "tool_result" and "hello-from-the-tool" in json.dumps(b)
                       for b in sent)
            assert any("thanks, that is all" in b.get("text", "") for b in sent)
    finally:
        sdk.close()


def test_the_scripted_model_can_tell_a_lost_history() -> None:
    """The resume check above can fail: without the history the model says it has no idea."""
    with Model() as up:
        import httpx

        reply = httpx.post(f"{up.url}/v1/messages", json={
            "model": "m", "tools": [], "messages": [
                {"role": "user", "content": "what did the tool print?"}]}).json()
        assert reply["content"][0]["text"] == "no idea"

