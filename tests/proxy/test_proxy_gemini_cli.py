"""The real Gemini CLI through the proxy, when it is installed (``npm install
@google/gemini-cli``; the binary on ``PATH`` or named by ``$SESS_TEST_GEMINI_CLI``): a run
with a tool call is one session, and its key is in no byte of the store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_upstream import FakeUpstream, Scripted
from proxy_server import RunningProxy

from sesstree import Store

GEMINI = os.environ.get("SESS_TEST_GEMINI_CLI") or shutil.which("gemini")
pytestmark = pytest.mark.skipif(GEMINI is None, reason="the Gemini CLI is not installed")

KEY = "AIzaSyGeminiCliTest-0123456789abcdefg"
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"},
                         "folderTrust": {"enabled": False}},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}


def gemini(proxy: RunningProxy, home: Path, project: Path, *args: str) -> str:
    assert GEMINI is not None
    env = {**os.environ, "HOME": str(home), "GEMINI_API_KEY": KEY, "NO_COLOR": "1",
           "GOOGLE_GEMINI_BASE_URL": proxy.url, "GEMINI_CLI_NO_RELAUNCH": "true"}
    done = subprocess.run([GEMINI, "--yolo", "-m", "gemini-2.5-flash", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_gemini_cli_run_with_a_tool_call_is_one_session(
        proxy: RunningProxy, upstream: FakeUpstream, store: Store, store_path: Path,
        tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    project.mkdir()
    (project / "a.py").write_text("print(1)\n")
    upstream.add(Scripted(tool_call=("", "read_file", '{"file_path": "a.py"}')))
    out = gemini(proxy, home, project, "-p", "read a.py and tell me")
    assert "answer 2" in out
    proxy.flush()
    [session] = store.sessions()
    messages = store.messages(session.name)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[3]["content"] == '{"output":"print(1)\\n"}'
    assert proxy.proxy.stats.snapshot()["recorded"] == 2
    # a resumed run re-sends the history from the CLI's own file: it goes on from this
    # session (Gemini CLI 0.61 re-sends each function response twice, a new input: a fork)
    gemini(proxy, home, project, "-p", "thanks", "--resume", "latest")
    proxy.flush()
    assert all(store.messages(s.name)[:4] == messages[:4] for s in store.sessions())
    data = b"".join(p.read_bytes() for p in store_path.iterdir() if p.is_file())
    assert KEY.encode() not in data and KEY[6:26].encode() not in data
    assert all(KEY not in line for line in proxy.lines)
