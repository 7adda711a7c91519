"""The SQL of the SQLite backend, kept apart so that the backend's logic reads on its own.

See :mod:`sesstree.store.sqlite.backend` for the layout and why it is shaped this way.
"""

from __future__ import annotations

__all__ = [
    "APPEND_FOLD",
    "APPEND_ONE",
    "APPEND_TEMP",
    "BLOBS_IN",
    "CAS",
    "CHECKS",
    "CODEC",
    "DATA",
    "FOLD",
    "FOLD_NEWEST",
    "INSERT_LOOSE",
    "INSERT_NODE",
    "KEY_BYTES",
    "LIST_REFS",
    "LOOSE_JOIN",
    "NEWEST",
    "NODE_COLS",
    "READ_RANGE",
    "READ_RUN",
    "REFLOG_ROWS",
    "RUN_BREAK",
    "STARTED_SET",
    "WALK_ROWS",
    "by_id",
    "ids_in",
    "in_params",
    "without_codec",
    "without_packs",
    "without_started",
]

# An entry a move is folded into keeps when its first move was made (`started`, see
# ReflogEntry). Stores made before the column existed have none: `without_started` takes the
# clause out of the statements below for them (they read NULL instead).
STARTED_SET = ", started = coalesce(started, time)"


def without_started(sql: str) -> str:
    """``sql`` for a store whose reflog has no ``started`` column."""
    return sql.replace(STARTED_SET, "").replace("l.started", "NULL")


def without_codec(sql: str) -> str:
    """``sql`` for a format-3 store opened read-only (no codec columns: every payload is
    plain msgpack in its row or zlib in a blob)."""
    return sql.replace("n.codec", "NULL").replace("b.codec", "NULL")


def without_packs(sql: str) -> str:
    """``sql`` for a store of format 4 or older opened read-only (no packs, no ``loose``: every
    row holds its own payload)."""
    return (sql.replace("n.pack", "NULL").replace(LOOSE_JOIN, "").replace(DATA, "n.data")
            .replace(CODEC, "n.codec"))


#: How many bytes of a node's id the index of a format-6 store keys on (``nodes_key``).
KEY_BYTES = 6


def by_id(column: str, param: str) -> str:
    """``column = param`` for node ids, as a lookup through ``nodes_key``, the index on their
    first KEY_BYTES bytes (format 6), the full id confirmed by the row. SQLite uses an index
    on an expression only where a query names that expression; a store made before format 6
    has a unique index on the whole id instead, which the second term uses."""
    return f"substr({column}, 1, {KEY_BYTES}) = substr({param}, 1, {KEY_BYTES}) AND {column} = {param}"


def ids_in(column: str, count: int) -> str:
    """``column IN (...)`` for ``count`` node ids, through ``nodes_key`` as :func:`by_id`: its
    parameters are the ids' first KEY_BYTES bytes, then the ids (see :func:`in_params`)."""
    marks = ",".join("?" * count)
    return f"substr({column}, 1, {KEY_BYTES}) IN ({marks}) AND {column} IN ({marks})"


def in_params(keys: list[bytes]) -> list[bytes]:
    """The parameters of :func:`ids_in` for ``keys`` (32-byte ids)."""
    return [k[:KEY_BYTES] for k in keys] + keys


