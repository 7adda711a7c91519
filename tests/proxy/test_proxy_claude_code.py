"""The real Claude Code CLI (the one ``claude-agent-sdk`` bundles) through the proxy: a run
with a tool call and a resumed run are one session, named after the user's words, with no
re-sent message unmatched, and its key is in no byte of the store."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy

from sesstree import Store

sdk = pytest.importorskip("claude_agent_sdk")
CLI = Path(sdk.__file__).parent / "_bundled" / "claude"
pytestmark = pytest.mark.skipif(not CLI.exists(), reason="claude-agent-sdk bundles no CLI here")

KEY = "sk-ant-claudecodetest-0123456789abcdef"


def claude(proxy: RunningProxy, home: Path, project: Path, *args: str) -> dict[str, object]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "CLAUDE_CONFIG_DIR": str(home / ".claude"), "ANTHROPIC_BASE_URL": proxy.url,
           "ANTHROPIC_API_KEY": KEY, "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    done = subprocess.run([str(CLI), "--output-format", "json", "--model", "claude-sonnet-4-5",
                           *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


def test_claude_code_with_a_tool_call_then_resumed_is_one_session(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store, store_path: Path,
        tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "a.py").write_text("print(1)\n")
    upstream.add(Scripted(tool_call=("toolu_1", "Read",
                                     json.dumps({"file_path": str(project / "a.py")}))))
    first = claude(proxy, home, project, "-p", "read a.py and tell me", "--allowedTools", "Read")
    claude(proxy, home, project, "-p", "thanks, now again", "--resume", str(first["session_id"]))
    proxy.flush()
    [session] = store.sessions()
    assert session.name.startswith("read-a-py-and-tell-me")
    stats = proxy.proxy.stats.snapshot()
    assert stats["recorded"] >= 3 and stats["resent_unmatched"] == 0
    chat = store.messages(session.name)
    assert [m["role"] for m in chat if m["role"] != "system"] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert str(chat[-2]["content"]).endswith("thanks, now again")
    for path in store_path.iterdir():
        assert KEY.encode() not in path.read_bytes(), path
    assert not any(KEY in line for line in proxy.lines)
