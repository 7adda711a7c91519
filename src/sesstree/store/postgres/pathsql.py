"""The SQL that reads a path on PostgreSQL (format 5): its loose tail, then its packs, in one
statement, so one round trip and one snapshot.

A path is a packed prefix and a loose tail (a node is packed only if its parent is, see
:mod:`sesstree.store.packs`). ``sesstree_path`` reads the tail as runs of rows, as format 4 read
a whole path: a session written by one writer lies in consecutive rows, read in one range scan
(a row is in the run when its parent is the row just before it); where writers interleaved
(runs shorter than 16 rows) the rest of the tail is walked over ``parent`` instead. Then it
goes from pack to pack: the node it reached gives the pack and the place in it (its depth less
the pack's), the pack's ``base`` the node the pack's first one hangs from. Each pack comes
whole (the client takes the prefix it needs), with the payloads stored apart that its nodes
name. Nothing is checked here: the client checks every loose row against its id and every
pack against its checksum and its links (:mod:`.unpack`).
"""

from __future__ import annotations

from .objects import LENGTH, ROW

__all__ = ["PATH", "PATH_FUNCTIONS"]

# Its result columns may change between versions, which CREATE OR REPLACE cannot do.
_DROP_PATH_FN = "DROP FUNCTION IF EXISTS sesstree_path(bytea, integer)"

