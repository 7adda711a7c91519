"""The SQLite store's schema, top to bottom: the tables of format 1, then one numbered migration
per format since, each taking a store from format N to N + 1.

A new store runs the tables and every migration, in order; an older one, when it is first
opened for writing, runs the migrations after its format, in order, in one transaction, and
the new format is written last (another process opening the store meanwhile waits for it,
then sees the new format). Nothing is rewritten: old rows read as they were. Opened read-only,
an older store is read as it is (see ``has_codec`` and ``reflog_has_started`` for the
differences the readers allow for). An older sesstree refuses a newer format: it could not
read what the newer one writes.

To change the format, append a migration: ``FORMAT_VERSION`` follows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ...node import ID_VERSION
from .sql import KEY_BYTES
from .sums import SUMS_TABLE

__all__ = [
    "FORMAT_VERSION", "INDEX_TABLES", "LOOSE_TABLE", "MIGRATIONS", "PACKS_TABLE", "TABLES", "build",
    "has_codec", "has_index", "has_packs",
    "has_times", "reflog_has_started", "upgrade",
]

#: Format 1: the tables. See :mod:`sesstree.store.sqlite.backend` for the layout and why.
#: (Stores made before the reflog kept ``started`` lack that column: see reflog_has_started.)
TABLES = [
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE blobs(bid INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, data BLOB NOT NULL)",
    """CREATE TABLE nodes(
        seq INTEGER PRIMARY KEY,
        id BLOB NOT NULL UNIQUE,
        parent INTEGER,
        depth INTEGER NOT NULL,
        data BLOB NOT NULL,
        bid INTEGER
    )""",
    """CREATE TABLE reflog(
        ref TEXT NOT NULL,
        n INTEGER NOT NULL,
        old INTEGER,
        new INTEGER,
        time REAL NOT NULL,
        reason TEXT NOT NULL,
        started REAL,
        PRIMARY KEY (ref, n)
    ) WITHOUT ROWID""",
]

Migration = Callable[[sqlite3.Connection], None]
#: MIGRATIONS[k] takes a store from format k + 1 to k + 2.
MIGRATIONS: list[Migration] = []
migration = MIGRATIONS.append


@migration
def m002_scan_indexes(db: sqlite3.Connection) -> None:
    """Format 2: what lets gc, stats and ref labels read only what they need. ``nodes_bid``
    finds the nodes that use a payload (gc removes a payload no node names, one seek each);
    ``reflog_new`` finds the refs at a node (``log -n 20`` labels 20 lines without listing
    every ref; a new node's row number is the largest, so an append adds to the index's last
    page); ``path_bytes`` is each node's path size as JSONL lines, filled by ``stats``."""
    db.execute("CREATE INDEX IF NOT EXISTS nodes_bid ON nodes(bid) WHERE bid IS NOT NULL")
    db.execute("CREATE INDEX IF NOT EXISTS reflog_new ON reflog(new) WHERE new IS NOT NULL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS path_bytes(seq INTEGER PRIMARY KEY, bytes INTEGER NOT NULL)"
    )


@migration
def m003_reflog_time(db: sqlite3.Connection) -> None:
    """Format 3: the refs that moved last (the web view's first page), read in time order."""
    db.execute("CREATE INDEX IF NOT EXISTS reflog_time ON reflog(time)")


@migration
def m004_codec(db: sqlite3.Connection) -> None:
    """Format 4: payloads compressed with zstd (see sesstree.store.codec). ``nodes.codec`` and
    ``blobs.codec`` say how a payload is stored (NULL: as format 3 stored it, plain msgpack in
    a node row, zlib in a blob), ``dicts`` holds the trained dictionaries, each with the blake3
    of its bytes, and ``sums`` the digests over blocks of rows (sums.py), a derived index.
    Adding a column rewrites nothing: old rows read NULL."""
    for table in ("nodes", "blobs"):
        if not any(r[1] == "codec" for r in db.execute(f"PRAGMA table_info({table})")):
            db.execute(f"ALTER TABLE {table} ADD COLUMN codec INTEGER")
    db.execute(
        "CREATE TABLE IF NOT EXISTS dicts(id INTEGER PRIMARY KEY, hash BLOB NOT NULL, "
        "data BLOB NOT NULL)"
    )
    db.execute(SUMS_TABLE)


