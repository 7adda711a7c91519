"""Tools: schemas from hints and docstrings, validation before the call, errors the model reads."""

from __future__ import annotations

from typing import Literal

import pytest
from conftest import Town, quest_tools
from fake_openai import FakeOpenAI, call, message

from sesstree import Agent, OpenAIProvider, Store, Tool, tool


def test_schema_from_hints_and_docstring() -> None:
    @tool(name="move")
    def go(direction: Literal["north", "south"], steps: int = 1, note: str | None = None) -> str:
        """Walk somewhere.

        Args:
            direction: where to.
            steps: how far,
                in paces.

        Returns:
            where you ended up.
        """
        return f"{direction}{steps}"

    schema = go.schema()["function"]
    assert schema["name"] == "move"
    assert schema["description"] == "Walk somewhere."
    params = schema["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["direction"]
    assert params["properties"]["direction"]["enum"] == ["north", "south"]
    assert params["properties"]["direction"]["description"] == "where to."
    assert params["properties"]["steps"] == {
        "type": "integer", "default": 1, "description": "how far, in paces."}
    assert go("north", 2) == "north2"  # still a plain function
    plain = Tool(lambda x: x, name="echo", description="Echo it.")
    assert plain.schema()["function"]["description"] == "Echo it."


def test_validation_before_the_call() -> None:
    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count."""
        ran.append(n)
        return n

    assert count.validate('{"n": 3}') == ({"n": 3}, None)
    assert count.validate({"n": 3}) == ({"n": 3}, None)  # already an object (some proxies)
    for bad, words in [
        ('{"n": "three"}', "Expected `int`, got `str`"),
        ('{"n": 1', "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"n": 1, "m": 2}', "unknown field `m`"),
        ("{}", "missing required field `n`"),
        ('{"n": {"value": 1}}', "Expected `int`, got `object`"),
    ]:
        kwargs, problem = count.validate(bad)
        assert kwargs is None and problem is not None and words in problem, (bad, problem)
        assert count.run(bad).error is not None
    assert ran == []


def test_tool_errors_become_results(server: FakeOpenAI, provider: OpenAIProvider,
                                    store: Store) -> None:
    town = Town()
    server.add(
        message(tool_calls=[
            call("buy", '{"item": "dragon"}', id="c1"),              # the tool raises KeyError
            call("buy", '{"item": 7}', id="c2"),                     # wrong type
            call("talk_to", '{"npc": "mayor"', id="c3"),             # invalid JSON
            call("talk_to", {"npc": {"name": "mayor"}}, id="c4"),    # object, not a string
            call("fly", "{}", id="c5"),                              # no such tool
            call("talk_to", {"npc": "innkeeper"}, id="c6"),          # an object: accepted
        ]),
        message("Sorry, the shop has no dragons."),
    )
    agent = Agent(provider, store.session("q"), quest_tools(town))
    assert agent.run("buy a dragon") == "Sorry, the shop has no dragons."
    results = {m["tool_call_id"]: m["content"] for m in agent.messages() if m["role"] == "tool"}
    assert results["c1"] == "Error: buy raised KeyError: 'dragon'"
    assert "Expected `str`, got `int`" in results["c2"]
    assert "not valid JSON" in results["c3"]
    assert "Expected `str`, got `object`" in results["c4"]
    assert "no tool named 'fly'" in results["c5"] and "talk_to, buy" in results["c5"]
    assert results["c6"].startswith("The cave opens")
    assert town.said == ["innkeeper"]
    errors = [n.data for n in agent.session.events() if n.type == "error"]
    assert [e["tool_call_id"] for e in errors] == ["c1", "c2", "c3", "c4", "c5"]
    assert all(e["kind"] == "tool" for e in errors)
    # The raw arguments stay in tool/call; the replayed message carries valid JSON only,
    # because a server like Ollama rejects the next request otherwise.
    calls = {n.data["id"]: n.data for n in agent.session.events() if n.type == "tool/call"}
    assert calls["c3"]["arguments"] == '{"npc": "mayor"'
    sent = server.requests[1]["messages"][1]["tool_calls"]
    assert [c["function"]["arguments"] for c in sent] == [
        '{"item": "dragon"}', '{"item": 7}', "{}", '{"npc": {"name": "mayor"}}', "{}",
        '{"npc": "innkeeper"}']


def test_tool_definition_errors() -> None:
    with pytest.raises(ValueError, match="tool name"):
        Tool(lambda: None, name="bad name")
    with pytest.raises(TypeError, match=r"\*args"):
        tool(name="varargs")(lambda *a: None)
    with pytest.raises(ValueError, match="two tools"):
        Agent(OpenAIProvider("http://127.0.0.1:9/v1"), None, [tool(Town().talk), tool(Town().talk)])  # type: ignore[arg-type]
