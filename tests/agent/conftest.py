"""Fixtures for the agent tests: the scripted server, a store on disk, a fast-retry provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

from sesstree import OpenAIProvider, Store, open_store, tool


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "sessions") as s:
        yield s


@pytest.fixture
def provider(server: FakeOpenAI) -> Iterator[OpenAIProvider]:
    p = OpenAIProvider(server.url, "scripted", api_key=None, backoff=0.01, max_backoff=0.05,
                       timeout=10.0)
    yield p
    p.close()


class Town:
    """The quest's world: who says what, what the shop sells, and the gold."""

    def __init__(self) -> None:
        self.gold = 10
        self.said: list[str] = []
        self.people = {
            "innkeeper": "The cave opens only to the Silver Key. The mayor's daughter has it.",
            "mayor": "My daughter? She trades the key for a lantern.",
        }
        self.prices = {"lantern": 4, "rope": 2}

    def talk(self, npc: str) -> str:
        self.said.append(npc)
        return self.people.get(npc, f"{npc} shrugs.")

    def buy(self, item: str) -> str:
        price = self.prices[item]  # KeyError for unknown items: a tool that raises
        self.gold -= price
        return f"{item} bought for {price} gold; {self.gold} gold left"


def quest_tools(town: Town) -> list[Any]:
    """The seed's two tools over a town."""

    @tool
    def talk_to(npc: str) -> str:
        """Talk to someone in town. Returns what they say.

        Args:
            npc: who to talk to, e.g. "innkeeper".
        """
        return town.talk(npc)

    @tool
    def buy(item: str) -> str:
        """Buy an item at the shop. Returns the price and the gold left."""
        return town.buy(item)

    return [talk_to, buy]