#: The packs of format 5 (see sesstree.store.packs). ``depth`` is the first node's, ``base`` the
#: row of its parent (NULL for a root), ``size`` the frame's bytes before compression.
PACKS_TABLE = """CREATE TABLE IF NOT EXISTS packs(
    pid INTEGER PRIMARY KEY AUTOINCREMENT,
    depth INTEGER NOT NULL,
    base INTEGER,
    count INTEGER NOT NULL,
    size INTEGER NOT NULL,
    codec INTEGER NOT NULL,
    sum BLOB NOT NULL,
    data BLOB NOT NULL
)"""


#: A loose node's type and payload (format 5): its row in ``nodes`` is only the index, so that
#: packing it deletes this row (whole pages freed for the next appends) and sets the node's
#: ``pack``, instead of shrinking a row in place (which leaves its page as large as it was).
LOOSE_TABLE = (
    "CREATE TABLE IF NOT EXISTS loose(seq INTEGER PRIMARY KEY, data BLOB NOT NULL, codec INTEGER)"
)


@migration
def m005_packs(db: sqlite3.Connection) -> None:
    """Format 5: packs, immutable compressed runs of consecutive nodes of one path (see
    sesstree.store.packs). ``nodes.pack`` is the pack a node's payload is in (NULL: loose);
    a loose node's type and payload are in ``loose`` (rows written before format 5 keep them
    in their ``nodes`` row until they are packed); ``packs`` holds the packs (AUTOINCREMENT: a
    pack number is never reused, so a reader's cached pack can never be another one). The
    migration only adds them: the history already stored is packed afterwards, online, a pack
    per short transaction
    (``pack_pending`` in meta says that job is not finished; see sqlite/packing.py). The block
    digests of format 4 are not kept any more (a loose tail is short; a pack has a checksum)."""
    if not any(r[1] == "pack" for r in db.execute("PRAGMA table_info(nodes)")):
        db.execute("ALTER TABLE nodes ADD COLUMN pack INTEGER")
    db.execute(PACKS_TABLE)
    db.execute(LOOSE_TABLE)
    db.execute("DELETE FROM sums")
    if db.execute("SELECT 1 FROM nodes LIMIT 1").fetchone() is not None:
        db.execute("INSERT OR REPLACE INTO meta VALUES ('pack_pending', '1')")


#: Format 6's node table, for a store with no node yet: format 5's columns, ``t`` added, and
#: no unique index on ``id`` (see m006_recorded).
NODES_TABLE = """CREATE TABLE nodes(
        seq INTEGER PRIMARY KEY,
        id BLOB NOT NULL,
        parent INTEGER,
        depth INTEGER NOT NULL,
        data BLOB NOT NULL,
        bid INTEGER,
        codec INTEGER,
        pack INTEGER,
        t INTEGER
    )"""


@migration
def m006_recorded(db: sqlite3.Connection) -> None:
    """Format 6: each node's first-recorded time, ``nodes.t`` (integer milliseconds since
    1970, the earliest commit that wrote it: a put of a node already stored keeps it), so
    that the store dates events without the reflog, where one handle's appends are now one
    entry. Rows written before read NULL, and are dated by the reflog as before. A store with
    no node yet gets the slimmer node index (below). A sesstree of format 5 would log and date
    the same store its own way, and would write duplicate nodes into a store without the
    unique index: it must refuse it."""
    if not any(r[1] == "t" for r in db.execute("PRAGMA table_info(nodes)")):
        db.execute("ALTER TABLE nodes ADD COLUMN t INTEGER")
    if db.execute("SELECT 1 FROM nodes LIMIT 1").fetchone() is None:
        # A store with no node yet (a new one) gets format 6's slimmer node index: the ids
        # indexed by their first bytes (``nodes_key``, about 15 bytes a node), not whole
        # (a unique index, about 45): lookups confirm the full id in the row (sql.by_id), and
        # the writers insert a node only if it is not stored. A store with nodes keeps its
        # unique index (dropping it means rebuilding the table); the same statements use it.
        db.execute("DROP TABLE nodes")
        db.execute(NODES_TABLE)
        db.execute("CREATE INDEX nodes_bid ON nodes(bid) WHERE bid IS NOT NULL")
        db.execute(f"CREATE INDEX nodes_key ON nodes(substr(id, 1, {KEY_BYTES}))")


