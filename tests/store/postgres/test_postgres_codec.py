"""Payloads at rest on PostgreSQL (format 4): frames that name their dictionary, a format-3
store read and upgraded, refused by an older sesstree, damage named on read and by fsck.

These are the loose rows' frames: a session's settled history goes into packs (format 5, see
test_postgres_packs.py), so the rows looked at here are a session short enough to stay loose
(fewer than PACK_MIN nodes).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import zstandard
from codec_kit import ODD, traffic

from sesstree import open_store
from sesstree.errors import StoreCorruptError, StoreFormatError
from sesstree.store.codec import TRAIN_AFTER
from sesstree.store.packs import PACK_MIN
from sesstree.store.postgres import schema as postgres_schema
from sesstree.store.postgres.codec import MAGIC


def fill(url: str, batched: list[dict[str, Any]], one_by_one: list[dict[str, Any]]) -> None:
    """``batched`` into session q in one batch, then ``one_by_one`` into session odd (short
    enough to stay loose)."""
    assert len(one_by_one) < PACK_MIN
    with open_store(url) as store:
        s = store.session("q")
        with store.batch():
            for m in batched:
                s.add_message(m)
        odd = store.session("odd")
        for m in one_by_one:
            odd.add_message(m)


def rows(url: str, sql: str, *args: Any) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, args).fetchall()  # type: ignore[arg-type]


def test_rows_are_frames_once_trained_and_come_back_exactly(postgres_url: str) -> None:
    msgs = traffic(TRAIN_AFTER + 100)
    fill(postgres_url, msgs, ODD)  # trained when the batch ends: ODD goes in frames
    (dicts,) = rows(postgres_url, "SELECT count(*) FROM dicts")[0]
    framed = rows(postgres_url, "SELECT count(*) FROM nodes WHERE substring(data FOR 4) = %s",
                  MAGIC)[0][0]
    assert dicts == 1 and framed >= 2  # (the unicode row and the hex one)
    blob = rows(postgres_url, "SELECT data FROM blobs ORDER BY length(data) DESC LIMIT 1")[0][0]
    assert zstandard.get_frame_parameters(bytes(blob)).dict_id == 1
    with open_store(postgres_url) as store:
        assert store.messages("q") == msgs and store.messages("odd") == ODD
        for node in store.log("odd", limit=len(ODD)):
            assert store.show(node.id).data == node.data
        assert store.fsck() == []


def test_a_format_3_store_is_read_and_upgraded(postgres_url: str) -> None:
    old = traffic(5) + ODD
    fill(postgres_url, [], old)  # no dictionary yet: rows plain, payloads apart zstd alone
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        # Back to format 3: payloads apart stored as they are (TOAST compressed them).
        for digest, data in conn.execute("SELECT hash, data FROM blobs").fetchall():
            raw = zstandard.ZstdDecompressor().decompress(bytes(data))
            conn.execute("UPDATE blobs SET data = %s WHERE hash = %s", (raw, digest))
        conn.execute("DROP TABLE dicts")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'format'")
    more = traffic(TRAIN_AFTER + 50, seed=4)
    fill(postgres_url, more, [])
    with open_store(postgres_url) as store:
        assert store.backend.store_format().version == 7  # type: ignore[attr-defined]
        assert store.messages("odd") == old and store.messages("q") == more
        assert store.fsck() == []
    assert rows(postgres_url, "SELECT count(*) FROM dicts")[0][0] == 1


def test_an_older_sesstree_refuses_format_5(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(postgres_url, [], traffic(3))
    monkeypatch.setattr(postgres_schema, "FORMAT_VERSION", 4)
    with pytest.raises(StoreFormatError, match="has store format 7; this sesstree reads up to 4"):
        open_store(postgres_url)


def test_damage_to_a_frame_or_the_dictionary_is_named(postgres_url: str) -> None:
    msgs = traffic(TRAIN_AFTER + 100)
    fill(postgres_url, msgs, traffic(5, seed=9))
    key, data = rows(postgres_url, "SELECT id, data FROM nodes WHERE substring(data FOR 4) = %s "
                     "ORDER BY seq DESC LIMIT 1", MAGIC)[0]
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x40
    rows(postgres_url, "UPDATE nodes SET data = %s WHERE id = %s RETURNING 1",
         bytes(changed), key)
    with open_store(postgres_url) as store:
        for read in (lambda: store.messages("odd"), lambda: store.show(bytes(key).hex())):
            with pytest.raises(StoreCorruptError, match=bytes(key).hex()[:12]):
                read()
        assert any(bytes(key).hex()[:12] in f for f in store.fsck())
    rows(postgres_url, "UPDATE nodes SET data = %s WHERE id = %s RETURNING 1", data, key)
    (d,) = rows(postgres_url, "SELECT data FROM dicts WHERE id = 1")[0]
    d = bytearray(d)
    d[500] ^= 0xFF
    rows(postgres_url, "UPDATE dicts SET data = %s WHERE id = 1 RETURNING 1", bytes(d))
    with open_store(postgres_url) as store:
        with pytest.raises(StoreCorruptError):
            store.messages("q")
        assert "compression dictionary 1 does not match its hash" in store.fsck()
