"""fetch, pull, push and clone: the same negotiation over every transport.

The side that sends walks back from each tip and asks the receiver which ids it has
(:mod:`.negotiate`); then the missing nodes travel oldest first in compressed packs, are
verified by the receiver, and only after all of them are stored do refs move, each by
compare-and-set with a reflog entry. An interrupted transfer moves no ref; a rerun finds the
nodes already stored and sends only the rest.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from ..errors import (
    InvalidRefNameError,
    PushRejectedError,
    RemoteError,
    StoreNotFoundError,
    UnknownRevisionError,
)
from ..node import (
    SESSIONS,
    NodeId,
    remote_ref,
    session_name,
    session_ref,
    short_name,
    tag_name,
    tag_ref,
)
from ..repo.store import Store, open_store
from ..store.base import RawNode
from ..store.urls import is_store_url
from .connect import open_peer
from .negotiate import Missing, find_missing, segments
from .pack import PACK_BYTES, verify
from .peer import LocalPeer, Peer, RefResult, Update, check_pushed_ref, is_ancestor
from .remotes import add_remote, get_remote
from .shown import shown_location

__all__ = [
    "NODES_PER_REQUEST", "FetchResult", "Progress", "PullResult", "PushResult", "clone", "fetch",
    "pull", "push",
]

#: Most nodes asked for in one read of the sender's chains.
NODES_PER_REQUEST = 5000
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
#: Called with (nodes, bytes) moved so far, as a transfer goes.
Progress = Callable[[int, int], None]


class FetchResult(msgspec.Struct):
    """What a fetch brought: the remote's refs, nodes and bytes received, round trips, and the
    remote-tracking refs and tags that moved (``(ref, old, new)``)."""

    remote: str
    refs: dict[str, NodeId]
    nodes: int = 0
    bytes: int = 0
    round_trips: int = 0
    moved: list[tuple[str, NodeId | None, NodeId | None]] = []
    #: Tags of the remote left alone because a local tag of that name points elsewhere.
    skipped_tags: list[str] = []


class PushResult(msgspec.Struct):
    """What a push did (or, with ``dry_run``, would do): one result per ref, nodes and bytes
    sent, round trips."""

    remote: str
    results: list[RefResult]
    nodes: int = 0
    bytes: int = 0
    round_trips: int = 0
    dry_run: bool = False


class PullResult(msgspec.Struct):
    """Per session: ``(name, status, old, new)``, status one of ``fast-forward``, ``created``,
    ``up-to-date``, ``ahead``; and the fetch underneath."""

    sessions: list[tuple[str, str, NodeId | None, NodeId | None]]
    fetched: FetchResult


def _transfer(src: Peer, missing: list[Missing], store: Store, progress: Progress | None,
              counters: list[int]) -> None:
    """Read the missing chains from ``src``, verify and store them, oldest first.

    A server may answer only the first nodes asked for (it cuts its answers at about
    PACK_BYTES): each answer must be the start of what was asked, in order, and the rest is
    asked again. After a cut answer the next request asks for twice as many nodes as the cut
    one held, so large nodes do not make the server read thousands of them per answer.
    """
    total = sum(len(m.ids) for m in missing)
    done = 0
    per_request = NODES_PER_REQUEST
    while done < total:
        group, expected = _next_group(missing, done, per_request)
        nodes = src.nodes(group)
        verify(nodes, store.has, src.name)
        if not nodes or len(nodes) > len(expected) or any(
                n.id != i for n, i in zip(nodes, expected, strict=False)):
            raise RemoteError(f"{src.name} answered with nodes other than those asked for: "
                              "nothing moved")
        counters[1] += getattr(src, "last_bytes", 0) or sum(len(n.encoded) + 70 for n in nodes)
        store.put_nodes(nodes)
        done += len(nodes)
        counters[0] += len(nodes)
        per_request = (NODES_PER_REQUEST if len(nodes) == len(expected)
                       else max(1, min(NODES_PER_REQUEST, 2 * len(nodes))))
        if progress is not None:
            progress(counters[0], counters[1])


def _next_group(missing: list[Missing], skip: int, most: int
                ) -> tuple[list[tuple[NodeId, int]], list[NodeId]]:
    """The chains of the next request: up to ``most`` nodes after the first ``skip`` (oldest
    first, in the order of ``missing``), each piece named by its newest id; and the ids it
    asks for, in the order they must come."""
    group: list[tuple[NodeId, int]] = []
    expected: list[NodeId] = []
    for m in missing:
        if len(expected) == most:
            break
        if skip >= len(m.ids):
            skip -= len(m.ids)
            continue
        # m.ids is newest first: the oldest not yet received is at len - 1 - skip.
        end = len(m.ids) - skip
        start = max(0, end - (most - len(expected)))
        group.append((m.ids[start], end - start))
        expected += reversed(m.ids[start:end])
        skip = 0
    return group, expected


def fetch(store: Store, remote: str | os.PathLike[str] | Store = "origin", *,
          token: str | None = None, progress: Progress | None = None,
          update_tags: bool = True) -> FetchResult:
    """Bring the nodes of every session and tag of ``remote`` that ``store`` lacks; for a
    named remote, move its remote-tracking refs ``remotes/NAME/SESSION`` (and drop those of
    sessions gone from it); copy the remote's tags that do not exist here."""
    peer, configured = open_peer(store, remote, token=token)
    try:
        refs = _listed(peer)
        result = FetchResult(peer.name, refs)
        tips = sorted(set(refs.values()))
        here = store.has(tips)
        wanted = [t for t in tips if t not in here]
        missing = find_missing(wanted, peer.walk, store.has,
                               peer=peer.name)
        counters = [0, 0]
        _transfer(peer, missing, store, progress, counters)
        result.nodes, result.bytes = counters
        lost = set(tips) - store.has(tips)
        if lost:
            raise RemoteError(f"{peer.name} did not send node {min(lost)[:12]}, which it lists "
                              "as a ref: nothing moved")
        with store.batch():
            if configured is not None:
                _track(store, configured.name, refs, result)
            if update_tags:
                _copy_tags(store, refs, result, peer.name)
        result.round_trips = peer.round_trips
        return result
    finally:
        peer.close()


