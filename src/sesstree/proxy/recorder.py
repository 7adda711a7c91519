"""Recording one model call into the store: which session it belongs to, and the write.

A call is recorded when its reply has passed through (or was cut): the request's history is
matched against the store (:class:`~sesstree.proxy.paths.PathIndex`), and only what follows
the longest known prefix is written, with the call itself (``step/start`` with what the
request asked for, the reply, ``usage``, ``step/end``).

The session:

- ``X-Sess-Session: NAME``: session NAME. If the history does not continue where NAME is, NAME
  follows the client to the new path and the path it left is kept as a new session
  ``NAME-fork-N``;
- else the session whose head the history continues is fast-forwarded;
- else, if the history shares at least one user or assistant message with a stored path, a new
  session ``NAME-fork-N`` forks from the last shared node, NAME the session walked through it;
- else (nothing known, or only the system prompt) a new session, named after the first words
  of the first user message.

Every ref move is a compare-and-set: if another writer moved the session meanwhile, the index
is refreshed and the choice made again.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import ConflictError, RefExistsError, SesstreeError
from ..events import MESSAGE_TYPES
from ..node import Node, NodeId, make_node, session_ref
from ..repo.store import Store, raw_node
from .canonical import roll, units
from .paths import ROOT, Candidate, PathIndex, WalkState
from .protocols import Event, ParsedRequest
from .replies import ReplyResult

__all__ = ["Exchange", "Outcome", "Recorder", "Stats", "redact"]

_ATTEMPTS = 8
_json = msgspec.json.Encoder()
_SECRET_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-]{16,}|sk-ant-[A-Za-z0-9_\-]{16,})")


class Stats:
    """Counters of a proxy, safe to bump from any thread."""

    NAMES = ("requests", "recorded", "passed_through", "dedup_hits", "new_nodes",
             "prefix_misses", "resent_unmatched", "already_stored", "upstream_errors",
             "incomplete", "ref_conflicts", "record_failures", "refused")
    #: Counted per session, for each call recorded into it.
    SESSION_NAMES = ("calls", "resent", "matched", "unmatched", "divergences")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.NAMES, 0)
        self._sessions: dict[str, dict[str, int]] = {}

    def add_session(self, name: str, resent: int, unmatched: int) -> None:
        """Count one call recorded into session ``name``: ``resent`` units of its history had
        been sent before, ``unmatched`` of them did not match the store."""
        with self._lock:
            counts = self._sessions.get(name)
            if counts is None:
                counts = self._sessions[name] = dict.fromkeys(self.SESSION_NAMES, 0)
            counts["calls"] += 1
            counts["resent"] += resent
            counts["matched"] += resent - unmatched
            counts["unmatched"] += unmatched
            counts["divergences"] += unmatched > 0

    def sessions(self) -> dict[str, dict[str, int]]:
        """The per-session counters, now, by session name."""
        with self._lock:
            return {name: dict(counts) for name, counts in sorted(self._sessions.items())}

    def add(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        with self._lock:
            self._counts[name] += n

    def divergence_lines(self) -> list[str]:
        """One line per session some of whose re-sent messages did not match the store."""
        return [f"{name}: {c['unmatched']} of {c['resent']} re-sent messages did not match "
                f"the store ({c['divergences']} of {c['calls']} calls diverged)"
                for name, c in self.sessions().items() if c["unmatched"]]

    def snapshot(self) -> dict[str, int]:
        """Every counter, now."""
        with self._lock:
            return dict(self._counts)

    def line(self) -> str:
        """The counters as one line."""
        snap = self.snapshot()
        return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in snap.items())


class Exchange(msgspec.Struct):
    """One recorded model call, as it passed through."""

    request: ParsedRequest
    reply: ReplyResult
    status: int | None
    #: The session named by the client (``X-Sess-Session``), if any.
    session: str | None = None
    #: The upstream's error (status >= 400, or it could not be reached), as JSON or text.
    error: Any = None
    #: "client" or "upstream" when the reply stream was cut before its end.
    cut_by: str | None = None
    #: Values that must never be stored (API keys and tokens of the headers, query values,
    #: the upstream URL's password), longest first.
    secrets: list[str] = msgspec.field(default_factory=list)


class Outcome(msgspec.Struct):
    """Where a call was recorded."""

    session: str
    #: fast-forward, new, fork, moved (a named session that followed an edited history), or
    #: stored (the history and the reply were both stored already: nothing written)
    kind: str
    new_nodes: int
    #: Units of the history found in the store, not written again.
    dedup: int
    head: NodeId
    miss: bool = False
    #: Units of the history sent before (up to its last model output): each matched the
    #: store (``dedup`` counts them, and the new input after them) or not (``unmatched``).
    resent: int = 0
    #: Re-sent units that did not match: they were written again, on a fork or a new path.
    unmatched: int = 0
    #: The session a diverging history left, if any.
    diverged_from: str | None = None


def redact(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` with every occurrence of a secret, and anything shaped like an API key,
    replaced by ``[redacted]``, in strings, lists and maps (their keys included)."""
    if isinstance(value, str):
        for secret in secrets:
            if secret:
                value = value.replace(secret, "[redacted]")
        return _SECRET_SHAPES.sub("[redacted]", value) if "sk-" in value else value
    if isinstance(value, dict):
        # Keys too: a tool's arguments or a provider's error may hold a key as a map's key.
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = redact(k, secrets) if isinstance(k, str) else k
            if key != k:
                # Two keys redacted alike must not overwrite each other's value.
                n, base = 2, key
                while key in out or key in value:
                    key, n = f"{base} ({n})", n + 1
            out[key] = redact(v, secrets)
        return out
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value


