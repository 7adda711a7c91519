"""Format 6 on PostgreSQL: each node's recorded time (``nodes.t``). A format-5 store is
upgraded when opened, in place (the column added without rewriting a row): its nodes keep no
time (the reflog dates them), what is written after keeps one, everything reads back exactly;
a sesstree reading up to format 5 refuses a format-6 store."""

from __future__ import annotations

import psycopg
import pytest

from sesstree import StoreFormatError, open_store
from sesstree.store.postgres import schema as postgres_schema
from sesstree.testing import grow, user


def test_a_format_5_store_upgrades_in_place(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        old = grow(store, "q", 300)
        before = store.messages("q")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE nodes DROP COLUMN t")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'format'")
    with open_store(postgres_url) as store:
        assert store.backend.store_format().version == 7
        assert store.messages("q") == before
        assert store.fsck() == []
        assert store.backend.recorded(old) == {}
        new = store.session("q").add_message(user("after")).id
        assert set(store.backend.recorded([*old, new])) == {new}


def test_a_sesstree_reading_up_to_format_5_refuses_format_6(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(postgres_url) as store:
        grow(store, "q", 2)
    monkeypatch.setattr(postgres_schema, "FORMAT_VERSION", 5)
    with pytest.raises(StoreFormatError, match="has store format 7; this sesstree reads up to 5"):
        open_store(postgres_url)