def _listed(peer: Peer) -> dict[str, NodeId]:
    """The peer's refs, refused whole if any name or id could not be one (a broken or
    hostile peer must not make this store record a ref it could not have)."""
    refs = peer.refs()
    for ref, node in refs.items():
        try:
            check_pushed_ref(ref)
        except InvalidRefNameError as exc:
            raise RemoteError(f"{peer.name} lists a ref that cannot exist: {exc}") from None
        if not _HEX64.match(node):
            raise RemoteError(f"{peer.name} lists {ref} at {node[:70]!r}, not a node id")
    return refs


def _track(store: Store, name: str, refs: dict[str, NodeId], result: FetchResult) -> None:
    prefix = remote_ref(f"{name}/")
    current = {r.name: r.target for r in store.refs(prefix)}
    wanted: dict[str, NodeId] = {remote_ref(f"{name}/{short}"): node
                                 for ref, node in refs.items()
                                 if (short := session_name(ref)) is not None}
    for track, node in wanted.items():
        old = current.get(track)
        if old != node:
            how = ("created" if old is None else "fast-forward" if is_ancestor(store, old, node)
                   else "forced update")
            store.move_ref(track, old, node, f"fetch {name}: {how}")
            result.moved.append((track, old, node))
    for track, old in current.items():
        if track not in wanted:
            store.move_ref(track, old, None, f"fetch {name}: gone from the remote")
            result.moved.append((track, old, None))


def _copy_tags(store: Store, refs: dict[str, NodeId], result: FetchResult, peer: str) -> None:
    for ref, node in refs.items():
        short = tag_name(ref)
        if short is None:
            continue
        mine = store.target(ref)
        if mine is None:
            store.move_ref(ref, None, node, f"fetch: tag from {peer}")
            result.moved.append((ref, None, node))
        elif mine != node:
            result.skipped_tags.append(short)


def _default_sessions(store: Store, sessions: Sequence[str] | None, verb: str) -> list[str]:
    if sessions:
        return list(dict.fromkeys(sessions))
    name, _ = store.head()
    if name is None:
        raise RemoteError(f"HEAD is detached: name the sessions to {verb}")
    return [name]