def _needs_redaction(events: Sequence[Event], secrets: Sequence[str]) -> bool:
    blob = _json.encode([d for _, d in events]).decode()
    # Substring tests run at memory speed; the pattern only where a key could be.
    # A secret is looked for as JSON writes it too (a quote or backslash in it is escaped).
    return any(s and (s in blob or _json.encode(s)[1:-1].decode() in blob)
               for s in secrets) or (
        "sk-" in blob and _SECRET_SHAPES.search(blob) is not None)


_WORD = re.compile(r"[a-z0-9]+")


def _slug(events: Sequence[Event]) -> str:
    for type, data in events:
        if type == "user/message" and isinstance(data, dict):
            content = data.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            words = _WORD.findall(str(content or "").lower())
            slug = ""
            for word in words[:6]:
                if len(slug) + len(word) + 1 > 40:
                    break
                slug = f"{slug}-{word}" if slug else word[:40]
            return slug or "chat"
    return "chat"


_FORK_SUFFIX = re.compile(r"-fork-\d+$")


class _Stale(Exception):
    """The decision needs the index refreshed from the store first."""


class Recorder:
    """Records exchanges into one store; its methods run on one thread at a time."""

    def __init__(self, store: Store, stats: Stats | None = None) -> None:
        self.store = store
        self.stats = stats if stats is not None else Stats()
        self.index = PathIndex(store)
        self._lock = threading.Lock()

    def record(self, ex: Exchange) -> Outcome:
        """Write one exchange; where it went.

        Raises:
            SesstreeError: the store failed (nothing of this exchange was written).
        """
        with self._lock:
            events = list(ex.request.events)
            call = self._call_events(ex)
            if _needs_redaction(events + call, ex.secrets):
                events = [(t, redact(d, ex.secrets)) for t, d in events]
                call = [(t, redact(d, ex.secrets)) for t, d in call]
            # The index is refreshed from the store only when the decision could depend on what
            # other writers did: a fast-forward is checked by its compare-and-set anyway, but a
            # fork or a new session made from a stale index would split a conversation another
            # writer went on with. (Refreshing reads every ref: not on every call.)
            fresh = False
            for _ in range(_ATTEMPTS):
                try:
                    outcome = self._record_once(ex, events, call, fresh)
                except _Stale:
                    self.index.refresh()
                    fresh = True
                    continue
                except (ConflictError, RefExistsError):
                    self.stats.add("ref_conflicts")
                    self.index.refresh()
                    fresh = True
                    continue  # another writer moved it: look again
                self._count(ex, outcome)
                return outcome
            raise ConflictError("the session kept moving under concurrent writers")

    def _count(self, ex: Exchange, outcome: Outcome) -> None:
        stats = self.stats
        stats.add("recorded")
        stats.add("dedup_hits", outcome.dedup)
        stats.add("new_nodes", outcome.new_nodes)
        if outcome.miss:
            stats.add("prefix_misses")
        stats.add("resent_unmatched", outcome.unmatched)
        if outcome.session:
            stats.add_session(outcome.session, outcome.resent, outcome.unmatched)
        if outcome.kind == "stored":
            stats.add("already_stored")
        if ex.cut_by is not None:
            stats.add("incomplete")

    def _call_events(self, ex: Exchange) -> list[Event]:
        params = dict(ex.request.params)
        start: dict[str, Any] = {"protocol": ex.request.protocol, "model": params.pop("model", None),
                                 "params": params}
        if ex.request.previous_response_id is not None:
            start["previous_response_id"] = ex.request.previous_response_id
        out: list[Event] = [("step/start", start), *ex.reply.events]
        reply = ex.reply
        if reply.usage is not None:
            out.append(("usage", {"model": reply.model, "usage": reply.usage}))
        if ex.error is not None:
            out.append(("error", {"kind": "upstream", "status": ex.status, "message": ex.error}))
        end: dict[str, Any] = {"status": ex.status, "finish_reason": reply.finish_reason}
        if ex.cut_by is not None:
            end["incomplete"] = True
            end["cut_by"] = ex.cut_by
        if reply.response_id is not None and reply.complete:
            end["response_id"] = reply.response_id
        out.append(("step/end", end))
        return out

    def _record_once(self, ex: Exchange, events: list[Event], call: list[Event],
                     fresh: bool) -> Outcome:
        index = self.index
        base_state, base_node = ROOT, None
        miss = False
        previous = ex.request.previous_response_id
        if previous is not None:
            found = index.responses.get(previous)
            state = index.state_at(found) if found is not None else None
            if found is None or state is None:
                miss = True  # a reply this store never saw: the history starts here
            else:
                base_state, base_node = state, found
        types = [t for t, _ in events]
        datas = [d for _, d in events]
        n, candidates, keys = index.match(base_state, types, datas)
        starts = units(types, datas, base_state.pending)
        stored = self._stored(keys[-1] if keys else base_state.key, call)
        if stored is not None:
            resent = sum(starts)
            return Outcome(stored.session or "", "stored", 0, resent, stored.node, False,
                           resent)
        if not candidates and base_node is not None:
            candidates = [Candidate(base_node, None)]
        # What was sent before: the history up to its last model output, the unit holding
        # it included. A re-sent unit that does not match is a divergence.
        last_output = max((i for i, t in enumerate(types) if t == "assistant/message"),
                          default=-1)
        miss = miss or n <= last_output
        dedup = sum(starts[:n])
        resent = sum(starts[:last_output + 1])
        unmatched = max(0, resent - dedup)
        rest = events[n:] + call
        heads = index.sessions_at(c.node for c in candidates)
        conversation = base_node is not None or any(
            t in MESSAGE_TYPES and t != "system/message" for t in types[:n])

        attach: NodeId | None = candidates[-1].node if candidates else None
        keep: tuple[str, NodeId] | None = None  # a named session's old path, kept as a fork
        if ex.session is not None:
            name = ex.session
            head = index.heads.get(name)
            if head is not None and any(c.node == head for c in candidates):
                attach, kind = head, "fast-forward"
            elif head is None:
                kind = "new"
            else:
                kind = "moved"
                keep = (self._free(name), head)
        else:
            owned = [c for c in reversed(candidates) if c.node in heads]
            if owned:
                attach = owned[0].node
                names = heads[attach]
                name = owned[0].session if owned[0].session in names else names[0]
                head, kind = attach, "fast-forward"
            elif conversation and candidates:
                left = candidates[-1].session or _slug(events)
                name, head, kind = self._free(_FORK_SUFFIX.sub("", left)), None, "fork"
            else:
                name, head, kind = self._free_new(_slug(events)), None, "new"

        if kind != "fast-forward" and not fresh:
            raise _Stale
        state = index.state_at(attach)
        if state is None:  # a node this index never walked: walk its path first
            state = self._walk_to(attach) if attach is not None else ROOT
        nodes = self._chain(attach, rest)
        tip = nodes[-1].id
        new = len(nodes) - len(self.store.has([n.id for n in nodes]))
        protocol = ex.request.protocol
        left_from = candidates[-1].session if candidates else None
        reason = {"fast-forward": f"proxy: {protocol} call",
                  "new": f"proxy: {protocol} call, new conversation",
                  "fork": f"proxy: {protocol} call, history diverged from {left_from}",
                  "moved": f"proxy: {protocol} call, history edited; previous head kept as "
                           f"{keep[0] if keep else None}"}[kind]
        raws = [raw_node(node) for node in nodes]
        with self.store.batch():
            if keep is not None:
                self.store.move_ref(session_ref(keep[0]), None, keep[1],
                                    f"proxy: kept the path {name} left")
            self.store.move_ref(session_ref(name), head, tip, reason, nodes=raws)
        index.walk(state, [n.id for n in nodes], [n.type for n in nodes],
                   [n.data for n in nodes], name)
        index.heads[name] = tip
        if keep is not None:
            index.heads[keep[0]] = keep[1]
        if kind in ("new", "fork"):
            try:
                self.store.set_session_meta(name, {"recorded_by": "sess proxy",
                                                   "protocol": protocol})
            except SesstreeError:  # metadata is a courtesy; the recording stands without it
                pass
        return Outcome(name, kind, new, dedup, tip, miss, resent, unmatched,
                       left_from if miss else None)

    def _stored(self, key: bytes, call: Sequence[Event]) -> Candidate | None:
        """Where the history and the reply are already stored (another writer recorded the
        reply from a later request that re-sent it), or None."""
        replied, pending = False, 0
        for type, data in call:
            key, pending, unit = roll(key, pending, type, data)
            replied = replied or unit
        found = self.index.keys.get(key) if replied else None
        return found[-1] if found else None

    def _walk_to(self, node: NodeId) -> WalkState:
        chain = self.store.chain_at(node)
        return self.index.walk(ROOT, chain.ids, chain.types, chain.datas, None)

    @staticmethod
    def _chain(parent: NodeId | None, events: Sequence[Event]) -> list[Node]:
        nodes: list[Node] = []
        for type, data in events:
            node = make_node(parent, type, data)
            nodes.append(node)
            parent = node.id
        return nodes

    def _free(self, base: str) -> str:
        n = 1
        while f"{base}-fork-{n}" in self.index.heads:
            n += 1
        return f"{base}-fork-{n}"

    def _free_new(self, base: str) -> str:
        if base not in self.index.heads:
            return base
        n = 2
        while f"{base}-{n}" in self.index.heads:
            n += 1
        return f"{base}-{n}"

