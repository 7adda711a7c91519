"""Stores for the tests of the reading views (log, log --graph, the web pages): the README's
quest as ``examples/quest.py`` records it, and a session whose replies were streamed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sesstree import Agent, OpenAIProvider, open_store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from quest import buy, talk_to  # noqa: E402 - the quest's tools, from examples/
from scripted_model import ScriptedModel  # noqa: E402 - found through the path set above

#: Prompts the scripted model answers with tool calls and a reply of a dozen words or more.
PROMPTS = [
    "I need to get into the Cave of Echoes. Find out what it takes, and get what you can.",
    "I got the Silver Key from the mayor's daughter. What now?",
    "I'm at the iron door with the key.",
    "Suppose the key doesn't fit. Is there another way in?",
]


def quest(folder: Path) -> Path:
    """Run examples/quest.py in ``folder``; the store it made (``folder/sessions``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSTREE_")}
    subprocess.run([sys.executable, str(ROOT / "examples" / "quest.py")], cwd=folder, env=env,
                   capture_output=True, text=True, timeout=120, check=True)
    return folder / "sessions"


def streamed(store_path: Path | str, name: str = "chat", turns: int = 4) -> None:
    """Session ``name``: ``turns`` agent turns whose replies were streamed word by word, each
    delta recorded as an ``assistant/chunk``, as ``sess run`` records a stream."""
    with ScriptedModel() as url, open_store(store_path) as store:
        provider = OpenAIProvider(url, "scripted", stream=True)
        try:
            agent = Agent(provider=provider, session=store.session(name), chunk_interval=0,
                          tools=[talk_to, buy])
            for i in range(turns):
                agent.run(PROMPTS[i % len(PROMPTS)])
            store.set_head_session(name)
        finally:
            provider.close()