NEWEST = "SELECT new FROM reflog WHERE ref = ?1 ORDER BY n DESC LIMIT 1"
# Compare-and-set and log in one statement: the row is written only if the newest entry of the
# ref points where the writer expects (?2); `IS` makes "absent" (NULL) compare equal to None.
CAS = (
    "INSERT INTO reflog(ref, n, old, new, time, reason) "
    "SELECT ?1, coalesce((SELECT n FROM reflog WHERE ref = ?1 ORDER BY n DESC LIMIT 1), 0) + 1,"
    " ?2, ?3, ?4, ?5 "
    f"WHERE ({NEWEST}) IS ?2"
)
# A move folded into the ref's newest entry (see RefUpdate.fold): that entry keeps its `old`
# and takes the new target, time and reason; only if the ref is at ?2, so it is a
# compare-and-set too. ?-parameters as CAS.
FOLD = (
    f"UPDATE reflog SET new = ?3, time = ?4, reason = ?5{STARTED_SET} WHERE ref = ?1 AND n = "
    "(SELECT n FROM reflog WHERE ref = ?1 ORDER BY n DESC LIMIT 1) AND new IS ?2"
)
# The same rewrite when the batch writing it holds the write lock and knows the entry is its
# own (?1 ref, ?2 new row, ?3 time, ?4 reason).
FOLD_NEWEST = (
    f"UPDATE reflog SET new = ?2, time = ?3, reason = ?4{STARTED_SET} WHERE ref = ?1 AND n = "
    "(SELECT n FROM reflog WHERE ref = ?1 ORDER BY n DESC LIMIT 1)"
)
# The common append (one small node on top of the ref's head) as one statement: a temporary
# INSTEAD OF trigger on a temporary view does the node insert and the compare-and-set. One
# statement means one implicit transaction and no BEGIN/COMMIT round trips; it is created per
# connection, so the file's schema is unchanged. ?-parameters: ref, parent id, id, row data
# (type and payload), time, reason, the payload's codec, and for a payload stored apart its hash,
# its compressed bytes and their codec (NULL otherwise): a large payload is stored in the same
# statement, once (an existing blob of the same hash is used). A lost CAS raises
# "sesstree-conflict", which rolls the statement back, the blob with it.
_PUT_BLOB = (
    "INSERT OR IGNORE INTO blobs(hash, data, codec) SELECT NEW.hash, NEW.blob, NEW.bcodec "
    "WHERE NEW.hash IS NOT NULL;"
)
_BID = "(SELECT bid FROM main.blobs WHERE hash = NEW.hash)"
# A new node's recorded time (format 6): the append's, in whole milliseconds (rounded down, so
# it is never later than the reflog entry's time).
_MS = "CAST(NEW.time * 1000 AS INTEGER)"
# Only a node not stored yet is inserted: a format-6 store has no unique index on the id (it
# keys on its first bytes, see by_id), so OR IGNORE alone would not see it there.
_NEW_NODE = f"NOT EXISTS (SELECT 1 FROM main.nodes x WHERE {by_id('x.id', 'NEW.id')})"
# A new node's type and payload go to `loose` (format 5), keyed by its row number; only when the
# node was inserted. After it, changes() and last_insert_rowid() still say what the node insert
# did (1 and its row, or 0), which the statements after it read.
_PUT_LOOSE = (
    "INSERT INTO loose(seq, data, codec) SELECT last_insert_rowid(), NEW.data, NEW.codec "
    "WHERE changes() = 1;"
)
APPEND_TEMP = [
    "CREATE TEMP VIEW append_one(ref, parent, id, data, time, reason, codec, hash, blob, "
    "bcodec) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    f"""CREATE TEMP TRIGGER append_one_do INSTEAD OF INSERT ON append_one BEGIN
        {_PUT_BLOB}
        INSERT OR IGNORE INTO nodes(id, parent, depth, data, codec, bid, t)
        SELECT NEW.id, p.seq, coalesce(p.depth, 0) + 1, x'', NULL, {_BID}, {_MS}
        FROM (SELECT 1) LEFT JOIN main.nodes p ON {by_id("p.id", "NEW.parent")}
        WHERE (NEW.parent IS NULL OR p.seq IS NOT NULL) AND {_NEW_NODE};
        {_PUT_LOOSE}
        INSERT INTO reflog(ref, n, old, new, time, reason)
        SELECT NEW.ref, coalesce(last.n, 0) + 1, c.parent, c.seq, NEW.time, NEW.reason
        FROM nodes c
        LEFT JOIN (SELECT n, new FROM reflog WHERE ref = NEW.ref ORDER BY n DESC LIMIT 1) last
        WHERE c.seq = CASE WHEN changes() = 1 THEN last_insert_rowid()
                           ELSE (SELECT seq FROM nodes WHERE {by_id("id", "NEW.id")}) END
          AND last.new IS c.parent;
        SELECT RAISE(ABORT, 'sesstree-conflict') WHERE changes() = 0;
    END""",
    # The same append, its move folded into the ref's newest entry (an agent turn's later
    # events): the entry is rewritten only if the ref is at the node's parent.
    "CREATE TEMP VIEW append_fold(ref, parent, id, data, time, reason, codec, hash, blob, "
    "bcodec) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    f"""CREATE TEMP TRIGGER append_fold_do INSTEAD OF INSERT ON append_fold BEGIN
        {_PUT_BLOB}
        INSERT OR IGNORE INTO nodes(id, parent, depth, data, codec, bid, t)
        SELECT NEW.id, p.seq, p.depth + 1, x'', NULL, {_BID}, {_MS}
        FROM main.nodes p WHERE {by_id("p.id", "NEW.parent")} AND {_NEW_NODE};
        {_PUT_LOOSE}
        UPDATE reflog SET new = (SELECT seq FROM nodes WHERE {by_id("id", "NEW.id")}),
            time = NEW.time, reason = NEW.reason{STARTED_SET}
        WHERE ref = NEW.ref
          AND n = (SELECT n FROM reflog WHERE ref = NEW.ref ORDER BY n DESC LIMIT 1)
          AND new IS (SELECT seq FROM nodes WHERE {by_id("id", "NEW.parent")})
          AND (SELECT seq FROM nodes WHERE {by_id("id", "NEW.id")}) IS NOT NULL;
        SELECT RAISE(ABORT, 'sesstree-conflict') WHERE changes() = 0;
    END""",
]
APPEND_ONE = "INSERT INTO temp.append_one VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
APPEND_FOLD = "INSERT INTO temp.append_fold VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# (?-parameters: id, parent row, depth, payload's blob row, recorded time in milliseconds.)
INSERT_NODE = (
    "INSERT OR IGNORE INTO nodes(id, parent, depth, data, bid, codec, t) "
    "SELECT ?1, ?2, ?3, x'', ?4, NULL, ?5 "
    f"WHERE NOT EXISTS (SELECT 1 FROM nodes x WHERE {by_id('x.id', '?1')})"
)
INSERT_LOOSE = "INSERT INTO loose(seq, data, codec) VALUES (?, ?, ?)"
# How a format-5 read gets a node's type and payload: from `loose`, or (a row written before
# format 5 and not packed yet) from its own row. `without_packs` makes them the row's own.
LOOSE_JOIN = "LEFT JOIN loose l ON l.seq = n.seq"
DATA = "coalesce(l.data, n.data)"
CODEC = "coalesce(l.codec, n.codec)"
# Columns of one node (from `nodes n LEFT JOIN blobs b ON b.bid = n.bid`). `data` is the
# msgpack of the type followed by the payload: its msgpack, a zstd frame of it (`n.codec` not
# NULL), or nil when the payload is stored apart, compressed, in blobs.
NODE_COLS = f"n.seq, n.id, n.parent, {DATA}, b.data, {CODEC}, b.codec, n.pack"
# The newest entry of every ref whose name starts with ?1 (?2 = its length), found with one
# index seek per ref name instead of a scan of the whole log.
LIST_REFS = """
WITH RECURSIVE names(ref) AS (
    SELECT (SELECT ref FROM reflog WHERE ref >= ?1 ORDER BY ref LIMIT 1)
    UNION ALL
    SELECT (SELECT ref FROM reflog WHERE ref > names.ref ORDER BY ref LIMIT 1)
    FROM names WHERE names.ref IS NOT NULL AND substr(names.ref, 1, ?2) = ?1
)
SELECT l.ref, d.id, l.time FROM names
JOIN reflog l ON l.ref = names.ref
    AND l.n = (SELECT n FROM reflog WHERE ref = names.ref ORDER BY n DESC LIMIT 1)
JOIN nodes d ON d.seq = l.new
WHERE substr(names.ref, 1, ?2) = ?1
ORDER BY l.ref
"""
# The newest row in (?1, ?2] whose parent is not the row just before it: where a run breaks.
RUN_BREAK = (
    "SELECT seq FROM nodes WHERE seq > ?1 AND seq <= ?2 AND parent IS NOT seq - 1 "
    "ORDER BY seq DESC LIMIT 1"
)
# The rows of a range that are frames: their indexes in the range, and their codecs (listed
# only when they differ: most paths are written with one dictionary).
_CODECS = (
    "group_concat(CASE WHEN n.codec IS NOT NULL THEN n.seq - ?1 END), min(n.codec), "
    "CASE WHEN min(n.codec) != max(n.codec) THEN group_concat(n.codec) END"
)
# A rowid range is scanned in ascending order, so the aggregate concatenates oldest first:
# type, payload, type, payload... (nil for a payload stored apart, fetched with BLOBS_IN).
READ_RUN = (
    "SELECT CAST(group_concat(n.data, x'') AS BLOB), count(n.bid), "
    "CAST(group_concat(n.id, x'') AS BLOB), group_concat(length(n.data)), "
    f"{_CODECS} FROM nodes n WHERE n.seq BETWEEN ?1 AND ?2"
)
# The same, plus the sum of the rows' parents and their count: one scan both reads a range and
# proves it is an unbroken run of the path (see PathReader.read). The ids and the length of each
# row's data come along so that every node can be checked against its id.
READ_RANGE = (
    "SELECT CAST(group_concat(n.data, x'') AS BLOB), count(n.bid), sum(n.parent), count(*), "
    "CAST(group_concat(n.id, x'') AS BLOB), group_concat(length(n.data)), "
    f"{_CODECS} FROM nodes n WHERE n.seq BETWEEN ?1 AND ?2"
)
# The compressed payloads of rows ?1..?2.
BLOBS_IN = (
    "SELECT n.seq, b.data, b.codec FROM nodes n JOIN blobs b ON b.bid = n.bid "
    "WHERE n.seq BETWEEN ?1 AND ?2 AND n.bid IS NOT NULL"
)
WALK_ROWS = (
    "SELECT n.seq, n.parent, n.id, n.data, b.data, n.codec, b.codec FROM nodes n "
    "LEFT JOIN blobs b ON b.bid = n.bid WHERE n.seq BETWEEN ? AND ? ORDER BY n.seq DESC"
)

# Every entry of the reflog (or, with a WHERE added, of one ref), ids resolved.
REFLOG_ROWS = (
    "SELECT l.ref, o.id, w.id, l.time, l.reason, l.started FROM reflog l "
    "LEFT JOIN nodes o ON o.seq = l.old LEFT JOIN nodes w ON w.seq = l.new"
)

# fsck's checks of the derived indexes and links, each naming the nodes it finds.
CHECKS = {
    "node whose parent is missing": "SELECT c.id FROM nodes c WHERE c.parent IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM nodes p WHERE p.seq = c.parent)",
    "node stored before its parent": "SELECT c.id FROM nodes c WHERE c.parent >= c.seq",
    "node with a wrong depth index": "SELECT c.id FROM nodes c LEFT JOIN nodes p "
    "ON p.seq = c.parent WHERE c.depth != coalesce(p.depth, 0) + 1",
    "node whose payload is missing": "SELECT c.id FROM nodes c WHERE c.bid IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM blobs b WHERE b.bid = c.bid)",
    # (Format 6 keys its index on the ids' first bytes, not unique: the writers keep them so.)
    "node stored twice": "SELECT c.id FROM nodes c WHERE EXISTS (SELECT 1 FROM nodes d WHERE "
    f"{by_id('d.id', 'c.id')} AND d.seq < c.seq)",
}
