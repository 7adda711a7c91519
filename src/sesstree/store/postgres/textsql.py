"""The SQL of the PostgreSQL store's text index (format 7): its tables, and the statements
that keep, search and check it (the Python around them is in :mod:`.textindex` and
:mod:`.textquery`).

- ``search_docs``: one row per stored node (``seq``, a foreign key to ``nodes`` that a
  deleted node's row takes with it), ``words`` the node's folded tokens
  (:func:`sesstree.store.textmatch.tokens`) as a tsvector made with ``array_to_tsvector``
  (the lexemes as Python made them, never parsed by a text search configuration, so both
  engines agree exactly; no positions), ``bytes`` the UTF-8 size of its search text. A GIN
  index over ``words`` finds the documents holding every word of a query. ``words`` is NULL
  for a node whose distinct tokens do not fit a tsvector (1 MB): such a node is a candidate
  for every query (a partial index lists them).
- ``search_terms``: the vocabulary, every token once (unique by its md5: a btree cannot hold
  a long token itself), with a ``pg_trgm`` GIN index when the server has the extension: a
  substring is looked up among the tokens, so its index is the size of the vocabulary.
- ``search_pending``: the nodes written since they were last indexed. A trigger on ``nodes``
  adds each new row's ``seq`` in the inserting transaction, whoever inserts it (an append, a
  pull, an import, a sesstree that predates the index): a node is pending or indexed in every
  snapshot, never neither. PostgreSQL hands out ``seq`` values before the transactions that
  took them commit, and they commit in any order, so "the highest row indexed" (SQLite's
  mark) could skip a row committed late: a queue cannot.
- ``meta('index_backfill')``: the rows stored before the upgrade to format 7 that are still
  to be indexed (every row up to it). The upgrade sets it to the newest row and indexes
  nothing itself; the catch-up lowers it slice by slice, each slice's documents committed with
  the mark, so a killed back-fill goes on from where it stopped.
- ``nodes_parent``: a node's children, for which sessions reach a hit (:mod:`.reaching`).
"""

from __future__ import annotations

from .objects import NODE_COLS

__all__ = [
    "ADD_DOCS", "ADD_TERMS", "BACKFILL", "BACKFILL_ROWS", "CANDIDATES", "CLAIM_PENDING",
    "COUNTS", "DOCS_OF", "KNOWN_TERMS", "MISSING_DOCS", "NODE_ROWS", "PENDING_ROWS",
    "REBUILD", "REQUEUE", "STATE", "TERMS_LIKE", "TERMS_WITH", "TO_FORMAT_7", "TRGM_INDEX",
    "TRGM_SCHEMA", "UNINDEXED",
]

_TRIGGER_FN = """
CREATE OR REPLACE FUNCTION sesstree_index_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_pending(seq) VALUES (NEW.seq) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$
"""

