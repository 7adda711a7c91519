"""Testing a storage engine: the conformance suite every engine passes, and what it needs.

The suite is :mod:`sesstree.testing.conformance`; a new engine's tests import it and give it an
:class:`Engine` fixture (see that module). It needs pytest, which only tests install.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..node import NodeId
from ..repo.store import Store

__all__ = ["Engine", "assistant", "grow", "user"]


@dataclass(frozen=True)
class Engine:
    """What an engine's own tests tell the conformance suite about it."""

    #: The engine's name, for messages.
    name: str
    #: Opens the store under test: empty the first time, the same store every time after.
    open: Callable[[], Store]
    #: Changes the stored content of one node in place, as damage to the medium would, so
    #: that the suite can check that fsck finds it.
    damage_node: Callable[[Store, NodeId], None]
    #: False for an engine with no size on disk (``physical_bytes`` is 0).
    measures_size: bool = True


def user(text: str, **extra: object) -> dict[str, object]:
    """A user chat message."""
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, **extra: object) -> dict[str, object]:
    """An assistant chat message."""
    return {"role": "assistant", "content": text, **extra}


def grow(store: Store, name: str, n: int, tag: str = "") -> list[str]:
    """Append ``n`` user messages to session ``name``; return their ids."""
    s = store.session(name)
    return [s.add_message(user(f"{name}{tag}-{i}")).id for i in range(n)]
