"""The agent loop: an OpenAI-compatible provider, tools, and an Agent recording every event.

``sess run`` lives in :mod:`sesstree.agent.command` and is imported by the CLI only, so
importing the loop does not import click.
"""

from __future__ import annotations

from .loop import Agent
from .provider import OpenAIProvider, Provider
from .tools import Tool, ToolOutcome, tool
from .wire import Completion

__all__ = [
    "Agent",
    "Completion",
    "OpenAIProvider",
    "Provider",
    "Tool",
    "ToolOutcome",
    "tool",
]
