"""The engine contract on the PostgreSQL engine, against the run's real server."""

from __future__ import annotations

import msgspec
import pytest

from sesstree import Store, open_store
from sesstree.node import NodeId
from sesstree.testing import Engine, user
from sesstree.testing.contract import *  # noqa: F403 - the contract's tests and fixtures


def damage(store: Store, id: NodeId) -> None:
    store.backend._db.execute(  # type: ignore[attr-defined]
        "UPDATE nodes SET data = %s WHERE id = %s",
        (msgspec.msgpack.encode("user/message") + msgspec.msgpack.encode(user("evil")),
         bytes.fromhex(id)))


def damage_pack(store: Store) -> None:  # one byte of the oldest pack's data flipped
    store.backend._db.execute(  # type: ignore[attr-defined]
        "UPDATE packs SET data = overlay(data PLACING "
        "set_byte(substring(data FROM length(data) / 2 FOR 1), 0, "
        "get_byte(data, length(data) / 2 - 1) # 16) FROM length(data) / 2) "
        "WHERE pid = (SELECT min(pid) FROM packs)")


def damage_index(store: Store, id: NodeId, missing: bool) -> None:
    """Drop node ``id``'s entry, or make it hold other words."""
    db = store.backend._db  # type: ignore[attr-defined]
    seq = "(SELECT seq FROM nodes WHERE id = %s)"
    if missing:
        db.execute(f"DELETE FROM search_docs WHERE seq = {seq}", (bytes.fromhex(id),))
    else:
        db.execute(f"UPDATE search_docs SET words = array_to_tsvector(ARRAY['unrelated']) "
                   f"WHERE seq = {seq}", (bytes.fromhex(id),))


@pytest.fixture
def engine(postgres_url: str) -> Engine:
    return Engine("postgres", open=lambda: open_store(postgres_url), damage_node=damage,
                  damage_pack=damage_pack, damage_index=damage_index)