# The path ending at node p_id, at most p_limit nodes: the head's depth; the loose tail
# (oldest first: its count, ids and rows concatenated, each row's length, and the id of the
# oldest one's parent); then the packs it goes through, newest first (each one's number, the
# id of the node it was entered at and that node's place, its depth, count, codec, checksum,
# data, and whether it has a base); and the payloads stored apart that those packs' nodes name.
_PATH_FN = f"""
CREATE OR REPLACE FUNCTION sesstree_path(
    p_id bytea, p_limit integer,
    OUT o_depth integer, OUT o_count integer, OUT o_ids bytea, OUT o_data bytea,
    OUT o_base bytea, OUT o_lengths integer[],
    OUT o_packs bigint[], OUT o_entries bytea[], OUT o_places integer[], OUT o_pdepths integer[],
    OUT o_pcounts integer[], OUT o_codecs integer[], OUT o_sums bytea[], OUT o_datas bytea[],
    OUT o_based boolean[], OUT o_hashes bytea[], OUT o_blobs bytea[]
) LANGUAGE plpgsql STABLE
-- A range of rows is read in index order, so the aggregates need no sort: without this, a
-- plan made before the table has statistics (or a generic one) scans and sorts instead.
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    cur bigint;
    packed bigint;
    need integer;
    lo bigint;
    start bigint;
    brk bigint;
    cnt integer;
    part_ids bytea;
    part_data bytea;
    part_lengths integer[];
    ids_parts bytea[] := '{{}}';
    data_parts bytea[] := '{{}}';
BEGIN
    o_count := 0;
    o_lengths := '{{}}';
    SELECT seq, depth, pack INTO cur, o_depth, packed FROM nodes WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    need := least(o_depth, p_limit);
    -- The loose tail, run by run, up to the first packed row (or the root, or the limit).
    WHILE o_count < need AND cur IS NOT NULL AND packed IS NULL LOOP
        lo := cur - (need - o_count) + 1;
        -- The newest row that ends the run at cur: a packed one (the run starts after it) or
        -- one whose parent is not the row before it (the run starts at it). Read backwards
        -- from cur in index order, it costs what the run is long.
        SELECT seq, pack INTO brk, packed FROM nodes
            WHERE seq BETWEEN lo AND cur
              AND (pack IS NOT NULL OR (seq > lo AND parent IS DISTINCT FROM seq - 1))
            ORDER BY seq DESC LIMIT 1;
        IF NOT FOUND THEN
            start := lo;
        ELSIF packed IS NOT NULL THEN
            start := brk + 1;
        ELSE
            start := brk;
        END IF;
        IF cur - start + 1 < 16 AND need - o_count > 16 THEN
            -- Interleaved writers: walk the rest of the tail over `parent`.
            WITH RECURSIVE walk(seq, parent, id, data, blob, k) AS (
                SELECT n.seq, n.parent, n.id, n.data, n.blob, 1 FROM nodes n WHERE n.seq = cur
                UNION ALL
                SELECT n.seq, n.parent, n.id, n.data, n.blob, w.k + 1 FROM walk w
                CROSS JOIN LATERAL (SELECT * FROM nodes WHERE seq = w.parent OFFSET 0) n
                WHERE w.k < need - o_count AND n.pack IS NULL
            )
            SELECT count(*), string_agg(w.id, ''::bytea ORDER BY w.k DESC),
                   string_agg({ROW.format(t="w")}, ''::bytea ORDER BY w.k DESC),
                   array_agg({LENGTH.format(t="w")} ORDER BY w.k DESC),
                   (SELECT x.parent FROM walk x ORDER BY x.k DESC LIMIT 1)
                INTO cnt, part_ids, part_data, part_lengths, cur
                FROM walk w;
        ELSE
            SELECT count(*), string_agg(id, ''::bytea ORDER BY seq),
                   string_agg({ROW.format(t="nodes")}, ''::bytea ORDER BY seq),
                   array_agg({LENGTH.format(t="nodes")} ORDER BY seq)
                INTO cnt, part_ids, part_data, part_lengths
                FROM nodes WHERE seq BETWEEN start AND cur;
            SELECT parent INTO cur FROM nodes WHERE seq = start;
        END IF;
        ids_parts := part_ids || ids_parts;
        data_parts := part_data || data_parts;
        o_lengths := part_lengths || o_lengths;
        o_count := o_count + cnt;
        packed := (SELECT pack FROM nodes WHERE seq = cur);
    END LOOP;
    -- (One run, the common case, needs no concatenation; each statement not run is one a
    -- new connection does not have to plan.)
    IF cardinality(ids_parts) = 1 THEN
        o_ids := ids_parts[1];
        o_data := data_parts[1];
    ELSIF cardinality(ids_parts) > 1 THEN
        SELECT string_agg(x, ''::bytea ORDER BY i) INTO o_ids
            FROM unnest(ids_parts) WITH ORDINALITY t(x, i);
        SELECT string_agg(x, ''::bytea ORDER BY i) INTO o_data
            FROM unnest(data_parts) WITH ORDINALITY t(x, i);
    END IF;
    IF cur IS NOT NULL THEN
        SELECT id INTO o_base FROM nodes WHERE seq = cur;
    END IF;
    IF o_count >= need OR cur IS NULL THEN
        RETURN;
    END IF;
    -- The packs, newest first: each step goes from the node reached to its pack, and on to
    -- the node the pack hangs from. (A step adds at least one node: a damaged depth that
    -- would not cannot loop.)
    WITH RECURSIVE walk(seq, pid, got, k) AS (
        SELECT n.seq, n.pack, n.depth - p.depth + 1, 1
            FROM nodes n JOIN packs p ON p.pid = n.pack WHERE n.seq = cur
        UNION ALL
        SELECT n.seq, n.pack, w.got + n.depth - p.depth + 1, w.k + 1 FROM walk w
        CROSS JOIN LATERAL (SELECT base FROM packs WHERE pid = w.pid OFFSET 0) b
        CROSS JOIN LATERAL (SELECT seq, pack, depth FROM nodes WHERE seq = b.base OFFSET 0) n
        CROSS JOIN LATERAL (SELECT depth FROM packs WHERE pid = n.pack OFFSET 0) p
        WHERE w.got < need - o_count AND w.k < need AND n.depth >= p.depth
    )
    SELECT array_agg(p.pid ORDER BY w.k), array_agg(n.id ORDER BY w.k),
           array_agg(n.depth - p.depth ORDER BY w.k), array_agg(p.depth ORDER BY w.k),
           array_agg(p.count ORDER BY w.k), array_agg(p.codec ORDER BY w.k),
           array_agg(p.sum ORDER BY w.k), array_agg(p.data ORDER BY w.k),
           array_agg(p.base IS NOT NULL ORDER BY w.k)
        INTO o_packs, o_entries, o_places, o_pdepths, o_pcounts, o_codecs, o_sums, o_datas,
             o_based
        FROM walk w JOIN nodes n ON n.seq = w.seq JOIN packs p ON p.pid = w.pid;
    -- The payloads stored apart (a packed row keeps the hash of one; the index holds only
    -- packed rows, sorted by pack then hash, so this reads just those).
    SELECT array_agg(b.hash), array_agg(b.data) INTO o_hashes, o_blobs FROM blobs b
        WHERE b.hash IN (SELECT n.blob FROM nodes n
                         WHERE n.pack = ANY(o_packs) AND n.blob IS NOT NULL);
END $$
"""
PATH_FUNCTIONS = [_DROP_PATH_FN, _PATH_FN]
PATH = "SELECT * FROM sesstree_path(%(id)s, %(limit)s)"