#: Format 6 to 7: the tables, at once (nothing is indexed here: the catch-up back-fills the
#: rows up to ``index_backfill`` afterwards, online). The trigger takes a lock on ``nodes``
#: that waits for the writers in progress, so every row after the mark fires it.
TO_FORMAT_7 = [
    """CREATE TABLE IF NOT EXISTS search_docs(
        seq bigint PRIMARY KEY REFERENCES nodes(seq) ON DELETE CASCADE,
        words tsvector,
        bytes integer NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS search_docs_words ON search_docs USING gin(words)",
    # The planner guesses how many documents hold a word from the words it sampled; with the
    # default 1,000 of them, a word it did not sample is guessed in 0.13% of a million
    # documents, so it reads the newest documents one by one for it (420 ms for a word in
    # one) instead of asking the GIN index (1.8 ms). Ten times the words sampled fixes the
    # guess; ANALYZE at a million documents takes about a second.
    "ALTER TABLE search_docs ALTER COLUMN words SET STATISTICS 1000",
    "CREATE INDEX IF NOT EXISTS search_docs_wide ON search_docs(seq) WHERE words IS NULL",
    "CREATE TABLE IF NOT EXISTS search_terms(term text NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS search_terms_key ON search_terms(md5(term))",
    "CREATE TABLE IF NOT EXISTS search_pending(seq bigint PRIMARY KEY)",
    _TRIGGER_FN,
    "DROP TRIGGER IF EXISTS nodes_index ON nodes",
    "CREATE TRIGGER nodes_index AFTER INSERT ON nodes FOR EACH ROW "
    "EXECUTE FUNCTION sesstree_index_pending()",
    "INSERT INTO meta VALUES ('index_backfill', (SELECT coalesce(max(seq), 0)::text FROM nodes)) "
    "ON CONFLICT (key) DO NOTHING",
    # Which sessions reach a hit is walked down from it, through a node's children.
    "CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent)",
    "CREATE INDEX IF NOT EXISTS refs_target ON refs(target)",
]
#: Where the server's pg_trgm lives, after ``CREATE EXTENSION IF NOT EXISTS pg_trgm`` (tried
#: in a savepoint: a server without it, or a role that may not create it, keeps the index
#: without a trigram index, and a substring's short vocabulary scan answers instead).
TRGM_SCHEMA = ("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
               "WHERE e.extname = 'pg_trgm'")
#: (The operator class named with its schema: the extension may live in another store's.)
TRGM_INDEX = ("CREATE INDEX IF NOT EXISTS search_terms_grams ON search_terms "
              "USING gin(term {schema}.gin_trgm_ops)")

#: Node rows (``NODE_COLS``, then seq, recorded time, depth) that ``{where}`` selects.
NODE_ROWS = (
    f"SELECT {NODE_COLS}, n.seq, n.t FROM nodes n LEFT JOIN nodes par ON par.seq = n.parent "
    "WHERE {where}"
)
#: The back-fill mark and whether anything is pending (one round trip before each search).
STATE = ("SELECT (SELECT value FROM meta WHERE key = 'index_backfill'), "
         "EXISTS (SELECT 1 FROM search_pending)")
#: Take up to %s pending rows, newest first; another process's catch-up takes others.
CLAIM_PENDING = (
    "DELETE FROM search_pending WHERE seq IN (SELECT seq FROM search_pending WHERE NOT seq = ANY(%s) "
    "ORDER BY seq DESC LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING seq"
)
#: Rows that could not be read, queued again.
REQUEUE = "INSERT INTO search_pending SELECT unnest(%s::bigint[]) ON CONFLICT DO NOTHING"
#: The back-fill mark, locked (a back-fill in another process holds it: leave it to that one).
BACKFILL = "SELECT value FROM meta WHERE key = 'index_backfill' FOR UPDATE SKIP LOCKED"
BACKFILL_ROWS = NODE_ROWS.format(where="n.seq <= %s ORDER BY n.seq DESC LIMIT %s")
PENDING_ROWS = NODE_ROWS.format(where="n.seq = ANY(%s)")
ADD_DOCS = ("INSERT INTO search_docs(seq, words, bytes) VALUES (%s, array_to_tsvector(%s::text[]), %s) "
            "ON CONFLICT (seq) DO NOTHING")
KNOWN_TERMS = "SELECT term FROM search_terms WHERE md5(term) = ANY(ARRAY(SELECT md5(unnest(%s::text[]))))"
ADD_TERMS = ("INSERT INTO search_terms(term) SELECT t FROM unnest(%s::text[]) t ORDER BY t "
             "ON CONFLICT DO NOTHING")
#: Rows not indexed yet (pending, or before the back-fill mark) below %(top)s, newest first.
UNINDEXED = (
    "SELECT seq FROM ((SELECT seq FROM search_pending WHERE seq < %(top)s ORDER BY seq DESC "
    "LIMIT %(n)s) UNION (SELECT seq FROM nodes WHERE seq <= %(mark)s AND seq < %(top)s "
    "ORDER BY seq DESC LIMIT %(n)s)) u ORDER BY seq DESC LIMIT %(n)s"
)
#: Documents that may match %(q)s (a tsquery of quoted lexemes) below %(top)s, newest first,
#: and the documents too wide for a tsvector (candidates of every query).
CANDIDATES = (
    "SELECT seq FROM ((SELECT seq FROM search_docs WHERE words @@ %(q)s::tsquery AND seq < %(top)s "
    "ORDER BY seq DESC LIMIT %(n)s) UNION ALL (SELECT seq FROM search_docs WHERE words IS NULL "
    "AND seq < %(top)s ORDER BY seq DESC LIMIT %(n)s)) c ORDER BY seq DESC LIMIT %(n)s"
)
#: Vocabulary tokens containing a run of word characters: LIKE (the trigram index answers it;
#: the run's ``_`` escaped), or for a run of one or two characters, a scan.
TERMS_LIKE = "SELECT term FROM search_terms WHERE term LIKE %s LIMIT %s"
TERMS_WITH = "SELECT term FROM search_terms WHERE strpos(term, %s) > 0 LIMIT %s"
#: Entries, text bytes, the index's bytes on the server, rows pending.
COUNTS = (
    "SELECT (SELECT count(*) FROM search_docs), (SELECT coalesce(sum(bytes), 0) FROM search_docs), "
    "(SELECT sum(pg_total_relation_size(t)) FROM unnest(ARRAY['search_docs', 'search_terms', "
    "'search_pending']::regclass[]) t) + coalesce(pg_relation_size(to_regclass('nodes_parent')), 0), "
    "(SELECT count(*) FROM search_pending p WHERE EXISTS (SELECT 1 FROM nodes n WHERE n.seq = p.seq)) "
    "+ (SELECT count(*) FROM nodes WHERE seq <= coalesce((SELECT value FROM meta "
    "WHERE key = 'index_backfill'), '0')::bigint)"
)
#: fsck: the entries of rows after %s up to %s, as arrays of lexemes (NULL: too wide).
DOCS_OF = ("SELECT seq, tsvector_to_array(words), words IS NULL FROM search_docs "
           "WHERE seq > %s AND seq <= %s")
#: fsck: stored nodes with no entry that are not waiting to be indexed.
MISSING_DOCS = (
    "SELECT n.id FROM nodes n WHERE n.seq > %s AND NOT EXISTS (SELECT 1 FROM search_docs d "
    "WHERE d.seq = n.seq) AND NOT EXISTS (SELECT 1 FROM search_pending p WHERE p.seq = n.seq) "
    "ORDER BY n.seq LIMIT 20"
)
#: Every entry and term dropped, every row to be indexed again (by the back-fill): under a
#: lock that holds writers back while the newest row is read (a row after it is pending).
REBUILD = [
    "LOCK TABLE nodes IN SHARE MODE",
    "DELETE FROM search_docs",
    "DELETE FROM search_terms",
    "DELETE FROM search_pending",
    "INSERT INTO meta VALUES ('index_backfill', (SELECT coalesce(max(seq), 0)::text FROM nodes)) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
]
