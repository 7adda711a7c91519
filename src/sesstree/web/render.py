"""Events as a conversation: what each stored event looks like on a session's page.

Message text is untrusted. It goes through markdown-it-py with raw HTML off (so ``<script>``
or ``onerror=`` in a message is text, escaped), and everything else reaches the page through
Jinja2's autoescape. The browser's Content-Security-Policy forbids inline script as a second
wall.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec
from markdown_it import MarkdownIt
from markupsafe import Markup

from ..node import Node, NodeId
from ..repo.folding import TurnStats, fold_turns
from ..repo.recorded import events_times
from ..text import TextStyle, content_text, json_text

__all__ = ["PAGE", "Item", "ToolCall", "conversation", "markdown", "pretty_json", "snippet"]

#: Longest text shown inline; the rest is on the node's page (its full JSON).
MAX_SHOWN = 20_000

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_md.enable(["table", "strikethrough"])
#: A message's content on a page: text parts as paragraphs, other parts as ``[type]``, and
#: content that is not text as indented JSON, clipped where the page would grow too long.
PAGE = TextStyle(placeholder="type", scalars=False, pretty=True, limit=MAX_SHOWN)


@lru_cache(maxsize=1024)
def markdown(text: str) -> Markup:
    """Markdown to HTML with raw HTML disabled: whatever the text holds renders as text."""
    if len(text) > MAX_SHOWN:
        text = text[:MAX_SHOWN] + f"\n\n… ({len(text) - MAX_SHOWN:,} more characters on the node's page)"
    return Markup(_md.render(text))  # markdown-it escapes all raw HTML: safe to mark


def pretty_json(value: Any, limit: int | None = MAX_SHOWN) -> str:
    """Indented JSON, clipped to ``limit`` characters."""
    return json_text(value, pretty=True, limit=limit)


def snippet(node: Node, width: int = 140) -> str:
    """One line saying what a node holds (for the forest and search results)."""
    data = node.data
    text = ""
    if isinstance(data, dict):
        if "content" in data:
            text = content_text(data.get("content"), PAGE)
        if not text and isinstance(data.get("tool_calls"), list):
            names = [str((c.get("function") or {}).get("name", "?")) for c in data["tool_calls"]
                     if isinstance(c, dict) and isinstance(c.get("function") or {}, dict)]
            text = "calls " + ", ".join(names)
        if not text:
            for key in ("summary", "message", "name", "reason", "kind", "trigger", "step"):
                if key in data:
                    value = data[key]
                    if isinstance(value, dict) and isinstance(value.get("kind"), str):
                        value = value["kind"]  # a turn's end reason: {"kind": "done"}
                    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
                    text = f"{key}: {text}" if key in ("reason", "kind", "step") else text
                    break
    elif isinstance(data, str):
        text = data
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class ToolCall(msgspec.Struct):
    """A tool call with its arguments and, once found, its result."""

    id: str
    name: str
    arguments: str
    result: str | None = None
    result_node: NodeId | None = None
    error: str | None = None


class Item(msgspec.Struct):
    """One row of the conversation: a message bubble or a note about the run."""

    id: NodeId
    type: str
    kind: str  # message, note, error, compaction, turn, usage
    role: str = ""
    html: Markup | None = None
    text: str = ""
    calls: list[ToolCall] = msgspec.field(default_factory=list)
    reasoning: str = ""
    raw: str = ""
    time: float | None = None
    #: Where ``time`` comes from: "event" (the event's own) or "reflog" (when this store
    #: recorded it: the event carries no time of its own).
    time_from: str = ""
    took: float | None = None  # a turn's or step's duration, from the reflog's times
    marked: str = ""  # why this item stands out: "interrupted", "error", "cut short"
    turn: NodeId | None = None  # a turn's row: the turn/start it sums from (when shown)


def _call_of(c: Any) -> ToolCall | None:
    if not isinstance(c, dict):
        return None
    fn = c.get("function") if isinstance(c.get("function"), dict) else {}
    assert isinstance(fn, dict)
    args = fn.get("arguments", c.get("arguments"))
    if isinstance(args, str):
        try:
            shown = pretty_json(msgspec.json.decode(args))
        except (msgspec.DecodeError, RecursionError):
            # Not JSON, or nested deeper than msgspec decodes (a model can emit "[[[[...").
            shown = args if len(args) <= MAX_SHOWN else (
                args[:MAX_SHOWN] + f"\n… ({len(args) - MAX_SHOWN:,} more characters)")
    else:
        shown = pretty_json(args)
    return ToolCall(str(c.get("id")), str(fn.get("name", c.get("name", "?"))), shown)


def _message_item(node: Node, data: dict[str, Any]) -> Item:
    role = str(data.get("role", node.type.split("/")[0]))
    content = content_text(data.get("content"), PAGE)
    item = Item(node.id, node.type, "message", role=role, html=markdown(content) if content else None)
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        item.calls = [c for c in map(_call_of, calls) if c is not None]
    for key in ("reasoning", "reasoning_content"):
        if isinstance(data.get(key), str):
            item.reasoning = data[key]
    if data.get("refusal"):
        item.marked = "refused"
    return item


def _note(node: Node, times: dict[NodeId, float], opened: dict[str, float | None]) -> Item:
    data = node.data if isinstance(node.data, dict) else {}
    t = node.type
    item = Item(node.id, t, "note", text=snippet(node, 300))
    if t in ("turn/start", "step/start"):
        opened[t.split("/")[0]] = times.get(node.id)
        item.kind = "turn"
        if t == "turn/start":
            trigger = data.get("trigger")
            kind = trigger.get("kind") if isinstance(trigger, dict) else trigger
            item.text = "turn started" + (f" ({kind})" if isinstance(kind, str) and kind else "")
        elif isinstance(data.get("protocol"), str):  # a call recorded by sess proxy
            model = data.get("model")
            item.text = f"{data['protocol']} call" + (f" to {model}" if isinstance(model, str) else "")
        else:
            item.text = f"step {data.get('step', '')}".rstrip()
    elif t in ("turn/end", "step/end"):
        start = opened.pop(t.split("/")[0], None)
        end = times.get(node.id)
        item.kind = "turn"
        if start is not None and end is not None:
            item.took = max(0.0, end - start)
        reason = data.get("reason")
        kind = reason.get("kind") if isinstance(reason, dict) else reason
        finish = data.get("finish_reason")
        if t == "turn/end":
            item.text = "turn ended" + (f": {kind}" if kind else "")
            if kind and kind not in ("done", "answer", "stop", "completed"):
                item.marked = "interrupted" if kind == "interrupted" else str(kind)
        else:
            item.text = (f"step {data.get('step', '')}".rstrip() + " ended"
                         + (f": {finish}" if finish else ""))
            status = data.get("status")
            if isinstance(status, int) and status >= 400:
                item.text += f" (HTTP {status})"
                item.marked = "error"
            if finish in ("length", "content_filter"):
                item.marked = "cut short"
            if data.get("incomplete"):
                item.marked = "incomplete"
                cut = data.get("cut_by")
                item.text += f", incomplete (cut by {cut})" if isinstance(cut, str) else ", incomplete"
    elif t == "usage":
        item.kind = "usage"
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else data
        assert isinstance(usage, dict)
        parts = [f"{k.replace('_tokens', '')} {v:,}" for k, v in usage.items()
                 if k.endswith("_tokens") and isinstance(v, int)]
        model = data.get("model")
        item.text = (f"{model} · " if isinstance(model, str) else "") + (" · ".join(parts) or "usage")
    elif t == "error":
        item.kind = "error"
        item.marked = "interrupted" if data.get("kind") == "interrupted" else "error"
        kind = data.get("kind")
        name = data.get("name")
        said = data.get("message")
        item.text = " ".join(p for p in (
            str(kind) if kind else "error",
            f"in {name}" if isinstance(name, str) else "",
            f"(call {data['tool_call_id']})" if data.get("tool_call_id") else "",
        ) if p) + (f": {said}" if isinstance(said, str) else "")
        if not isinstance(said, str) and not kind:
            item.text = snippet(node, 600) or "error"
    elif t == "compaction/marker":
        item.kind = "compaction"
        summary = data.get("summary")
        item.html = markdown(summary) if isinstance(summary, str) else None
    elif t in ("context/message", "steering/message"):
        item.kind = "message"
        item.role = t.split("/")[0]
        content = content_text(data.get("content") if data else node.data, PAGE)
        item.html = markdown(content) if content else None
    return item


#: How a turn ends when nothing went wrong.
_ENDED_WELL = frozenset({"done", "answer", "stop", "completed"})


def _turn_item(node: Node, turn: TurnStats, start: NodeId | None) -> Item:
    """The row a folded turn shows: what its bookkeeping says, summed."""
    # (Its duration is the row's "took", not said twice.)
    text = msgspec.structs.replace(turn, seconds=None).line()
    item = Item(node.id, node.type, "turn", text=text, took=turn.seconds, turn=start)
    if turn.reason is None:
        item.marked = "unfinished"
    elif turn.reason not in _ENDED_WELL:
        item.marked = "interrupted" if turn.reason == "interrupted" else turn.reason
    elif turn.finish in ("length", "content_filter"):
        item.marked = "cut short"
    return item


def conversation(nodes: list[Node], times: dict[NodeId, float], *, folded: bool = True,
                 context: int = 0) -> list[Item]:
    """The items of ``nodes`` (a path, oldest first): tool results and the agent's tool-call
    records folded into the call they answer, when the call is among ``nodes``.

    ``folded``: each agent turn's bookkeeping is one row, as every reading view folds it
    (:func:`sesstree.repo.folding.fold_turns`); otherwise every event is an item. The first
    ``context`` nodes only inform the fold (the start of a turn the others end) and give no
    item. ``times`` are the reflog's (when the store recorded each node); an event's own time
    (an importer's record) is shown before it.
    """
    rows = {r.node.id: r.turn for r in fold_turns(nodes, times)} if folded else None
    own = events_times(nodes)
    items: list[Item] = []
    calls: dict[str, ToolCall] = {}
    opened: dict[str, float | None] = {}
    start: NodeId | None = None  # the turn/start of the turn being read
    for i, node in enumerate(nodes):
        data = node.data
        if node.type == "turn/start":
            start = node.id
        shown = i >= context
        if rows is not None and node.id not in rows:
            continue  # folded into its turn's row
        turn = rows.get(node.id) if rows is not None else None
        if turn is not None:
            if shown:
                items.append(_stamp(_turn_item(node, turn, start), node, times, own))
            if node.type == "turn/end":
                start = None
            continue
        if node.type == "tool/result" and isinstance(data, dict):
            call = calls.get(str(data.get("tool_call_id")))
            if call is not None and call.result is None:
                call.result = content_text(data.get("content"), PAGE)[:MAX_SHOWN]
                call.result_node = node.id
                continue
        if node.type == "tool/call" and isinstance(data, dict) and str(data.get("id")) in calls:
            continue  # the loop's record of a call the assistant message already shows
        if node.type in ("user/message", "assistant/message", "system/message", "tool/result",
                         "message") and isinstance(data, dict):
            item = _message_item(node, data)
            if shown:  # (a call shown before this page's first item is not this page's)
                for c in item.calls:
                    calls[c.id] = c
        else:
            item = _note(node, times, opened)
            if node.type == "error" and isinstance(data, dict):
                call = calls.get(str(data.get("tool_call_id")))
                if call is not None:
                    call.error = str(data.get("message") or data.get("kind") or "error")
        if shown:
            items.append(_stamp(item, node, times, own))
    return items


def _stamp(item: Item, node: Node, times: dict[NodeId, float],
           own: dict[NodeId, float]) -> Item:
    item.raw = pretty_json({"id": node.id, "parent": node.parent, "type": node.type,
                            "data": node.data})
    if node.id in own:
        item.time, item.time_from = own[node.id], "event"
    elif node.id in times:
        item.time, item.time_from = times[node.id], "reflog"
    return item
