"""The quest, in Python, on sesstree: day 1, day 2 on the same session, a fork, and day 3.

    python examples/quest.py                       # offline: a scripted model on loopback
    python examples/quest.py --base-url http://localhost:11434/v1 --model llama3.1
    SESSTREE_BASE_URL=... SESSTREE_MODEL=... OPENAI_API_KEY=... python examples/quest.py

Sessions are kept in ``./sessions`` (``--store``); run ``sess log quest-2`` afterwards to walk
the history. The API key, if any, is read from ``OPENAI_API_KEY`` and never stored.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # for scripted_model, next to this file

from scripted_model import ScriptedModel

from sesstree import Agent, Node, OpenAIProvider, Store, open_store, tool

# -- the world: your code -----------------------------------------------------------------

PEOPLE = {
    "innkeeper": "The Cave of Echoes opens only to the Silver Key. Ask the mayor.",
    "mayor": "My daughter keeps the Silver Key. She'd trade it for a good lantern.",
    "old miner": "Key or no key, the west tunnel still leads in, if you can squeeze through.",
}
PRICES = {"lantern": 4, "rope": 2, "torch": 1}
purse = {"gold": 10}


@tool
def talk_to(npc: str) -> str:
    """Talk to someone in town. Returns what they say.

    Args:
        npc: who to talk to: innkeeper, mayor, old miner, ...
    """
    return PEOPLE.get(npc.lower(), f"The {npc} doesn't want to talk.")


@tool
def buy(item: str) -> str:
    """Buy an item at the shop. Returns the price and the gold left.

    Args:
        item: what to buy: lantern, rope or torch.
    """
    price = PRICES[item.lower()]  # an unknown item raises: the model is told, nothing crashes
    if price > purse["gold"]:
        return f"A {item} costs {price} gold; you have {purse['gold']}."
    purse["gold"] -= price
    return f"Bought a {item} for {price} gold; {purse['gold']} gold left."


# -- printing a readable transcript -------------------------------------------------------

def show(node: Node) -> None:
    """Print the events worth reading as they are recorded."""
    data = node.data
    if node.type == "user/message":
        print(f"  you    > {data['content']}")
    elif node.type == "tool/call":
        print(f"  model  > calls {data['name']}({data['arguments']})")
    elif node.type == "tool/result":
        print(f"  tool   > {data['content']}")
    elif node.type == "assistant/message" and data.get("content"):
        print(f"  model  > {data['content']}")


def quest(store: Store, provider: OpenAIProvider, name: str) -> Agent:
    """An agent on session `name`: a new name starts empty, a known one loads its history."""
    agent = Agent(provider=provider, tools=[talk_to, buy], session=store.session(name))
    agent.subscribe(show)
    return agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("SESSTREE_BASE_URL"),
                        help="OpenAI-compatible endpoint (default: the scripted offline model)")
    parser.add_argument("--model", default=os.environ.get("SESSTREE_MODEL"))
    parser.add_argument("--store", default="./sessions", help="store folder (./sessions)")
    parser.add_argument("--stream", action="store_true", help="stream the replies")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if not base_url:
            base_url = stack.enter_context(ScriptedModel())
            print(f"(no --base-url: using the scripted offline model at {base_url})")
        provider = OpenAIProvider(base_url, args.model or "scripted", stream=args.stream)
        stack.callback(provider.close)
        store = stack.enter_context(open_store(args.store))
        for old in ("quest-1", "quest-2"):
            if store.has_session(old):  # a second run starts over; the reflog keeps the old
                store.delete_session(old)

        print("\nDay 1, session quest-1")
        day1 = quest(store, provider, "quest-1")
        day1.run("I need to get into the Cave of Echoes. Find out what it takes, "
                 "and get what you can.")

        # ...the process could end here. Day 2: a new agent on the same session name.
        print("\nDay 2, session quest-1 again")
        day2 = quest(store, provider, "quest-1")
        print(f"  ({len(day2.messages())} messages read back; day 1 ended with "
              f"{len(day1.messages())})")
        day2.run("I got the Silver Key from the mayor's daughter. What now?")

        print("\nA fork: session quest-2, from where quest-1 is now")
        before = day2.messages()
        west = day2.fork("quest-2")
        west.subscribe(show)
        west.run("Suppose the key doesn't fit. Is there another way in?")

        untouched = store.session("quest-1").messages() == before
        print(f"\nquest-1: {len(before)} messages, untouched by the fork: {untouched}")
        print(f"quest-2: {len(west.messages())} messages, sharing quest-1's {len(before)}")

        # quest-1 goes on its own way: the two sessions now differ after their shared prefix.
        print("\nDay 3, back on quest-1")
        day2.run("I'm at the iron door with the key.")

        store.set_head_session("quest-1")  # what `sess log` and `sess status` show
        print(f"\nStored in {Path(args.store).resolve()}; try: sess --store {args.store} log "
              f"quest-2, or sess --store {args.store} log --graph --all")


if __name__ == "__main__":
    main()