def pull(store: Store, remote: str | os.PathLike[str] | Store = "origin",
         sessions: Sequence[str] | None = None, *, token: str | None = None,
         progress: Progress | None = None) -> PullResult:
    """Fetch, then fast-forward each session (default: HEAD's) to the remote's. A session
    missing here is created; one that diverged from the remote's is left alone and reported
    (RemoteError naming the node where they diverged) after the others are done."""
    names = _default_sessions(store, sessions, "pull")
    fetched = fetch(store, remote, token=token, progress=progress)
    out: list[tuple[str, str, NodeId | None, NodeId | None]] = []
    problems = []
    # The label goes into the reflog and messages: a URL's password must reach neither.
    label = shown_location(os.fspath(remote)) if not isinstance(remote, Store) else fetched.remote
    for name in names:
        theirs = fetched.refs.get(session_ref(name))
        if theirs is None:
            problems.append(f"{label} has no session {name!r}")
            continue
        mine = store.session_head(name)
        if mine == theirs:
            out.append((name, "up-to-date", mine, theirs))
        elif mine is None:
            store.move_ref(session_ref(name), None, theirs, f"pull {label}: created")
            out.append((name, "created", None, theirs))
        elif is_ancestor(store, mine, theirs):
            store.move_ref(session_ref(name), mine, theirs, f"pull {label}: fast-forward")
            out.append((name, "fast-forward", mine, theirs))
        elif is_ancestor(store, theirs, mine):
            out.append((name, "ahead", mine, theirs))
        else:
            diff = store.diff(mine, theirs)
            # No base: no history in common as sesstree.repo.related reads it, though the two may
            # hold the same first turn/start.
            at = diff.base[:12] if diff.base else "their start (no history in common)"
            other = f"{label}/{name}" if get_remote(store, label) is not None else theirs[:12]
            problems.append(
                f"session {name} and {other} diverged at {at} ({name} has {len(diff.only_a)} "
                f"events since, {other} has {len(diff.only_b)}); nothing changed: keep both "
                f"with 'sess branch {other} {name}-theirs'")
    if problems:
        raise RemoteError("; ".join(problems))
    return PullResult(out, fetched)


def push(store: Store, remote: str | os.PathLike[str] | Store = "origin",
         sessions: Sequence[str] | None = None, *, force: bool = False, tags: bool = False,
         all_sessions: bool = False, dry_run: bool = False, token: str | None = None,
         progress: Progress | None = None) -> PushResult:
    """Send sessions (default: HEAD's; ``all_sessions``: every one) and, with ``tags``, every
    tag to ``remote``, with only the nodes it lacks. A session must fast-forward the remote's
    and a tag must be new there, unless ``force``; every move is a compare-and-set against
    what the remote showed at the start, so a concurrent push makes this one fail cleanly.

    Raises:
        PushRejectedError: some refs were refused (the others were pushed); ``.results``.
        RemoteError: the remote cannot be reached, or refused the token.
    """
    if all_sessions:
        names = [s.name for s in store.sessions()]
    elif sessions or not tags:
        names = _default_sessions(store, sessions, "push")
    else:
        names = []
    peer, configured = open_peer(store, remote, token=token)
    try:
        theirs = _listed(peer)
        updates, refused = _plan(store, names, tags, theirs, force)
        local = LocalPeer(store, "this store", owned=False)
        missing = find_missing([u.new for u in updates], local.walk, peer.has,
                               known=set(theirs.values()))
        result = PushResult(peer.name, refused, dry_run=dry_run)
        if dry_run:
            result.nodes = sum(len(m.ids) for m in missing)
            result.results += [RefResult(u.ref, u.old, u.new, "ok") for u in updates]
            result.round_trips = peer.round_trips
            return result
        counters = [0, 0]
        groups = segments(missing, NODES_PER_REQUEST)
        pending: list[RawNode] = []
        size = 0
        for group in groups:
            for node in local.nodes(group):
                pending.append(node)
                size += len(node.encoded) + 100
                if size >= PACK_BYTES:
                    # A full pack goes on its own; the refs travel with the last one.
                    _send(peer, pending, [], counters, progress)
                    pending, size = [], 0
        if updates or pending:
            result.results += _send(peer, pending, updates, counters, progress)
        result.nodes, result.bytes = counters
        result.round_trips = peer.round_trips
    finally:
        peer.close()
    if configured is not None:
        with store.batch():
            for r in result.results:
                short = session_name(r.ref)
                if r.status in ("ok", "up-to-date") and short is not None and r.new:
                    track = remote_ref(f"{configured.name}/{short}")
                    old = store.target(track)
                    if old != r.new:
                        store.move_ref(track, old, r.new, f"push {configured.name}: updated")
    rejected = [r for r in result.results if r.status == "rejected"]
    if rejected:
        raise PushRejectedError("; ".join(r.reason for r in rejected), list(result.results))
    return result


