"""A store on a PostgreSQL server: many processes on many machines share one DAG.

``open_store("postgresql://user@host/db")`` opens one. The backend owns its connection state
and the parts that use it, each kept to one side of the seam:

- :mod:`.conn`: the connection, reconnecting, retrying, translating errors; :mod:`.channel`:
  that connection as the parts share it, with the state of the open batch;
- :mod:`.schema`: the tables, created and upgraded; :mod:`.codec`: rows compressed at rest;
- :mod:`.writes`: commits, batches, renames, settings, in round trips;
- :mod:`.reads`: nodes, paths, refs, the reflog and settings; :mod:`.scans`: the reads whose
  cost follows what they touch, and gc in short slices;
- :mod:`.packer`: loose tails made into packs (format 5), :mod:`.unpack`: packs read back
  and checked, :mod:`.packfsck`: fsck of every pack;
- :mod:`.textindex` and :mod:`.textquery`: the text index (format 7), kept and searched;
  :mod:`.reaching`: which sessions reach a node;
- :mod:`.objects`, :mod:`.pathsql`, :mod:`.packsql` and :mod:`.refs`: the SQL of nodes and
  payloads, of paths, of packs, and of refs and the reflog.

This module only puts them together. The reads are bound to the backend when it is made, so
a read is one call from the store to the part that runs it; the writes and the lifecycle are
methods of the class.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractContextManager

import psycopg

from ...node import NodeId
from ..base import RawNode, RefUpdate, SessionMeta, WatchMark
from ..urls import redact_url
from .channel import Channel
from .codec import PgPayloads
from .conn import Conn, Connector, StoreUnavailableError
from .packer import PgPacker
from .reaching import PgReaching
from .reads import PgReads
from .scans import PgScans
from .schema import ensure_schema
from .textindex import PgTextIndex
from .textquery import PgSearch
from .writes import PgWrites

__all__ = ["PostgresBackend", "StoreUnavailableError"]


class PostgresBackend:
    """A store in a PostgreSQL database (or one schema of it). See the module docstring."""

    def __init__(
        self, url: str, *, create: bool = True, durable: bool = False, timeout: float = 10.0,
    ) -> None:
        self.url = redact_url(url)
        self._durable = durable
        self._timeout = timeout
        self._create = create
        self._conn = Connector(url, timeout=timeout, setup=self._setup)
        channel = Channel(self._conn, self.url)
        # Compression of rows and payloads (format 4), and the dictionary it trains.
        payloads = PgPayloads(lambda sql, params: channel.read(sql, params, binary=True))
        try:
            self._conn.run(self._check_schema)
        except BaseException:
            self._conn.close()
            raise
        self._channel = channel
        reads = PgReads(channel, payloads)
        self._packer = packer = PgPacker(channel, payloads, reads.packs)
        self._writes = PgWrites(channel, payloads, packer)
        self._scans = scans = PgScans(channel, payloads, reads, packer)
        # The reads, bound: the store calls the part that runs them, with no layer between.
        self.get, self.has, self.chain = reads.get, reads.has, reads.chain
        self.resolve_prefix, self.iter_nodes = reads.resolve_prefix, reads.iter_nodes
        self.recorded = reads.recorded
        self.count_nodes, self.physical_bytes = reads.count_nodes, reads.physical_bytes
        self.get_ref, self.list_refs, self.reflog = reads.get_ref, reads.list_refs, reads.reflog
        self.get_session_meta = reads.get_session_meta
        self.list_session_meta = reads.list_session_meta
        self.list_watch_marks = reads.list_watch_marks
        self.get_head, self.store_format = reads.get_head, reads.store_format
        self.snapshot, self.check = reads.snapshot, reads.check
        # The bounded reads (base.ScaleReads) and gc's two steps.
        self.list_refs_with_depth, self.refs_at = scans.list_refs_with_depth, scans.refs_at
        self.node_keys, self.ids_of_keys = scans.node_keys, scans.ids_of_keys
        self.iter_links, self.verify_nodes = scans.iter_links, scans.verify_nodes
        self.newest_refs, self.reflog_stamp = scans.newest_refs, scans.reflog_stamp
        self.reflog_page, self.reflog_times = scans.reflog_page, scans.reflog_times
        self.counts, self.server_stats, self.sweep = scans.counts, scans.server_stats, scans.sweep
        self.gc_walk, self.gc_remove = scans.gc_walk, scans.gc_remove
        # Packs (base.Packing).
        self.pack_counts, self.repack = packer.pack_counts, packer.repack
        # The text index (base.TextIndex, format 7) and which sessions reach a hit.
        self._text = text = PgTextIndex(channel, reads)
        self.search_nodes = search = PgSearch(channel, reads, text).search_nodes
        self.index_faults, self.rebuild_index = text.faults, text.rebuild
        self.index_counts = text.counts
        reaching = PgReaching(channel)
        self.refs_reaching = reaching.refs_reaching
        self.search_reaching = functools.partial(reaching.search_reaching, search)

    def _setup(self, conn: Conn) -> None:
        """Per-connection settings, applied on every (re)connection."""
        # Every read of sesstree is a lookup or a range of `seq`: read in index order, a range
        # needs no sort for the path's aggregates, where a bitmap scan would (measured: a
        # 10,000-event load 0.9 ms faster on the server). Only a speed-up: an engine without
        # the setting (CockroachDB, YugabyteDB) is used as it is.
        self._try_setting(conn, "SET enable_bitmapscan = off")
        # A writer waits for a ref's row as long as the store's timeout, as on SQLite, and
        # then gets StoreLockedError (SQLSTATE 55P03) instead of waiting for ever on a long
        # batch. Writers on other sessions never wait: each locks only its own ref's row.
        self._try_setting(conn, f"SET lock_timeout = {max(1, int(self._timeout * 1000))}")
        if self._durable:
            # The server's default is already `on`; a durable store insists on it, whatever
            # the server or the role was configured with.
            conn.execute("SET synchronous_commit = on")

    @staticmethod
    def _try_setting(conn: Conn, statement: str) -> None:
        try:
            conn.execute(statement)
        except psycopg.errors.UndefinedObject:
            pass  # SQLSTATE 42704: the engine has no such setting

    def _check_schema(self, conn: Conn, replay: bool) -> None:
        ensure_schema(conn, create=self._create, shown=self.url)

    @property
    def _db(self) -> Conn:
        """The current connection (tests use it to reach under the API)."""
        return self._conn.raw

    # -- writing (methods, so that a tool or a test can wrap one for every backend) ---------

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """See :meth:`sesstree.store.base.Backend.commit`."""
        self._writes.commit(nodes, updates)

    def batch(self) -> AbstractContextManager[None]:
        """See :meth:`sesstree.store.base.Backend.batch`: one transaction."""
        return self._writes.batch()

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        """See :meth:`sesstree.store.base.RefStore.rename_ref`."""
        self._writes.rename_ref(old, new, target, reason)

    def expire_reflog(self, name: str) -> int:
        """See :meth:`sesstree.store.base.RefStore.expire_reflog`."""
        return self._writes.expire_reflog(name)

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        """See :meth:`sesstree.store.base.RefStore.set_session_meta`."""
        self._writes.set_session_meta(name, meta)

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        """See :meth:`sesstree.store.base.RefStore.set_watch_mark`."""
        self._writes.set_watch_mark(path, old, new)

    def set_head(self, value: str) -> None:
        """See :meth:`sesstree.store.base.RefStore.set_head`."""
        self._writes.set_head(value)

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        """See :meth:`sesstree.store.base.ObjectStore.delete_nodes`."""
        return self._writes.delete_nodes(ids)

    # -- maintenance on the server -----------------------------------------------------------

    def collect_garbage(
        self, dry_run: bool, keep: NodeId | None = None
    ) -> tuple[list[NodeId], int, int]:
        """Find (and unless ``dry_run`` remove) what nothing reaches, walking on the server.

        Returns the unreachable ids (newest first), how many were removed and how many nodes
        are kept; only those ids come to the client. The walk reads a snapshot and blocks no
        one. The removal goes in chunks, each a short transaction that first waits for writers
        in progress and holds new ones back (SHARE locks) while it keeps whatever they made
        reachable since the snapshot, so a node being appended to, or a payload a new node
        shares, never goes.
        """
        # Walked on the server, removed in short slices: see .scans.
        return self._scans.sweep(dry_run, keep, None)

    def close(self) -> None:
        """Close the connection (training the compression dictionary first, when due, and
        packing the tails of the sessions this backend grew)."""
        with self._channel.lock:
            self._writes.train_at_close()
            self._packer.at_close()
            self._conn.close()
