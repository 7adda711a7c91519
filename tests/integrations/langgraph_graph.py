"""A LangGraph agent for the end-to-end tests, the same in every process that runs it: a
``StateGraph`` over ``MessagesState`` with a tool node and a scripted chat model (a tool
call for each question, then an answer built from the tool's result), offline."""

from __future__ import annotations

import re
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class ScriptedModel(BaseChatModel):
    """Asks the ``add`` tool about the two numbers of the last question, then answers."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        last = messages[-1]
        calls = sum(isinstance(m, ToolMessage) for m in messages)
        if isinstance(last, HumanMessage):
            a, b = (int(x) for x in re.findall(r"\d+", str(last.content))[:2])
            reply = AIMessage("", id=f"ai-call-{len(messages)}", tool_calls=[
                {"name": "add", "args": {"a": a, "b": b}, "id": f"call-{calls + 1}"}])
        else:
            reply = AIMessage(f"the answer is {last.content}", id=f"ai-answer-{len(messages)}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def build(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent graph, checkpointed by ``saver``."""
    model = ScriptedModel().bind_tools([add])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def texts(state: Any) -> list[str]:
    """The messages of a state as ``TYPE:content`` lines."""
    return [f"{m.type}:{m.content}" for m in state.values["messages"]]
