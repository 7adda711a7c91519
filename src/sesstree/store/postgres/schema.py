"""The PostgreSQL schema, its version, and the path from any older version to this one.

The schema lives in whatever schema the connection's ``search_path`` names first (``public``
by default; ``?options=-csearch_path%3Dteam_a`` in the URL gives a store its own schema), so
one database can hold several stores.

Tables (see docs/storage.md, "PostgreSQL", for why each is shaped so):

- ``nodes``: ``seq`` (identity, the walk key), ``id`` (32 bytes, unique), ``parent`` (the
  parent's ``seq``), ``depth`` and ``path_bytes`` (derived: the path's length and its size as
  JSONL lines, so stats need no pass over the nodes), ``data`` (type then payload, msgpack;
  the payload is nil when it is in ``blobs``; empty for a packed node), ``blob`` (the
  payload's hash), ``pack`` (the node's pack, NULL while it is loose), ``t`` (format 6: when
  it was first recorded, milliseconds, by the column's default; NULL for a row written
  before).
- ``packs``: settled runs of a path, one compressed frame each (:mod:`.packsql`).
- ``blobs``: payloads over 1 KB, keyed by their blake3 hash, stored once; TOAST compresses them.
- ``refs``: a ref's current target (``seq``); the row a compare-and-set locks.
- ``reflog``: every move, written in the same transaction as the move.
- ``meta``: the format version, the id scheme, HEAD, session metadata.

The version is the ``format`` row of ``meta``. ``MIGRATIONS[k]`` takes a store from format
``k`` to ``k + 1``; a new store is format 0 (nothing) taken through every step, so the path
that creates a store is the path that upgrades one, and both are tested by every test run.
The functions (``sesstree_*``) are replaced whenever they differ from this sesstree's (their
hash is the ``functions`` row of ``meta``), so an upgrade that changes only them needs no new
format.
"""

from __future__ import annotations

import psycopg
from blake3 import blake3
from psycopg import sql

from ...errors import StoreCorruptError, StoreFormatError, StoreNotFoundError
from ...node import ID_VERSION
from .codec import DICTS_TABLE
from .conn import Conn
from .objects import OBJECT_FUNCTIONS, OBJECT_TABLES, TO_FORMAT_6
from .packsql import PACK_FUNCTIONS, PACK_TABLES
from .pathsql import PATH_FUNCTIONS
from .refs import REF_FUNCTIONS, REF_TABLES, TO_FORMAT_2
from .textsql import TO_FORMAT_7, TRGM_INDEX, TRGM_SCHEMA

__all__ = ["FORMAT_VERSION", "FUNCTIONS", "MIGRATIONS", "ensure_schema"]

FORMAT_VERSION = 7

#: Step k takes format k to format k + 1.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE meta(key text PRIMARY KEY, value text NOT NULL)",
        *OBJECT_TABLES,
        *REF_TABLES,
    ],
    # 2: a ref's later moves in one batch or agent turn fold into one reflog entry, decided
    # by the store above the seam (the functions' "log" flag became "fold"), which keeps when
    # its first move was made. A sesstree of format 1 would read the flag the other way
    # round: it must refuse the store.
    TO_FORMAT_2,
    # 3: the refs at a node, found from the entries that name it (`log -n 20` labels its lines
    # with a few lookups, not a list of every ref), and gc's look at what was logged since
    # its snapshot, per chunk. A new node's seq is the largest, so appends add to the end.
    # The refs that moved last (the web view's first page), read in time order.
    ["CREATE INDEX IF NOT EXISTS reflog_new ON reflog(new) WHERE new IS NOT NULL",
     "CREATE INDEX IF NOT EXISTS refs_moved ON refs(moved)"],
    # 4: rows and payloads stored apart as zstd frames, with a dictionary trained on the
    # store's own payloads (.codec). Rows written before stay as they are; a
    # sesstree of format 3 could not read a frame: it must refuse the store. The payloads
    # stored apart come compressed: TOAST need not try again.
    [DICTS_TABLE, "ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTERNAL"],
    # 5: packs (.packsql): settled runs of a path in one compressed frame, node rows kept as
    # their index. Only the schema changes here (at once: no row is rewritten); the history
    # already stored is packed afterwards, online, by `repack` (`pack_pending` says it is
    # due) and by writers as sessions grow. A sesstree of format 4 would find packed rows
    # empty: it must refuse the store.
    PACK_TABLES,
    # 6: each node's first-recorded time (`nodes.t`, milliseconds), so that the store dates
    # events without the reflog, where one handle's run of appends is now one entry. Rows
    # written before keep none (the reflog dates them). A sesstree of format 5 would log one
    # run as one entry without keeping the times that date its events: it must refuse it.
    TO_FORMAT_6,
    # 7: the text index (.textsql): its tables at once, a trigger that queues every node
    # inserted from then on, and a back-fill mark at the newest row: the rows stored before
    # are indexed afterwards, online, a slice per short transaction, by the catch-up every
    # search runs first. `nodes_parent` is built here (it reads the nodes once). A sesstree
    # of format 6 would neither keep the index nor know a search must catch it up: it must
    # refuse the store.
    TO_FORMAT_7,
]
assert len(MIGRATIONS) == FORMAT_VERSION

