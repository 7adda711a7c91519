"""Testing a storage engine: the two suites sesstree ships, and what they need.

- :mod:`sesstree.testing.contract`, the **engine contract**: what an engine promises at the
  storage seam (:mod:`sesstree.store.base`): objects, refs and their log, batches and
  folding, settings, text, gc and sizes. A new engine passes it.
- :mod:`sesstree.testing.repo`, the **repo suite**: what sesstree builds on any engine that
  passes the contract (revisions, HEAD, log, diff, sessions and tags, fsck). It runs on an
  engine with the same :class:`Engine` fixture, by a separate import.

An engine's test module imports a suite with ``from ... import *`` and defines an ``engine``
fixture that returns an :class:`Engine`; the suites' ``store`` fixture opens a store with it.
They need pytest, which only tests install.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..node import Node, NodeId, make_node
from ..repo.store import Store

__all__ = ["Engine", "assistant", "colliding_nodes", "grow", "user"]


@dataclass(frozen=True)
class Engine:
    """What an engine's own tests tell the suites about it."""

    #: The engine's name, for messages.
    name: str
    #: Opens the store under test: empty the first time, the same store every time after.
    open: Callable[[], Store]
    #: Changes the stored content of one node in place, as damage to the medium would, so
    #: that the engine contract can check that fsck finds it. The contract needs it; the
    #: repo suite, which damages nothing, does not.
    damage_node: Callable[[Store, NodeId], None] | None = None
    #: Flips one byte of the stored bytes of one pack (its checksum left as it was), as bad
    #: media would, so that the pack contract can check that every read and fsck name the
    #: pack. Only for an engine that keeps packs; without it, that one test is skipped.
    damage_pack: Callable[[Store], None] | None = None
    #: Drops (``True``) or alters (``False``) the text index entry of one node, as a bug or
    #: bad media would, so that the search contract can check that fsck finds it and a
    #: rebuild restores it. Only for an engine with a text index; without it, that one test
    #: is skipped.
    damage_index: Callable[[Store, NodeId, bool], None] | None = None
    #: False for an engine with no size on disk (``physical_bytes`` is 0).
    measures_size: bool = True


def user(text: str, **extra: object) -> dict[str, object]:
    """A user chat message."""
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, **extra: object) -> dict[str, object]:
    """An assistant chat message."""
    return {"role": "assistant", "content": text, **extra}


def grow(store: Store, name: str, n: int, tag: str = "", *, each_logged: bool = False) -> list[str]:
    """Append ``n`` user messages to session ``name``; return their ids. One handle's appends
    are one run, logged as one reflog entry; ``each_logged``: a handle per append, so that
    each has an entry of its own."""
    if each_logged:
        return [store.session(name).add_message(user(f"{name}{tag}-{i}")).id for i in range(n)]
    s = store.session(name)
    return [s.add_message(user(f"{name}{tag}-{i}")).id for i in range(n)]


def colliding_nodes() -> tuple[Node, Node]:
    """Two nodes whose ids share their first 4 hex characters (found by brute force)."""
    seen: dict[str, Node] = {}
    i = 0
    while True:
        node = make_node(None, "usage", {"collide": i})
        other = seen.setdefault(node.id[:4], node)
        if other is not node:
            return other, node
        i += 1
