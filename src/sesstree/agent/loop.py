"""The agent loop: ask the model, run the tools it calls, repeat until it answers.

Every event is appended to the session the moment it exists, so a crash at any point loses
nothing that was already received. The loop is written once, as a generator that yields what
it needs done (a model call, a tool call) and records what comes back; :meth:`Agent.run` and
:meth:`Agent.arun` are two small drivers around it, which is why sync and async runs of the
same script record the very same events, with the very same ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterable
from typing import Any

import msgspec
from blake3 import blake3

from ..errors import AgentError, IncompleteReplyError, MaxTurnsExceeded, ProviderError, SesstreeError
from ..fmt import printable
from ..node import Node
from ..repo.session import Session
from .attempts import Attempts, end_cut_step
from .chunks import ChunkWriter
from .provider import Provider
from .tools import Tool, ToolOutcome, as_tools
from .wire import Completion

__all__ = ["INTERRUPTED_RESULT", "Agent"]

#: The result recorded for a call that started but whose process died before it returned.
INTERRUPTED_RESULT = (
    "Error: this tool call was interrupted (the process running it stopped before it "
    "returned); it may or may not have taken effect. Check before calling it again."
)


class _ModelCall(msgspec.Struct):
    step: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


class _ToolCall(msgspec.Struct):
    tool: Tool
    arguments: Any


_Effect = _ModelCall | _ToolCall


class _Done(msgspec.Struct):
    """The turn's end, carried out of a worker thread (a StopIteration cannot be)."""

    answer: str


def _advance(step: Callable[..., _Effect], arg: Any) -> _Effect | _Done:
    try:
        return step(arg)
    except StopIteration as stop:
        return _Done(stop.value)


async def _step_in_thread(step: Callable[..., _Effect], arg: Any) -> _Effect | _Done:
    """Run one step of a turn (``next``, ``send`` or ``throw``) in a worker thread.

    A step that has started runs to its end even if the task is cancelled meanwhile (a
    generator cannot take an exception while it runs); the cancellation is then raised here,
    and the driver hands it to the turn, which records it as usual.
    """
    pending = asyncio.ensure_future(asyncio.to_thread(_advance, step, arg))
    cancelled = False
    while True:
        try:
            outcome = await asyncio.shield(pending)
            break
        except asyncio.CancelledError:
            if pending.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return outcome
_Turn = Generator[_Effect, Any, str]

#: Finish reasons that mean the answer is not the whole answer the model would have given.
_CUT_SHORT = frozenset({"length", "content_filter"})


