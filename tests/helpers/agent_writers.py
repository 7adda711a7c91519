"""Files written the way each agent writes its own: the records of a short session with a tool
call, for Claude Code, Codex, pi and Gemini CLI (its JSONL recording, its earlier whole JSON
document, a checkpoint), shaped after each tool's source and the real samples.

``session_lines(agent, n)`` gives the lines of a session of ``n`` turns, in the order the tool
appends them; the watch tests write them a few at a time (and half a line at a time).
Gemini CLI's shapes follow its ``chatRecordingService.ts`` and ``chatRecordingTypes.ts``:
a metadata line, each message appended when recorded and appended again when it changes
(tool calls, their results, tokens), ``{"$set": {"lastUpdated"}}`` after each message.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

__all__ = ["AGENTS", "gemini_document", "session_lines", "session_path"]

AGENTS = ("claude", "codex", "pi", "gemini")


def _ts(i: int) -> str:
    return f"2026-11-30T10:{i // 60:02d}:{i % 60:02d}.000Z"


def _id(seed: str, i: int, version: int = 4) -> str:
    u = uuid.uuid5(uuid.NAMESPACE_URL, f"{seed}/{i}")
    return str(uuid.UUID(int=(u.int & ~(0xF << 76)) | (version << 76)))


def session_path(root: Path, agent: str, seed: str) -> Path:
    """Where ``agent`` keeps a session, under a home folder ``root``."""
    sid = _id(seed, 0)
    if agent == "claude":
        return root / ".claude" / "projects" / "-work-p" / f"{sid}.jsonl"
    if agent == "codex":
        return (root / ".codex" / "sessions" / "2026" / "11" / "30"
                / f"rollout-2026-11-30T10-00-00-{_id(seed, 0, 7)}.jsonl")
    if agent == "pi":
        return (root / ".pi" / "agent" / "sessions" / "--work-p--"
                / f"2026-11-30T10-00-00-000Z_{sid}.jsonl")
    if agent == "gemini":
        return root / ".gemini" / "tmp" / "p" / "chats" / f"session-2026-11-30T10-00-{sid[:8]}.jsonl"
    raise ValueError(agent)


def session_lines(agent: str, seed: str, turns: int) -> list[str]:
    """The lines of one session of ``turns`` turns (a prompt, a tool call, its result, an
    answer), each a JSON object, in the order ``agent`` appends them."""
    make = {"claude": _claude, "codex": _codex, "pi": _pi, "gemini": _gemini}[agent]
    return [json.dumps(r, separators=(",", ":")) for r in make(seed, turns)]


def _claude(seed: str, turns: int) -> list[dict[str, Any]]:
    sid = _id(seed, 0)
    out: list[dict[str, Any]] = []
    parent = None
    n = 0

    def entry(kind: str, message: dict[str, Any]) -> None:
        nonlocal parent, n
        n += 1
        u = _id(seed, n)
        out.append({"parentUuid": parent, "isSidechain": False, "userType": "external",
                    "cwd": "/work/p", "sessionId": sid, "version": "2.1.152", "type": kind,
                    "message": message, "uuid": u, "timestamp": _ts(n)})
        parent = u

    for t in range(turns):
        entry("user", {"role": "user", "content": f"prompt {t}"})
        call = f"toolu_{seed}_{t}"
        entry("assistant", {"id": f"msg_{seed}_{t}a", "type": "message", "role": "assistant",
                            "model": "claude-x", "stop_reason": "tool_use", "content": [
                                {"type": "tool_use", "id": call, "name": "Bash",
                                 "input": {"command": f"ls {t}"}}]})
        entry("user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "content": f"out {t}"}]})
        entry("assistant", {"id": f"msg_{seed}_{t}b", "type": "message", "role": "assistant",
                            "model": "claude-x", "stop_reason": "end_turn",
                            "content": [{"type": "text", "text": f"answer {t}"}]})
    return out


def _codex(seed: str, turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"timestamp": _ts(0), "type": "session_meta", "payload": {
        "id": _id(seed, 0, 7), "cwd": "/work/p", "cli_version": "0.135.0",
        "base_instructions": {"text": "be brief"}}}]
    for t in range(turns):
        call = f"call_{seed}_{t}"
        out += [
            {"timestamp": _ts(4 * t + 1), "type": "response_item", "payload": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": f"prompt {t}"}]}},
            {"timestamp": _ts(4 * t + 2), "type": "response_item", "payload": {
                "type": "function_call", "name": "shell", "call_id": call,
                "arguments": json.dumps({"command": ["ls", str(t)]})}},
            {"timestamp": _ts(4 * t + 3), "type": "response_item", "payload": {
                "type": "function_call_output", "call_id": call, "output": f"out {t}"}},
            {"timestamp": _ts(4 * t + 4), "type": "response_item", "payload": {
                "type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": f"answer {t}"}]}},
        ]
    return out


def _pi(seed: str, turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": _id(seed, 0),
                                  "timestamp": _ts(0), "cwd": "/work/p"}]
    parent = None
    n = 0

    def entry(message: dict[str, Any]) -> None:
        nonlocal parent, n
        n += 1
        ident = f"{n:08x}"
        out.append({"type": "message", "id": ident, "parentId": parent, "timestamp": _ts(n),
                    "message": message})
        parent = ident

    for t in range(turns):
        call = f"call_{seed}_{t}"
        entry({"role": "user", "content": [{"type": "text", "text": f"prompt {t}"}]})
        entry({"role": "assistant", "stopReason": "toolUse", "content": [
            {"type": "toolCall", "id": call, "name": "bash", "arguments": {"command": "ls"}}]})
        entry({"role": "toolResult", "toolCallId": call, "toolName": "bash",
               "content": [{"type": "text", "text": f"out {t}"}]})
        entry({"role": "assistant", "stopReason": "stop",
               "content": [{"type": "text", "text": f"answer {t}"}]})
    return out


def _gemini_messages(seed: str, turns: int) -> list[list[dict[str, Any]]]:
    """Each turn's records as Gemini CLI appends them (a message again when it changes)."""
    turns_out = []
    for t in range(turns):
        user = {"id": _id(seed, 10 * t + 1), "timestamp": _ts(10 * t + 1), "type": "user",
                "content": [{"text": f"prompt {t}"}]}
        call = {"id": f"run_shell_command-{seed}-{t}", "name": "run_shell_command",
                "args": {"command": f"ls {t}"}, "status": "scheduled", "timestamp": _ts(10 * t + 2),
                "displayName": "Shell", "description": "", "renderOutputAsMarkdown": False}
        model = {"id": _id(seed, 10 * t + 2), "timestamp": _ts(10 * t + 2), "type": "gemini",
                 "content": "", "toolCalls": [call], "thoughts": [], "model": "gemini-2.5-pro"}
        done_call = {**call, "status": "success", "result": [{"functionResponse": {
            "id": call["id"], "name": "run_shell_command", "response": {"output": f"out {t}"}}}]}
        model_done = {**model, "toolCalls": [done_call],
                      "tokens": {"input": 100, "output": 5, "cached": 0, "total": 105}}
        answer = {"id": _id(seed, 10 * t + 3), "timestamp": _ts(10 * t + 3), "type": "gemini",
                  "content": f"answer {t}", "thoughts": [
                      {"subject": "Reading", "description": "the output", "timestamp": _ts(3)}],
                  "tokens": {"input": 120, "output": 4, "cached": 0, "total": 124},
                  "model": "gemini-2.5-pro"}
        turns_out.append([user, model, model_done, answer])
    return turns_out


def _gemini(seed: str, turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"sessionId": _id(seed, 0), "projectHash": "ab" * 32,
                                  "startTime": _ts(0), "lastUpdated": _ts(0), "kind": "main"}]
    for turn in _gemini_messages(seed, turns):
        for i, record in enumerate(turn):
            out.append(record)
            if i != 1:  # recordToolCalls appends no $set; recordMessage does
                out.append({"$set": {"lastUpdated": record["timestamp"]}})
    return out


def gemini_document(seed: str, turns: int) -> str:
    """The whole ``ConversationRecord`` as Gemini CLI wrote it before its JSONL recording
    (``JSON.stringify(conversation, null, 2)``), with each message as it ended."""
    messages = []
    for user, _, model_done, answer in _gemini_messages(seed, turns):
        messages += [user, model_done, answer]
    doc = {"sessionId": _id(seed, 0), "projectHash": "ab" * 32, "startTime": _ts(0),
           "lastUpdated": _ts(len(messages)), "messages": messages, "kind": "main"}
    return json.dumps(doc, indent=2)