def _send(peer: Peer, nodes: list[RawNode], updates: list[Update], counters: list[int],
          progress: Progress | None) -> list[RefResult]:
    results = peer.receive(nodes, updates)
    counters[0] += len(nodes)
    counters[1] += getattr(peer, "last_bytes", 0) or sum(len(n.encoded) + 70 for n in nodes)
    if progress is not None:
        progress(counters[0], counters[1])
    return results


def _plan(store: Store, names: list[str], tags: bool, theirs: dict[str, NodeId],
          force: bool) -> tuple[list[Update], list[RefResult]]:
    """The ref updates to send, and the refs refused before sending anything."""
    updates: list[Update] = []
    refused: list[RefResult] = []
    wanted: list[tuple[str, NodeId]] = []
    for name in names:
        head = store.session_head(name)
        if head is None:
            raise UnknownRevisionError(f"no session named {name!r}")
        wanted.append((session_ref(name), head))
    if tags:
        wanted += [(tag_ref(t.name), t.target) for t in store.tags()]
    for ref, new in wanted:
        old = theirs.get(ref)
        tag = tag_name(ref)
        short = tag if tag is not None else short_name(ref)
        if old == new:
            refused.append(RefResult(ref, old, new, "up-to-date"))
            continue
        if old is not None and not force:
            if tag is not None:
                refused.append(RefResult(ref, old, old, "rejected",
                                         f"tag {short} already exists on the remote at "
                                         f"{old[:12]} (use --force to move it)"))
                continue
            if not store.has([old]):
                refused.append(RefResult(ref, old, old, "rejected",
                                         f"non-fast-forward: the remote's session {short} "
                                         f"is at {old[:12]}, which this store does not have "
                                         f"({short} here is at {new[:12]}): pull first, or "
                                         "push --force"))
                continue
            if not is_ancestor(store, old, new):
                refused.append(RefResult(ref, old, old, "rejected",
                                         f"non-fast-forward: the remote's session {short} is "
                                         f"at {old[:12]}, which {short} here ({new[:12]}) does "
                                         "not extend: pull, or push --force"))
                continue
        updates.append(Update(ref, old, new, force))
    return updates, refused


def clone(source: str | os.PathLike[str], path: str | os.PathLike[str], *,
          token: str | None = None, progress: Progress | None = None,
          status: Callable[[FetchResult], None] | None = None) -> Store:
    """A new store at ``path`` (a folder, or a ``postgresql://`` URL) holding every session
    and tag of ``source``, with the same ids; ``source`` becomes remote ``origin``. Returns
    the new store (open). Refuses a ``path`` that already holds sessions; a clone that fails
    removes the folder it created."""
    made = not is_store_url(path) and not Path(path).exists()
    try:
        store = open_store(path)
    except StoreNotFoundError as exc:
        raise RemoteError(str(exc)) from None
    try:
        if store.sessions() or store.tags():
            raise RemoteError(f"{path} already holds a store with sessions: clone into a new "
                              "folder")
        if get_remote(store, "origin") is None:
            add_remote(store, "origin", os.fspath(source))
        fetched = fetch(store, "origin", token=token, progress=progress)
        with store.batch():
            for ref, node in sorted(fetched.refs.items()):
                if ref.startswith(SESSIONS):
                    store.move_ref(ref, None, node, f"clone: from {fetched.remote}")
        names = [n for r in sorted(fetched.refs) if (n := session_name(r)) is not None]
        if names and "main" not in names:
            store.set_head_session(names[0])
        if status is not None:
            status(fetched)
    except BaseException:
        store.close()
        if made:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return store