class Agent:
    """A model, its tools, and the session it reads and writes.

    ``max_turns`` bounds the model calls of one :meth:`run` (each tool round-trip is one);
    ``system`` is recorded as a ``system/message`` when the session is empty; ``stream``
    (default: the provider's) streams replies and records them as ``assistant/chunk`` events
    every ``chunk_interval`` seconds while they arrive.
    """

    def __init__(
        self,
        provider: Provider,
        session: Session,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        system: str | None = None,
        max_turns: int = 10,
        stream: bool | None = None,
        chunk_interval: float = 0.2,
    ) -> None:
        self.provider = provider
        self.session = session
        self.tools: list[Tool] = as_tools(list(tools))
        self._by_name: dict[str, Tool] = {}
        for t in self.tools:
            if t.name in self._by_name:
                raise ValueError(f"two tools are named {t.name!r}")
            self._by_name[t.name] = t
        self.system = system
        self.max_turns = max_turns
        self.stream = stream if stream is not None else bool(getattr(provider, "stream", False))
        self.chunk_interval = chunk_interval

    def __repr__(self) -> str:
        return f"<Agent on {self.session.name}, {len(self.tools)} tools>"

    # -- public API ---------------------------------------------------------------------------

    def run(self, prompt: str, *, max_turns: int | None = None) -> str:
        """Add ``prompt`` as a user message and loop until the model answers; return the answer.

        An answer cut short by the server (``finish_reason`` ``length`` or ``content_filter``)
        is returned too, and the turn is recorded as ended with that reason.

        Raises:
            MaxTurnsExceeded: no answer after ``max_turns`` model calls (the turn is recorded
                as ended with reason ``max_turns``).
            IncompleteReplyError: the provider's retries ran out and the last attempt's stream
                was cut before its reply was whole (a cut stream is retried like a 503); each
                cut attempt is recorded as a step ended ``incomplete``, the turn as ended
                ``incomplete``.
            ProviderError: the endpoint failed after its retries (recorded as an error).
        """
        return self._drive(self._turn({"kind": "user"}, prompt, max_turns))

    async def arun(self, prompt: str, *, max_turns: int | None = None) -> str:
        """The asyncio twin of :meth:`run`; async tools are awaited, sync ones called."""
        return await self._adrive(self._turn({"kind": "user"}, prompt, max_turns))

    def resume(self, *, max_turns: int | None = None) -> str:
        """Continue the session without a new prompt (after a crash, or a manual edit).

        Pending tool calls are settled first (see :meth:`run`), then the model is asked again.
        """
        return self._drive(self._turn({"kind": "resume"}, None, max_turns))

    async def aresume(self, *, max_turns: int | None = None) -> str:
        """The asyncio twin of :meth:`resume`."""
        return await self._adrive(self._turn({"kind": "resume"}, None, max_turns))

    def fork(self, name: str) -> Agent:
        """A new agent on a fork of this session (O(1)); this session is left as it is."""
        return Agent(
            self.provider,
            self.session.fork(name),
            self.tools,
            system=self.system,
            max_turns=self.max_turns,
            stream=self.stream,
            chunk_interval=self.chunk_interval,
        )

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages the model would be sent now: the session's sending view."""
        return self.session.sending_view().messages

    def subscribe(self, callback: Callable[[Node], None]) -> Callable[[], None]:
        """Call ``callback(node)`` after every event the loop appends; returns an unsubscribe."""
        return self.session.subscribe(callback)

    def flush(self) -> None:
        """A durability point: everything recorded so far is committed when this returns."""
        self.session.flush()

    async def aflush(self) -> None:
        """Await a durability point (appends commit as they happen, so this does not block)."""
        self.session.flush()

    # -- drivers ------------------------------------------------------------------------------

    def _drive(self, turn: _Turn) -> str:
        try:
            effect = next(turn)
            while True:
                try:
                    result: Any = self._fulfil(effect)
                except BaseException as exc:  # also KeyboardInterrupt: recorded as cancelled
                    effect = turn.throw(exc)
                    continue
                effect = turn.send(result)
        except StopIteration as stop:
            answer: str = stop.value
            return answer

    def _fulfil(self, effect: _Effect) -> Completion | ToolOutcome:
        if isinstance(effect, _ToolCall):
            return effect.tool.run(effect.arguments)
        writer = ChunkWriter(self.session, self.chunk_interval)
        try:
            completion = self.provider.complete(
                effect.messages,
                effect.tools,
                stream=self.stream,
                on_delta=writer if self.stream else None,
                on_retry=Attempts(self.session, effect.step, writer, self._redact),
            )
        except BaseException:
            writer.flush_quietly()  # a reply that stopped part-way keeps what arrived
            raise
        writer.flush()
        return completion

    async def _adrive(self, turn: _Turn) -> str:
        # Each step of the turn records events in the store: it runs in a worker thread, so a
        # store on a server (a round trip an event) never holds up the event loop.
        effect = await _step_in_thread(next, turn)
        while not isinstance(effect, _Done):
            try:
                result: Any = await self._afulfil(effect)
            except BaseException as exc:  # also CancelledError: recorded as cancelled
                effect = await _step_in_thread(turn.throw, exc)
                continue
            effect = await _step_in_thread(turn.send, result)
        return effect.answer

    async def _afulfil(self, effect: _Effect) -> Completion | ToolOutcome:
        if isinstance(effect, _ToolCall):
            return await effect.tool.arun(effect.arguments)
        writer = ChunkWriter(self.session, self.chunk_interval)
        try:
            completion = await self.provider.acomplete(
                effect.messages,
                effect.tools,
                stream=self.stream,
                on_delta=writer if self.stream else None,
                on_retry=Attempts(self.session, effect.step, writer, self._redact),
            )
        except BaseException:
            writer.flush_quietly()  # a reply that stopped part-way keeps what arrived
            raise
        writer.flush()
        return completion

    def _redact(self, text: str) -> str:
        # The provider knows the secrets (its API key, credential headers); a tool that prints
        # its environment or an error that quotes a request must not write them to the store.
        redact = getattr(self.provider, "redact", None)
        return str(redact(text)) if callable(redact) else text

    # -- the loop, once -----------------------------------------------------------------------

    def _turn(self, trigger: dict[str, Any], prompt: str | None, max_turns: int | None) -> _Turn:
        # A turn is one reflog entry (each event is still committed as it happens): `sess
        # reflog` lists turns, and NAME@{1} is the session before the last one.
        reason = "run: " + (printable(prompt, 60) if prompt is not None else "resume")
        with self.session.log_group(reason):
            return (yield from self._turn_events(trigger, prompt, max_turns))

    def _turn_events(
        self, trigger: dict[str, Any], prompt: str | None, max_turns: int | None
    ) -> _Turn:
        limit = self.max_turns if max_turns is None else max_turns
        if limit < 1:
            raise ValueError("max_turns must be at least 1")
        s = self.session
        yield from self._settle_interrupted()
        if prompt is None and len(s) == 0:
            raise AgentError(f"session {s.name} is empty: there is nothing to resume")
        if self.system is not None and len(s) == 0:
            s.append("system/message", {"role": "system", "content": self.system})
        s.append("turn/start", {"trigger": trigger})
        try:
            if prompt is not None:
                s.append("user/message", {"role": "user", "content": prompt})
            for step in range(1, limit + 1):
                ended = yield from self._step(step)
                if ended is not None:
                    answer, finish = ended
                    kind = finish if finish in _CUT_SHORT else "answer"
                    s.append("turn/end", {"reason": {"kind": kind}, "steps": step})
                    return answer
            raise MaxTurnsExceeded(
                f"no answer after {limit} model calls in session {s.name}; "
                "resume() continues it"
            )
        except MaxTurnsExceeded:
            self._end({"kind": "max_turns", "max_turns": limit})
            raise
        except (KeyboardInterrupt, GeneratorExit) as exc:
            self._end({"kind": "cancelled", "by": type(exc).__name__})
            raise
        except Exception as exc:
            self._record_error(exc)
            raise
        except BaseException as exc:  # asyncio.CancelledError and other exits
            self._end({"kind": "cancelled", "by": type(exc).__name__})
            raise

    def _record_error(self, exc: Exception) -> None:
        kind = "provider" if isinstance(exc, ProviderError) else "loop"
        message = self._redact(str(exc))
        data: dict[str, Any] = {"kind": kind, "type": type(exc).__name__, "message": message}
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            data["status"] = status
        try:
            self.session.append("error", data)
        except SesstreeError:
            pass  # the store itself failed (e.g. a conflict): the original error matters more
        # An incomplete reply is its own end: the chunks hold part of a reply, and the next
        # run must ask again rather than take them for an answer.
        end = "incomplete" if isinstance(exc, IncompleteReplyError) else "error"
        self._end({"kind": end, "error": message})

    def _end(self, reason: dict[str, Any]) -> None:
        try:
            self.session.append("turn/end", {"reason": reason})
        except SesstreeError:
            pass  # as above: never hide the error that ended the turn

    def _step(self, step: int) -> Generator[_Effect, Any, tuple[str, str | None] | None]:
        """One model call and the tools it calls; ``(answer, finish_reason)`` when it answered."""
        s = self.session
        s.append("step/start", {"step": step})
        # The sending view, not the exact history: after a failed turn the history ends with
        # the user's message, and the next prompt would make two in a row, which strict chat
        # templates refuse on every request after. The view joins them (and answers a call
        # with no result) and leaves the stored events as they are.
        try:
            completion: Completion = yield _ModelCall(
                step, s.sending_view().messages, [t.schema() for t in self.tools]
            )
        except IncompleteReplyError:
            # The last attempt was cut too (the provider retried the others): its chunks,
            # flushed already, end as an incomplete step, like each cut attempt before it.
            try:
                end_cut_step(s, step)
            except SesstreeError:
                pass  # the store failed: the reply's error matters more (see _record_error)
            raise
        message = completion.message
        calls: list[dict[str, Any]] = message.get("tool_calls") or []
        generated = set(completion.missing_ids)
        for i in generated:
            # Deterministic local ids: the same history and reply give the same id, and the
            # head makes them unique across the session.
            digest = blake3(f"{s.head}:{i}".encode()).hexdigest()[:24]
            calls[i]["id"] = f"call_{digest}"
        s.append("assistant/message", message)
        if completion.usage is not None:
            s.append("usage", {"model": completion.model or self.provider.model,
                               "usage": completion.usage})
        if completion.inline_tool_call:
            raise ProviderError(
                "the model wrote a tool call as text and the server did not parse it; "
                "check the server's tool-calling support for this model (e.g. vLLM's "
                "--enable-auto-tool-choice, a native tool-use model in LM Studio)"
            )
        if not calls:
            s.append("step/end", {"step": step, "finish_reason": completion.finish_reason})
            content = message.get("content")
            return (content if isinstance(content, str) else "", completion.finish_reason)
        for i, call in enumerate(calls):
            raw = completion.raw_arguments[i] if i < len(completion.raw_arguments) else None
            yield from self._call(
                call, raw, generated=i in generated, truncated=i in completion.truncated
            )
        s.append("step/end", {"step": step, "finish_reason": completion.finish_reason,
                              "tool_calls": len(calls)})
        return None

    def _call(
        self, call: dict[str, Any], raw: Any, *, generated: bool = False, truncated: bool = False
    ) -> Generator[_Effect, Any, ToolOutcome]:
        """Record ``tool/call``, run the call (or explain why not), record ``tool/result``."""
        s = self.session
        name = str(call["function"]["name"])
        record: dict[str, Any] = {"id": call["id"], "name": name, "arguments": raw}
        if generated:
            record["id_generated"] = True
        s.append("tool/call", record)
        tool = self._by_name.get(name)
        if truncated:
            error = (f"the call to {name} was cut off (the reply hit the token limit); "
                     "its arguments are incomplete, so it was not run")
            outcome = ToolOutcome(f"Error: {error}", error=error)
        elif tool is None:
            error = f"there is no tool named {name!r}; the tools are: " + (
                ", ".join(self._by_name) or "(none)")
            outcome = ToolOutcome(f"Error: {error}", error=error)
        else:
            outcome = yield _ToolCall(tool, raw)
        s.append("tool/result", {"role": "tool", "tool_call_id": call["id"],
                                 "content": self._redact(outcome.content)})
        if outcome.error is not None:
            s.append("error", {"kind": "tool", "tool_call_id": call["id"], "name": name,
                               "message": self._redact(outcome.error)})
        return outcome

    def _settle_interrupted(self) -> Generator[_Effect, Any, None]:
        """Close what a crashed run left open, before a new turn starts.

        A call of the last assistant message with no result is settled by whether it had
        started: with no ``tool/call`` event it never ran, so it is run now; with one, it may
        have run (side effects and all), so it gets an error result saying it was interrupted
        rather than being run twice. A turn with no ``turn/end`` is ended as ``interrupted``.
        """
        events = self.session.events()
        open_turn = False
        for node in reversed(events):
            if node.type == "turn/end":
                break
            if node.type == "turn/start":
                open_turn = True
                break
        last_assistant = None
        for pos in range(len(events) - 1, -1, -1):
            if events[pos].type == "assistant/message":
                last_assistant = pos
                break
        if last_assistant is not None:
            message = events[last_assistant].data
            later = events[last_assistant + 1:]
            answered = {str(n.data.get("tool_call_id")) for n in later
                        if n.type == "tool/result" and isinstance(n.data, dict)}
            started = {str(n.data.get("id")): n.data for n in later
                       if n.type == "tool/call" and isinstance(n.data, dict)}
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls if isinstance(calls, list) else []:
                if not isinstance(call, dict):
                    continue
                cid = str(call.get("id"))
                if cid in answered:
                    continue
                if cid in started:
                    self.session.append("tool/result", {"role": "tool", "tool_call_id": cid,
                                                        "content": INTERRUPTED_RESULT})
                    self.session.append("error", {"kind": "interrupted", "tool_call_id": cid,
                                                  "name": started[cid].get("name")})
                else:
                    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                    assert isinstance(fn, dict)
                    yield from self._call(call, fn.get("arguments"))
        if open_turn:
            self._end({"kind": "interrupted"})
