"""Every read checks what it returns against the node's id: damage is an error, never data.

The damage here is made precisely (one byte of one row changed through SQLite), so each test
knows which node was hit; ``tests/store/sqlite/test_sqlite_damage.py`` flips bytes of the file at random.
The nodes are loose (a short session): a node's type and payload are in its row of ``loose``
(its row of ``nodes`` is the index), and a payload over 64 KiB in ``blobs``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sesstree import StoreCorruptError, open_store
from sesstree.store.packs import INLINE_MAX

TRANSFER = "transfer 100 dollars to alice"


def make(folder: Path) -> list[str]:
    """A session whose second event holds TRANSFER and whose third holds a payload stored
    apart (over 64 KiB); returns the ids, oldest first."""
    with open_store(folder) as store:
        q = store.session("q")
        q.add_message({"role": "user", "content": "hello"})
        q.add_message({"role": "user", "content": TRANSFER})
        q.add_message({"role": "tool", "tool_call_id": "c1", "content": "x" * (INLINE_MAX + 5000)})
        q.add_message({"role": "assistant", "content": "done"})
        return [n.id for n in reversed(store.log("q"))]


def edit_row(folder: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(folder / "store.db")
    with db:
        assert db.execute(sql, args).rowcount == 1  # (one row changed: the damage is there)
    db.close()


#: A loose node's row in ``loose``, by the node's id (?).
LOOSE_ROW = "seq = (SELECT seq FROM nodes WHERE id = ?)"


def flip_in_data(folder: Path, node: str, old: bytes, new: bytes) -> None:
    db = sqlite3.connect(folder / "store.db")
    (data,) = db.execute(f"SELECT data FROM loose WHERE {LOOSE_ROW}",
                         (bytes.fromhex(node),)).fetchone()
    assert old in data
    with db:
        db.execute(f"UPDATE loose SET data = ? WHERE {LOOSE_ROW}",
                   (data.replace(old, new), bytes.fromhex(node)))
    db.close()


def every_read(folder: Path, ids: list[str]) -> list[tuple[str, BaseException | None]]:
    """Run each kind of read; return what each raised (None: it returned)."""
    out: list[tuple[str, BaseException | None]] = []
    with open_store(folder) as store:
        reads = {
            "messages": lambda: store.messages("q"),
            "log": lambda: store.log("q"),
            "log-limit": lambda: store.log("q", limit=3),
            "session": lambda: store.session("q").messages(),
            "show": lambda: [store.show(i) for i in ids],
            "resolve~": lambda: store.resolve("q~2"),
            "sessions": lambda: store.sessions(),
        }
        for name, read in reads.items():
            try:
                read()
                out.append((name, None))
            except StoreCorruptError as exc:
                out.append((name, exc))
    return out


def test_a_changed_byte_in_a_message_is_never_returned(tmp_path: Path) -> None:
    """The audit's case: "100 ... alice" becomes "900 ... mlice"; every read that reaches the
    node raises StoreCorruptError naming it, and none returns the changed text."""
    folder = tmp_path / "s"
    ids = make(folder)
    flip_in_data(folder, ids[1], b"100 dollars to alice", b"900 dollars to mlice")
    results = dict(every_read(folder, ids))
    for name in ("messages", "log", "log-limit", "session", "show"):
        exc = results[name]
        assert isinstance(exc, StoreCorruptError), name
        assert ids[1][:12] in str(exc), (name, str(exc))
        assert "\n" not in str(exc)
    with open_store(folder) as store:
        assert any(ids[1][:12] in f for f in store.fsck())
        # A read that does not reach the damaged node still works.
        assert store.show(ids[0]).data["content"] == "hello"


def test_a_changed_payload_stored_apart_is_caught(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    ids = make(folder)
    import zstandard

    db = sqlite3.connect(folder / "store.db")
    (bid, blob, codec) = db.execute(
        "SELECT b.bid, b.data, b.codec FROM blobs b JOIN nodes n ON n.bid = b.bid WHERE n.id = ?",
        (bytes.fromhex(ids[2]),),
    ).fetchone()
    assert codec == 0  # a zstd frame without a dictionary: this store is too small for one
    # A frame that inflates fine to the wrong payload: only the hash can tell.
    inflated = zstandard.ZstdDecompressor().decompress(blob)
    changed = zstandard.ZstdCompressor().compress(inflated.replace(b"xxx", b"xyx", 1))
    with db:
        db.execute("UPDATE blobs SET data = ? WHERE bid = ?", (changed, bid))
    db.close()
    results = dict(every_read(folder, ids))
    for name in ("messages", "log", "session", "show"):
        assert isinstance(results[name], StoreCorruptError), name
        assert ids[2][:12] in str(results[name])


@pytest.mark.parametrize("damage", [
    f"UPDATE loose SET data = x'00ffff' WHERE {LOOSE_ROW}",    # not msgpack at all
    f"UPDATE loose SET data = x'a4757365720a' WHERE {LOOSE_ROW}",  # a type, then no payload
    f"UPDATE loose SET data = x'' WHERE {LOOSE_ROW}",          # empty
    f"UPDATE loose SET data = 42 WHERE {LOOSE_ROW}",           # not even bytes
    f"DELETE FROM loose WHERE {LOOSE_ROW}",                    # lost
    "UPDATE nodes SET depth = depth - 1 WHERE id = ?",         # a shorter path than stored
    "UPDATE nodes SET depth = depth + 5 WHERE id = ?",         # a longer one
    "UPDATE nodes SET parent = NULL WHERE id = ?",             # cut from its parent
    "UPDATE nodes SET bid = 999 WHERE id = ?",                 # a payload that is not there
])
def test_damage_that_breaks_decoding_is_a_corrupt_store(tmp_path: Path, damage: str) -> None:
    """Never msgspec.DecodeError, TypeError, zlib.error or a silently shorter history."""
    folder = tmp_path / "s"
    ids = make(folder)
    target = ids[3] if "depth" in damage else ids[2] if "bid" in damage else ids[1]
    edit_row(folder, damage, bytes.fromhex(target))
    with open_store(folder) as store:
        reads = [lambda: store.messages("q"), lambda: store.log("q")]
        if "depth" not in damage:  # a wrong depth index does not change what show returns
            reads.append(lambda: store.show(target))
        for read in reads:
            with pytest.raises(StoreCorruptError):
                read()
        assert store.fsck() != []


def test_sound_reads_stay_exact(tmp_path: Path) -> None:
    """Verification changes nothing for a sound store, across runs of rows and interleavings."""
    folder = tmp_path / "s"
    with open_store(folder) as store:
        a, b = store.session("a"), store.session("b")
        for i in range(60):  # interleaved writers: short runs, read row by row
            a.add_message({"role": "user", "content": f"a{i}" + "y" * (3000 if i % 7 == 0 else 1)})
            b.add_message({"role": "user", "content": f"b{i}"})
        store.fork("c", "a~10")
        store.session("c").add_message({"role": "user", "content": "c"})
    with open_store(folder) as store:
        assert [m["content"][:3].rstrip("y") for m in store.messages("a")] == [
            f"a{i}" for i in range(60)]
        assert len(store.messages("c")) == 51
        assert [n.id for n in store.log("a", limit=5)] == [n.id for n in store.log("a")][:5]
        for node in store.log("c"):
            assert store.show(node.id) == node
        assert store.fsck() == []