# An arbitrary constant: the advisory lock under which a store is created or upgraded, so
# that two processes opening a new store at once do not both create it.
_SCHEMA_LOCK = 0x5E557EE


#: The server-side functions this sesstree uses, in the order they are created.
FUNCTIONS = [*OBJECT_FUNCTIONS, *PATH_FUNCTIONS, *PACK_FUNCTIONS, *REF_FUNCTIONS]


def _functions_key() -> str:
    """A hash of the server-side functions this sesstree uses."""
    return blake3("\n".join(FUNCTIONS).encode()).hexdigest()[:16]


def _version(conn: Conn) -> tuple[int, bool]:
    """The store's format (0 if there is none) and whether the tables look like ours."""
    row = conn.execute(
        "SELECT to_regclass('meta') IS NOT NULL, to_regclass('nodes') IS NOT NULL"
    ).fetchone()
    assert row is not None
    has_meta, has_nodes = bool(row[0]), bool(row[1])
    if not has_meta:
        return 0, not has_nodes
    found = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    if found is None or not str(found[0]).isdigit():
        return 0, False
    return int(str(found[0])), has_nodes


def _trigram_index(conn: Conn) -> None:
    """The vocabulary's trigram index, where the server has pg_trgm and the role may create
    it (a trusted extension since PostgreSQL 13); without it a substring scans the
    vocabulary (its size, not the text's)."""
    try:
        with conn.transaction():  # a savepoint: a refusal leaves the upgrade going
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            row = conn.execute(TRGM_SCHEMA).fetchone()
            if row is not None:
                conn.execute(sql.SQL(TRGM_INDEX).format(schema=sql.Identifier(str(row[0]))))
    except psycopg.Error:
        pass  # (no extension: the substring lookup scans the vocabulary)


def ensure_schema(conn: Conn, *, create: bool, shown: str) -> int:
    """Check the store's format and create or upgrade it if asked. Returns the format.

    Raises:
        StoreNotFoundError: there is no store and ``create`` is false.
        StoreCorruptError: the tables there are not a sesstree store.
        StoreFormatError: the store was written by a newer sesstree.
    """
    version, ours = _version(conn)
    if not ours:
        raise StoreCorruptError(
            f"{shown} holds tables named like sesstree's that are not a sesstree store "
            "(give the store its own database or schema)"
        )
    if version > FORMAT_VERSION:
        raise StoreFormatError(
            f"{shown} has store format {version}; this sesstree reads up to {FORMAT_VERSION}. "
            "Upgrade sesstree to open it."
        )
    if version == FORMAT_VERSION:
        found = conn.execute("SELECT value FROM meta WHERE key = 'functions'").fetchone()
        if found is not None and found[0] == _functions_key():
            return version
    if version == 0 and not create:
        raise StoreNotFoundError(f"no store at {shown} (create one with 'sess init {shown}')")
    # The lock is taken before the transaction starts: a transaction reads the catalog as of
    # its start, so one begun after the lock sees the tables a creator before us committed.
    conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
    try:
        with conn.transaction():
            version, ours = _version(conn)  # someone may have created it while we waited
            if not ours:
                raise StoreCorruptError(f"{shown} holds tables that are not a sesstree store")
            for step in MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)  # constant DDL
            if version < 7:
                _trigram_index(conn)
            # The functions are replaced whenever this sesstree's differ from the store's
            # (an upgrade that changes no table changes only them).
            found = conn.execute("SELECT value FROM meta WHERE key = 'functions'").fetchone()
            if version < FORMAT_VERSION or found is None or found[0] != _functions_key():
                for statement in FUNCTIONS:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta VALUES ('format', %s), ('ids', %s), ('functions', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(FORMAT_VERSION), f"blake3-msgpack-v{ID_VERSION}", _functions_key()),
                )
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))
    return FORMAT_VERSION
