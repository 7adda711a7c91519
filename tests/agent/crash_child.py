"""Run by test_agent_crash in a subprocess that the test kills with SIGKILL.

Usage: crash_child.py STORE BASE_URL MODE, MODE "tool" (the tool blocks until killed) or
"stream" (the reply streams, then the server stalls until the test kills this process).
"""

from __future__ import annotations

import sys
import time

from sesstree import Agent, OpenAIProvider, open_store, tool


@tool
def dig(depth: int) -> str:
    """Dig down. Blocks here until the test kills the process."""
    time.sleep(60)
    return "never returned"


def main() -> None:
    store_dir, base_url, mode = sys.argv[1:4]
    store = open_store(store_dir)
    provider = OpenAIProvider(base_url, "scripted", max_retries=0, timeout=60)
    agent = Agent(provider, store.session("quest-1"), [dig], stream=mode == "stream",
                  chunk_interval=0)
    agent.run("Dig to the cave.")


if __name__ == "__main__":
    main()
