"""The store: sessions and tags as refs into one DAG, HEAD, revisions, log and diff.

Everything here works through the :class:`~sesstree.store.base.Backend` seam, so it behaves the
same on every backend, and :class:`Store` is the one door to it above the seam. What Store
does is split by concern into the modules it calls down into: which engine opens a location
(:mod:`sesstree.store.engines`), the reads by id and full ref name (:mod:`.reads`, its base
class), what reads hand out (:mod:`.view`), session metadata (:mod:`.meta`), revisions
(:mod:`.revisions`), HEAD (:mod:`.head`), the write policy (:mod:`.policy`) and maintenance
(:mod:`.maintenance`); none of them imports Store back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..errors import RefExistsError, StoreCorruptError, UnknownRevisionError
from ..events import Derived, derive_exact
from ..node import (
    REMOTES,
    SESSIONS,
    TAGS,
    Node,
    NodeId,
    check_ref_name,
    session_ref,
    short_name,
    symbolic,
    tag_name,
    tag_ref,
)
from ..sending import derive_messages
from ..store.base import (
    Backend,
    Chain,
    ImportOrigin,
    PackCounts,
    RawNode,
    Ref,
    ReflogEntry,
    RefUpdate,
    SearchMode,
    WatchMark,
)
from ..store.engines import STORE_FILE, engine_of, open_backend
from .head import Checkout, FileHead, HeadKeeper, MetaHead, head_file_for
from .maintenance import GcResult, Stats, fsck, gc, repack, stats
from .meta import checked_meta, meta_fields, write_fields, write_origin
from .policy import WritePolicy
from .reads import StoredReads
from .revisions import logged_refs, named_for_log, resolve, session_name_of, steps_suffix
from .scan import list_refs_with_depth, reflog_page
from .search import SearchPage, search
from .view import Diff, SessionInfo, diff_of, nodes_of, raw_node

if TYPE_CHECKING:
    from .session import Session

__all__ = ["REMOTES", "SESSIONS", "STORE_FILE", "TAGS", "Diff", "SessionInfo", "Store", "open_store",
           "raw_node"]


def open_store(
    path: str | os.PathLike[str],
    *,
    durability: Literal["default", "durable"] = "default",
    create: bool = True,
    timeout: float = 10.0,
) -> Store:
    """Open (and by default create) the store in folder ``path``; ``":memory:"`` for a throwaway one;
    a ``postgresql://`` URL for a store on a PostgreSQL server (``pip install sesstree[postgres]``).

    ``durability="default"``: an acknowledged append survives the process being killed.
    ``durability="durable"``: it also survives power loss (an fsync per commit).
    For bulk writes, group appends in ``with store.batch():``.

    Raises:
        StoreNotFoundError: no store there and ``create`` is false.
        StoreCorruptError, StoreFormatError, StoreLockedError: the file cannot be used as it is.
        StoreReadOnlyError, StoreFullError: a new store cannot be created on this medium.
    """
    backend = open_backend(path, create=create, durable=durability == "durable", timeout=timeout)
    if engine_of(path) is not None:
        # A store a URL names is shared (PostgreSQL, or any engine registered for a scheme):
        # this user's HEAD is kept on this machine, not in the store.
        return Store(backend, head=FileHead(head_file_for(str(path))))
    return Store(backend)


class Store(StoredReads):
    """A session store: one DAG of events, with sessions and tags as named refs into it.

    What is stored is read by id through the methods of :class:`.reads.StoredReads` (the
    reads sync and the server need); this class adds names, HEAD, revisions and writes.
    """

    def __init__(self, backend: Backend, *, head: HeadKeeper | None = None) -> None:
        super().__init__(backend)
        #: Where HEAD is kept: in the store (a local store), or on this machine (a shared one).
        self._head: HeadKeeper = head if head is not None else MetaHead(backend)
        #: Batches and how ref moves are logged: one policy for every backend.
        self._policy = WritePolicy()
        #: HEAD as this store moves it (written after the batch commits when kept outside).
        self._checkout = Checkout(self._head, backend, self._policy.batch_depth)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the backend; the store cannot be used afterwards."""
        self.backend.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes into one transaction: fast for bulk writes, all-or-nothing.

        Appends inside the block are acknowledged (and durable) when the block exits; each ref
        moved gets one reflog entry for the whole batch.
        """
        self.refuse_in_read_view("start a batch of writes")
        with self._policy.batch() as state:
            try:
                with self.backend.batch():
                    yield
            except BaseException:
                if state.depth == 1:
                    for session in state.moved:
                        session.refresh()
                    self._checkout.batch_ended(committed=False)
                raise
            if state.depth == 1:
                # A HEAD kept outside the store (a shared store's) cannot be in the
                # transaction: it moves once the store's side has committed, never before.
                self._checkout.batch_ended(committed=True)

    # -- sessions ----------------------------------------------------------------------------

    def session(self, name: str) -> Session:
        """The handle of session ``name``: a new name starts empty, a known one has its history.

        Raises:
            InvalidRefNameError: ``name`` cannot name a session.
        """
        from .session import Session

        return Session(self, check_ref_name(name))

    def sessions(self) -> list[SessionInfo]:
        """Every session, sorted by name."""
        # One read of the refs with their depths: no head is fetched (a ref names only stored
        # nodes, so the depth is there; fsck checks both).
        return [SessionInfo(short_name(ref.name), ref.target, depth, ref.moved)
                for ref, depth in list_refs_with_depth(self.backend, SESSIONS)]

    def session_head(self, name: str) -> NodeId | None:
        """Where session ``name`` points, or None if it has no events yet."""
        ref = self.backend.get_ref(session_ref(name))
        return None if ref is None else ref.target

    def has_session(self, name: str) -> bool:
        """True if a session of that name exists (has at least one event)."""
        return self.backend.get_ref(session_ref(name)) is not None

    def fork(self, new: str, start: str | NodeId | None = None) -> Session:
        """Create session ``new`` at revision ``start`` (default HEAD). O(1): one ref, no copy.

        Raises:
            RefExistsError: ``new`` exists.
            UnknownRevisionError, AmbiguousPrefixError: ``start`` does not name one node.
        """
        check_ref_name(new)
        target = self.resolve(start if start is not None else "HEAD")
        return self._fork_at(new, target, self._named(start))

    def _fork_at(self, new: str, target: NodeId, source: str) -> Session:
        """Create session ``new`` at node ``target``; its reflog says it came from ``source``
        (a revision, or the session a handle forked: what the web view's fork mark names)."""
        check_ref_name(new)
        if self.has_session(new):
            raise RefExistsError(f"session {new!r} already exists")
        self.move_ref(session_ref(new), None, target, f"branch: created from {source}")
        return self.session(new)

    def _named(self, rev: str | None) -> str:
        """``rev`` as a reflog entry keeps it (see :func:`.revisions.named_for_log`)."""
        return named_for_log(rev, lambda: self.head()[0])

    def delete_session(self, name: str) -> NodeId:
        """Delete session ``name``; its reflog stays, so ``sess branch NAME ID`` restores it.

        The ref, HEAD (detached at the last node if it named the session) and the session's
        metadata change in one transaction: a crash leaves all of it or none.
        """
        self.refuse_in_read_view("delete a session")
        target = self._require_session(name)
        with self._checkout.moving(name, session_ref(name), "branch: deleted"), self.batch():
            target = self._require_session(name)
            self.move_ref(session_ref(name), target, None, "branch: deleted")
            self._checkout.follow(name, target)
            self.backend.set_session_meta(name, None)
        return target

    def rename_session(self, old: str, new: str) -> None:
        """Rename a session, carrying its reflog, metadata and HEAD along, in one transaction:
        a crash leaves the old name or the new one, never HEAD on a name that is gone (a
        shared store's HEAD, outside the transaction, see :mod:`sesstree.repo.head`)."""
        self.refuse_in_read_view("rename a session")
        check_ref_name(new)
        reason = f"branch: renamed {old} to {new}"
        with self._checkout.moving(old, session_ref(new), reason), self.batch():
            target = self._require_session(old)
            if self.has_session(new):
                raise RefExistsError(f"session {new!r} already exists")
            self.backend.rename_ref(session_ref(old), session_ref(new), target, reason)
            meta = self.backend.get_session_meta(old)
            if meta is not None:
                self.backend.set_session_meta(new, meta)
                self.backend.set_session_meta(old, None)
            self._checkout.follow(old, symbolic(session_ref(new)))

    def reset(self, name: str, rev: str | NodeId, reason: str | None = None, *,
              handle: Session | None = None) -> NodeId:
        """Move session ``name`` to ``rev`` (rewind or fast-forward); logged, so undoable.

        Without ``handle`` the session must exist, and moves from wherever it is. With the
        ``handle`` of the session (what :meth:`Session.reset` passes), the move is a
        compare-and-set against the head the handle last saw. A reset to where the session is
        moves nothing and logs nothing.

        Raises:
            UnknownRevisionError: ``rev`` names no node, or (no ``handle``) no such session.
            ConflictError: the session is no longer where ``handle`` saw it.
        """
        self.refuse_in_read_view("reset a session")
        target = self.resolve(rev)
        old = self._require_session(name) if handle is None else handle.head
        if old != target:
            self.move_ref(session_ref(name), old, target, reason or f"reset: moving to {rev}",
                          handle=handle)
        return target

    def session_name_of(self, rev: str) -> str:
        """The session a revision is about: ``quest-1~2``, ``quest-1@{1}`` and ``quest-1^`` name
        ``quest-1``; ``HEAD`` names the current session. Used to name exported files."""
        return session_name_of(self, rev)

    def _require_session(self, name: str) -> NodeId:
        head = self.session_head(name)
        if head is None:
            raise UnknownRevisionError(f"no session named {name!r}")
        return head

    def move_ref(self, ref: str, old: NodeId | None, new: NodeId | None, reason: str, *,
                 nodes: Sequence[RawNode] = (), handle: Session | None = None,
                 append: bool = False) -> None:
        """The one way a ref moves: store ``nodes`` and move ``ref`` from ``old`` to ``new`` as
        one compare-and-set with its reflog entry. ``handle`` is the session handle that moved
        it, so that a batch that fails puts the handle back where the store is; ``append``
        says the move is a plain append of ``handle`` (its run of them is logged as one entry,
        see :mod:`sesstree.repo.policy`).

        Raises:
            ConflictError: ``ref`` is not at ``old`` (nothing was written).
            MissingNodeError: a parent, or ``new``, is not stored.
        """
        self.refuse_in_read_view("move a ref")
        update = self._policy.update(ref, old, new, reason, handle, append)
        self.backend.commit(nodes, [update])
        self._policy.moved(update, handle, append)

    def get_session_meta(self, name: str) -> dict[str, Any] | None:
        """The metadata stored with a session (``NAME.meta.json`` on import/export), or None.
        Its import provenance is apart: :meth:`session_origin`."""
        return meta_fields(self.backend, name)

    def set_session_meta(self, name: str, meta: dict[str, Any] | None) -> None:
        """Store (or with None drop) a session's metadata, a JSON object. Not hashed, not part
        of any node; it moves with a rename and goes with a delete. Its import provenance
        (:meth:`session_origin`) is kept as it is.

        Raises:
            InvalidEventError: ``meta`` is not a JSON object.
        """
        self.refuse_in_read_view("set a session's metadata")
        fields = checked_meta(name, meta)
        with self.batch():
            write_fields(self.backend, name, fields)

    def session_origin(self, name: str) -> ImportOrigin | None:
        """Where session ``name`` was imported from (a file and its format), or None."""
        meta = self.backend.get_session_meta(name)
        return meta.origin if meta is not None else None

    def set_session_origin(self, name: str, origin: ImportOrigin | None) -> None:
        """Record (or with None forget) where session ``name`` was imported from; its other
        metadata is kept as it is."""
        self.refuse_in_read_view("set a session's origin")
        with self.batch():
            write_origin(self.backend, name, origin)

    def watch_marks(self) -> dict[str, WatchMark]:
        """How far ``sess watch`` has read each file, by absolute path (one read)."""
        return self.backend.list_watch_marks()

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        """Move the watch mark of ``path`` from ``old`` to ``new`` (None: absent), as a
        compare-and-set; inside a batch, in its transaction.

        Raises:
            ConflictError: the stored mark is not ``old`` (another watcher read the file).
        """
        self.refuse_in_read_view("move a watch mark")
        with self.batch():
            self.backend.set_watch_mark(path, old, new)

    # -- tags and HEAD -----------------------------------------------------------------------

    def tag(self, name: str, rev: str | NodeId = "HEAD") -> NodeId:
        """Name the node at ``rev``. Raises RefExistsError if the tag exists."""
        check_ref_name(name)
        target = self.resolve(rev)
        if self.backend.get_ref(tag_ref(name)) is not None:
            raise RefExistsError(f"tag {name!r} already exists")
        self.move_ref(tag_ref(name), None, target, f"tag: {rev}")
        return target

    def delete_tag(self, name: str) -> NodeId:
        """Delete a tag (logged). Raises UnknownRevisionError if there is none of that name."""
        ref = self.backend.get_ref(tag_ref(name))
        if ref is None:
            raise UnknownRevisionError(f"no tag named {name!r}")
        self.move_ref(tag_ref(name), ref.target, None, "tag: deleted")
        return ref.target

    def expire_reflog(self, name: str) -> int:
        """Forget where session ``name`` (a tag with ``tags/NAME``) has been, so that ``gc``
        can remove what only that history kept: all of a deleted session's log, all but the
        newest entry of a live one. This is the one step that gives up undo; returns how many
        entries went."""
        self.refuse_in_read_view("expire a reflog")
        ref = name if name.startswith((SESSIONS, TAGS)) else session_ref(name)
        if not self.backend.reflog(ref):
            raise UnknownRevisionError(f"no session named {name!r} and no reflog for it")
        return self.backend.expire_reflog(ref)

    def tags(self) -> list[Ref]:
        """Every tag, with the short name (no ``tags/``)."""
        return [Ref(name, r.target, r.moved) for r in self.backend.list_refs(TAGS)
                if (name := tag_name(r.name)) is not None]

    def head(self) -> tuple[str | None, NodeId | None]:
        """``(session name, node)`` of HEAD; name is None when detached, node None when empty."""
        return self._checkout.current(self.session_head)

    def checkout(self, rev: str) -> tuple[str | None, NodeId]:
        """Point HEAD at a session (by name) or, detached, at any other revision's node."""
        self.refuse_in_read_view("move HEAD")
        name = short_name(rev)
        if not steps_suffix(rev) and self.has_session(name):
            self._checkout.set(symbolic(session_ref(name)))
            return name, self._require_session(name)
        target = self.resolve(rev)
        self._checkout.set(target)
        return None, target

    def set_head_session(self, name: str) -> None:
        """Point HEAD at session ``name``, which may not exist yet (its first append creates it)."""
        self.refuse_in_read_view("move HEAD")
        self._checkout.set(symbolic(session_ref(check_ref_name(name))))

    # -- revisions ---------------------------------------------------------------------------

    def resolve(self, rev: str | NodeId) -> NodeId:
        """The node a revision names: ``HEAD``, a session or tag (``~N``/``^`` allowed), an id
        prefix, ``NAME@{N}``, a remote's ``REMOTE/NAME``. See :mod:`sesstree.repo.revisions`.

        Raises:
            UnknownRevisionError: nothing matches, or ``~N`` goes past the root.
            AmbiguousPrefixError: the id prefix matches several nodes.
        """
        return resolve(self, rev)

    # -- reading -----------------------------------------------------------------------------

    def chain(self, rev: str | NodeId, limit: int | None = None) -> Chain:
        """The events from the root to ``rev`` (only the newest ``limit``), oldest first."""
        # Every id resolved here came from the store (a ref, a prefix): one it lost is damage.
        node = self.resolve(rev)
        try:
            return self.chain_at(node, limit)
        except StoreCorruptError as exc:
            raise StoreCorruptError(f"{rev}: {exc}") from None

    def log(self, rev: str | NodeId = "HEAD", limit: int | None = None) -> list[Node]:
        """Nodes walking back from ``rev``, newest first."""
        chain = self.chain(rev, limit)
        nodes = nodes_of(chain)
        nodes.reverse()
        return nodes

    def show(self, rev: str | NodeId) -> Node:
        """One node in full."""
        stored = self.node(self.resolve(rev))  # resolved ids come from the store
        return Node(stored.id, stored.parent, stored.type, msgspec.msgpack.decode(stored.encoded))

    def depth(self, rev: str | NodeId) -> int:
        """How many events lead to ``rev``, itself included."""
        return self.node(self.resolve(rev)).depth

    def derive(self, rev: str | NodeId = "HEAD", *, sending: bool = False) -> Derived:
        """The derived chat messages at ``rev`` and the problems found in them; with
        ``sending``, the sending view (see :meth:`Session.sending_view`)."""
        chain = self.chain(rev)
        # (The ids are built only if a compaction marker needs them.)
        return derive_messages(chain.types, chain.datas, lambda: chain.ids, repair=sending)

    def messages(self, rev: str | NodeId = "HEAD") -> list[dict[str, Any]]:
        """The OpenAI-style chat messages at ``rev``, exactly as they were added."""
        chain = self.chain(rev)
        # Only the messages, without the pairing check of tool calls :meth:`derive` reports.
        return derive_exact(chain.types, chain.datas, lambda: chain.ids, problems=False).messages

    def diff(self, a: str | NodeId, b: str | NodeId) -> Diff:
        """Where two revisions part and what each added since: the last node of the history
        they share as :mod:`sesstree.repo.related` reads it (None when they share none). Records of
        the run that both repeat after their last shared message or turn end (the next
        turn's ``turn/start``) are listed on each side; an ancestor is shared whole."""
        return diff_of(self.chain(a), self.chain(b))

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        """Every move of session ``name`` (a tag with ``tags/NAME``), or of every ref."""
        if name is None:
            return self.backend.reflog()
        ref, fallback = logged_refs(name)
        entries = self.backend.reflog(ref)
        if not entries and fallback is not None:
            entries = self.backend.reflog(fallback)  # REMOTE/NAME, a remote session
        return entries

    def reflog_page(self, name: str, limit: int, offset: int = 0) -> tuple[list[ReflogEntry], int]:
        """One page of the moves of session ``name`` (named as :meth:`reflog` names it),
        **newest first**: ``limit`` moves after the newest ``offset``, and how many it has in
        all. It reads the page, not the whole log (``sess reflog -n``, the web view).

        Raises:
            ValueError: ``limit`` or ``offset`` is negative.
        """
        if limit < 0 or offset < 0:
            raise ValueError(f"a reflog page needs a limit and an offset of 0 or more, "
                             f"not {limit} and {offset}")
        ref, fallback = logged_refs(name)
        page = reflog_page(self.backend, ref, limit, offset)
        if not page[1] and fallback is not None:
            page = reflog_page(self.backend, fallback, limit, offset)
        return page

    # -- maintenance -------------------------------------------------------------------------

    def search(self, pattern: str, *, mode: SearchMode = "words", ignore_case: bool = False,
               roles: Sequence[str] = (), types: Sequence[str] = (), since: float | None = None,
               until: float | None = None, revs: Sequence[str] = (), everything: bool = False,
               limit: int = 20, cursor: str | None = None, shown: int = 3) -> SearchPage:
        """The nodes whose text matches, newest first, a page at a time, each once with the
        sessions that reach it. See :func:`sesstree.repo.search.search`."""
        return search(self, pattern, mode=mode, ignore_case=ignore_case, roles=roles, types=types,
                      since=since, until=until, revs=revs, everything=everything, limit=limit,
                      cursor=cursor, shown=shown)

    def fsck(self) -> list[str]:
        """Every fault in the store (empty when sound). See :func:`sesstree.repo.maintenance.fsck`."""
        return fsck(self)

    def gc(self, *, dry_run: bool = False) -> GcResult:
        """Remove what nothing reaches. See :func:`sesstree.repo.maintenance.gc`."""
        if not dry_run:  # (a dry run only reads)
            self.refuse_in_read_view("collect garbage")
        return gc(self, dry_run=dry_run)

    def repack(self, *, progress: Callable[[int, int], None] | None = None) -> PackCounts | None:
        """Pack every loose tail. See :func:`sesstree.repo.maintenance.repack`."""
        self.refuse_in_read_view("repack")
        return repack(self, progress=progress)

    def stats(self, *, progress: Callable[[int, int], None] | None = None) -> Stats:
        """Nodes, refs, logical and physical bytes. See :func:`sesstree.repo.maintenance.stats`."""
        return stats(self, progress=progress)

    # -- writing -----------------------------------------------------------------------------

    def write(
        self, nodes: Sequence[Node], updates: Sequence[RefUpdate] = ()
    ) -> None:
        """Store nodes (parents first, idempotent) and apply ref updates, atomically.

        The low-level write that importers use for whole trees. Session handles use
        :meth:`Session.append`.
        """
        self.refuse_in_read_view("write nodes")
        planned = [self._policy.update(u.name, u.old, u.new, u.reason, None) for u in updates]
        self.backend.commit([raw_node(n) for n in nodes], planned)
        for u in planned:
            self._policy.moved(u, None)