#: Format 7's text index (see sesstree.store.sqlite.textindex for what each table holds).
INDEX_TABLES = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_words USING fts5(t, content='', detail=none, "
    "tokenize=\"ascii tokenchars '_'\")",
    "CREATE TABLE IF NOT EXISTS search_terms(id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_grams USING fts5(term, content='search_terms', "
    "content_rowid='id', detail=none, tokenize='trigram case_sensitive 1')",
]


@migration
def m007_text_index(db: sqlite3.Connection) -> None:
    """Format 7: the text index, a document per node in ``search_words`` and the vocabulary
    in ``search_terms`` with its trigram index ``search_grams``, none holding a copy of the
    text. The migration only makes the tables: the nodes already stored are indexed
    afterwards, online, a slice per short transaction, up to ``meta('index_mark')`` (the first
    search, fsck or ``sess fsck --rebuild-index`` does it; a kill loses only the slice it
    was in). ``nodes_parent`` finds a node's children: which sessions reach a hit is walked
    down from it (sqlite/reaching.py). A sesstree of format 6 would not index what it
    writes, and would remove nodes without their documents: it must refuse the store."""
    for statement in INDEX_TABLES:
        db.execute(statement)
    db.execute("INSERT OR IGNORE INTO meta VALUES ('index_mark', '0')")
    # Which sessions reach a search's hit is walked down from the hit, to its children.
    db.execute("CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent)")


#: The format this sesstree writes, and the newest it reads.
FORMAT_VERSION = 1 + len(MIGRATIONS)


def build(db: sqlite3.Connection, page_size: int) -> None:
    """Page size, WAL mode, tables, every migration and the format of a new store (in the
    private file that create.py renames into place)."""
    db.execute(f"PRAGMA page_size={page_size}")
    # (Format 6: free pages can be given back, see freepages.py; it must be set before the
    # first table.)
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("BEGIN IMMEDIATE")
    for statement in TABLES:
        db.execute(statement)
    for step in MIGRATIONS:
        step(db)
    db.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [("format", str(FORMAT_VERSION)), ("ids", f"blake3-msgpack-v{ID_VERSION}")],
    )
    db.execute("COMMIT")


def upgrade(db: sqlite3.Connection) -> None:
    """Bring an older store to FORMAT_VERSION: the migrations after its format, in order, in
    one transaction, the new format written last. The format is read again inside the
    transaction: another process may have upgraded the store meanwhile."""
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        older = {str(v): v for v in range(1, FORMAT_VERSION)}
        version = older.get(str(row[0])) if row is not None else None
        if version is not None:
            for step in MIGRATIONS[version - 1:]:
                step(db)
            db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (str(FORMAT_VERSION),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def reflog_has_started(db: sqlite3.Connection) -> bool:
    """Whether the store's reflog keeps when a folded entry's first move was made (stores
    made before that have no such column, and are read and written without it)."""
    return any(row[1] == "started" for row in db.execute("PRAGMA table_info(reflog)"))


def has_packs(db: sqlite3.Connection) -> bool:
    """Whether the store has format 5's packs (an older store opened read-only has not)."""
    return any(row[1] == "pack" for row in db.execute("PRAGMA table_info(nodes)"))


def has_times(db: sqlite3.Connection) -> bool:
    """Whether the store keeps each node's recorded time (format 6; an older store opened
    read-only has not)."""
    return any(row[1] == "t" for row in db.execute("PRAGMA table_info(nodes)"))


def has_index(db: sqlite3.Connection) -> bool:
    """Whether the store has format 7's text index (an older store opened read-only has not)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_words'").fetchone() is not None


def has_codec(db: sqlite3.Connection) -> bool:
    """Whether the store has format 4's codec columns (a store of an older format opened
    read-only has not)."""
    return any(row[1] == "codec" for row in db.execute("PRAGMA table_info(nodes)"))
