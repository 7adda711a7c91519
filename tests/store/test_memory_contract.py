"""The engine contract on the memory engine: the worked example of an engine's test module."""

from __future__ import annotations

import msgspec
import pytest

from sesstree.node import NodeId
from sesstree.repo.store import Store
from sesstree.store.memory import MemoryBackend
from sesstree.testing import Engine, user
from sesstree.testing.contract import *  # noqa: F403 - the contract's tests and fixtures


def damage(store: Store, id: NodeId) -> None:  # other bytes under the same id, as bad media
    nodes = store.backend._nodes  # type: ignore[attr-defined]
    nodes[id] = msgspec.structs.replace(nodes[id], encoded=msgspec.msgpack.encode(user("evil")))


def damage_index(store: Store, id: NodeId, missing: bool) -> None:
    index = store.backend._index  # type: ignore[attr-defined]
    if missing:
        del index[id]
    else:
        index[id] = index[id]._replace(text="something else")


@pytest.fixture
def engine() -> Engine:
    backend = MemoryBackend()  # opened again, it is the same store
    return Engine("memory", open=lambda: Store(backend), damage_node=damage,
                  damage_index=damage_index, measures_size=False)
