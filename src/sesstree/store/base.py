"""The storage seam: what a backend must do, and nothing more.

A backend is two narrow contracts that one transaction can span: an :class:`ObjectStore`
(nodes, put idempotently, read by id or as a chain from a head, walked for reachability) and
a :class:`RefStore` whose refs change only by compare-and-set, each change logged in the
reflog in the same atomic step. Everything else (revisions, log, gc, fsck, stats) is built on top in
:mod:`sesstree.repo.store` and works the same on every backend.

Nodes cross this seam with their data already canonically encoded (:class:`RawNode`), so a
backend never re-encodes, and the hash is computed once, above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

import msgspec

from ..node import NodeId

__all__ = [
    "PROVENANCE_KEY",
    "RUN_KEY",
    "Backend",
    "Chain",
    "Counts",
    "ImportOrigin",
    "IndexCounts",
    "IndexHit",
    "ObjectStore",
    "PackCounts",
    "Packing",
    "Progress",
    "RawNode",
    "Reaching",
    "ReachingSearch",
    "Ref",
    "RefStore",
    "RefUpdate",
    "ReflogEntry",
    "ReflogStamp",
    "RefsReaching",
    "ScaleReads",
    "SearchMode",
    "SearchQuery",
    "SessionMeta",
    "StoreFormat",
    "StoredNode",
    "TextIndex",
    "WatchMark",
    "decode_session_meta",
    "decode_watch_mark",
    "encode_session_meta",
    "encode_watch_mark",
]

#: Called with (done, total) as a long operation advances; total is 0 when not known.
Progress = Callable[[int, int], None]

#: Where a session's import provenance sits in its stored metadata document (see
#: :func:`encode_session_meta`): a key no importer's own metadata uses.
PROVENANCE_KEY = "sesstree.import"
#: Where ``sess run`` remembers a session's settings among its metadata fields: written by the
#: agent (:mod:`sesstree.agent.settings`), shown by the CLI (:mod:`sesstree.cli.titles`).
RUN_KEY = "sesstree.run"


class RawNode(msgspec.Struct, frozen=True, gc=False):
    """A node on its way into a backend: id computed, data canonically encoded."""

    id: NodeId
    parent: NodeId | None
    type: str
    encoded: bytes


class StoredNode(msgspec.Struct, frozen=True, gc=False):
    """A node as a backend holds it, with its depth (1 for a root)."""

    id: NodeId
    parent: NodeId | None
    depth: int
    type: str
    encoded: bytes


class Chain:
    """A stretch of one path through the DAG, oldest first, with data decoded.

    The ids are read with the data, from the same snapshot (``packed_ids``: the 32-byte ids
    end to end), but turned into hex only when asked for (``ids``): loading a session's
    messages does not need them, and for a long session that is a measurable share of it.
    """

    __slots__ = ("_ids", "_packed", "base", "datas", "start_depth", "types")

    def __init__(
        self,
        types: list[str],
        datas: list[Any],
        start_depth: int,
        base: NodeId | None = None,
        *,
        ids: list[NodeId] | None = None,
        packed_ids: bytes | None = None,
    ) -> None:
        self.types = types
        self.datas = datas
        #: Depth of the first node: 1 when the chain starts at a root.
        self.start_depth = start_depth
        #: Parent of the first node: None when the chain starts at a root.
        self.base = base
        self._ids = ids
        self._packed = packed_ids

    @property
    def ids(self) -> list[NodeId]:
        """The hex ids, oldest first."""
        if self._ids is None:
            packed = self._packed or b""
            self._ids = [NodeId(packed[i : i + 32].hex()) for i in range(0, len(packed), 32)]
        return self._ids

    def __len__(self) -> int:
        return len(self.types)


class Ref(msgspec.Struct, frozen=True):
    """A named pointer: ``sessions/NAME`` or ``tags/NAME``."""

    name: str
    target: NodeId
    moved: float


class RefUpdate(msgspec.Struct, frozen=True):
    """One compare-and-set: move ``name`` from ``old`` to ``new`` (None: absent), logged.

    With ``fold``, the move is logged by folding it into the ref's newest reflog entry (the
    one that put the ref at ``old``): that entry keeps its ``old`` (and, as ``started``, the
    time of its first move) and takes this move's ``new``, time and reason, instead of a new
    entry being added. The backend only carries
    this out; when to fold (the later moves of a ref in one batch, or in one agent turn) is
    decided above the seam, by :class:`~sesstree.repo.store.Store`.
    """

    name: str
    old: NodeId | None
    new: NodeId | None
    reason: str
    fold: bool = False


class ReflogEntry(msgspec.Struct, frozen=True):
    """One move of a ref. ``old`` is None for a creation, ``new`` None for a deletion.

    An entry that later moves were folded into (a batch, an agent turn) spans them: ``time``
    is the last move's, ``started`` the first's (None for an entry of one move, and on stores
    too old to keep it).
    """

    ref: str
    old: NodeId | None
    new: NodeId | None
    time: float
    reason: str
    started: float | None = None


class ImportOrigin(msgspec.Struct, frozen=True):
    """What a session was imported from: a file read as a format, its main line or not."""

    format: str
    source: str
    main: bool = True


class SessionMeta(msgspec.Struct, frozen=True):
    """What a store keeps beside a session, in no node and not hashed: it moves with a rename
    and goes with a delete, in the same transaction as the ref.

    ``fields``: the session's own metadata (an import's header, ``NAME.meta.json``);
    ``origin``: where an import came from (see :mod:`sesstree.interop.provenance`);
    ``legacy_origin``: provenance as stores written before it moved into the session's
    metadata kept it (``FORMAT:PATH``), read-only: writing a session's metadata drops it.
    """

    fields: dict[str, Any] = msgspec.field(default_factory=dict)
    origin: ImportOrigin | None = None
    legacy_origin: str | None = None

    def __bool__(self) -> bool:
        return bool(self.fields) or self.origin is not None or self.legacy_origin is not None


class WatchMark(msgspec.Struct, frozen=True):
    """How far ``sess watch`` has read one file (see :mod:`sesstree.interop.follow`), kept
    beside the refs under the file's absolute path, so that a restarted watch goes on where
    it stopped. Not a ref: no node and no reflog entry; written by compare-and-set.

    ``format``: what the file was read as ("" for none); ``offset``: the bytes recorded (up
    to the end of the last whole line); ``lines``: how many lines those bytes hold;
    ``size``, ``mtime_ns``, ``inode``: the file as it was then; ``digest``: the blake3 (hex)
    of the bytes recorded, which tells a file that grew from one rewritten; ``pending``: it
    was recorded while it was still being written (a reply may still be streaming), so it is
    to be recorded again once it has been quiet long enough for its last reply to be settled;
    ``seen_ns``: when (ns since the epoch) the file was looked at for this mark. A mark seen
    within the file system's timestamp resolution of ``mtime_ns`` is *racy* (as git calls an
    index entry of a file written in the same tick it was read): a write made right after it
    could leave size, mtime and inode as they were, so its bytes are checked, not its stat.
    """

    format: str
    offset: int
    lines: int
    size: int
    mtime_ns: int
    inode: int
    digest: str
    pending: bool = False
    seen_ns: int = 0


def encode_watch_mark(mark: WatchMark) -> str:
    """The one text form of a :class:`WatchMark` every backend stores (a JSON object)."""
    return msgspec.json.encode(mark).decode()


def decode_watch_mark(text: str) -> WatchMark | None:
    """The inverse of :func:`encode_watch_mark`; None for a row that is not one (a hand
    edit), which a watch then treats as a file it has not read."""
    try:
        return msgspec.json.decode(text, type=WatchMark)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


class StoreFormat(msgspec.Struct, frozen=True):
    """A store's format version and id scheme, as its backend recorded them."""

    version: int
    ids: str


def encode_session_meta(meta: SessionMeta) -> str:
    """The one text form of :class:`SessionMeta` every backend stores (``legacy_origin`` is
    never written): a JSON object of the fields, with the origin under ``sesstree.import``."""
    doc = dict(meta.fields)
    if meta.origin is not None:
        doc[PROVENANCE_KEY] = msgspec.to_builtins(meta.origin)
    return msgspec.json.encode(doc).decode()


def decode_session_meta(text: str | None, legacy: str | None = None) -> SessionMeta | None:
    """The inverse of :func:`encode_session_meta`; ``legacy`` is a legacy provenance row.
    A document that is not sesstree's own (a hand-edited row) is kept as fields."""
    if text is None and legacy is None:
        return None
    fields: dict[str, Any] = {}
    origin: ImportOrigin | None = None
    if text is not None:
        try:
            doc = msgspec.json.decode(text)
        except (msgspec.DecodeError, RecursionError):
            doc = {"value": text}
        fields = doc if isinstance(doc, dict) else {"value": doc}
        found = fields.pop(PROVENANCE_KEY, None)
        if isinstance(found, dict):
            try:
                origin = msgspec.convert(found, ImportOrigin)
            except msgspec.ValidationError:
                fields[PROVENANCE_KEY] = found  # not ours after all: keep it as written
    return SessionMeta(fields, origin, legacy)


class ObjectStore(Protocol):
    """Nodes: stored idempotently (through :meth:`Backend.commit`), read by id, as the chain
    of a head with its ids from one snapshot, by id prefix, and walked for reachability on
    the engine's side (gc)."""

    def get(self, id: NodeId) -> StoredNode | None:
        """One node, or None."""

    def has(self, ids: Sequence[NodeId]) -> set[NodeId]:
        """The subset of ``ids`` that are stored."""

    def chain(self, head: NodeId, limit: int | None = None) -> Chain:
        """The path that ends at ``head``, oldest first; only the newest ``limit`` if given."""

    def resolve_prefix(self, prefix: str, limit: int = 2) -> list[NodeId]:
        """Up to ``limit`` ids that start with the lowercase hex ``prefix``."""

    def recorded(self, ids: Sequence[NodeId]) -> dict[NodeId, float]:
        """When the store first recorded each of ``ids`` (Unix seconds, to the millisecond):
        the commit that first stored it (a put of a node already stored keeps the older
        time). Only for the nodes it keeps a time for: a node written by a sesstree that kept
        none (before format 6) has none, and is dated by the reflog."""

    def iter_nodes(self) -> Iterator[StoredNode]:
        """Every stored node, parents before children."""

    def count_nodes(self) -> int:
        """How many nodes are stored."""

    def delete_nodes(self, ids: Sequence[NodeId]) -> int:
        """Remove nodes (gc only: the caller ensures nothing reaches them). Returns the count."""

    def collect_garbage(
        self, dry_run: bool, keep: NodeId | None = None
    ) -> tuple[list[NodeId], int, int]:
        """Remove (unless ``dry_run``) nodes and payloads that no ref, reflog entry or
        detached HEAD reaches, nor ``keep`` (the detached HEAD of a checkout kept outside the
        store). Returns the unreachable ids, how many were removed, how many
        nodes are kept. Finds reachability from ids and parents only, and never holds the
        write lock for long."""

    def physical_bytes(self) -> int:
        """Bytes the store takes on disk (0 in memory)."""


class RefStore(Protocol):
    """Refs, their reflog, what is kept beside them (session metadata, a local store's HEAD)
    and the store's format. A ref moves only by compare-and-set with its reflog entry in the
    same transaction (:meth:`Backend.commit`); a rename and an expiry are compare-and-sets
    too. Everything here is typed: no string-keyed settings cross the seam."""

    def get_ref(self, name: str) -> Ref | None:
        """The ref, or None."""

    def list_refs(self, prefix: str) -> list[Ref]:
        """Every ref whose name starts with ``prefix``, sorted by name."""

    def reflog(self, name: str | None = None) -> list[ReflogEntry]:
        """Moves of one ref (or of all), oldest first: one ref's in the order they were made,
        every ref's by time (ties in the order they were made)."""

    def rename_ref(self, old: str, new: str, target: NodeId, reason: str) -> None:
        """Atomically move ref ``old`` (at ``target``) to ``new`` (absent), carrying its reflog."""

    def expire_reflog(self, name: str) -> int:
        """Forget the history of ref ``name``: every entry of a deleted ref, all but the newest
        of a live one (which then forgets its ``old``). Returns how many entries went."""

    def get_session_meta(self, name: str) -> SessionMeta | None:
        """What is kept beside session ``name`` (its ref name without ``sessions/``), or None."""

    def set_session_meta(self, name: str, meta: SessionMeta | None) -> None:
        """Keep ``meta`` beside session ``name`` (None or an empty one: keep nothing); in the
        open batch's transaction, if there is one."""

    def list_session_meta(self) -> dict[str, SessionMeta]:
        """What is kept beside every session that has any, by name, in one read."""

    def list_watch_marks(self) -> dict[str, WatchMark]:
        """Every file's :class:`WatchMark`, by absolute path, in one read."""

    def set_watch_mark(self, path: str, old: WatchMark | None, new: WatchMark | None) -> None:
        """Compare-and-set the mark of ``path``: from ``old`` (None: absent) to ``new`` (None:
        remove it); in the open batch's transaction, if there is one. Two watchers of one
        store thus never both record the same stretch of a file.

        Raises:
            ConflictError: the stored mark is not ``old`` (nothing was written).
        """

    def get_head(self) -> str | None:
        """HEAD as a local store keeps it (``ref: sessions/NAME`` or an id), or None."""

    def set_head(self, value: str) -> None:
        """Set HEAD, in the open batch's transaction if there is one (a rename or delete
        moves it with the ref it follows)."""

    def store_format(self) -> StoreFormat:
        """The format version and id scheme the store was written with."""


class Counts(msgspec.Struct, frozen=True):
    """What ``stats`` reports, as a backend counts it without reading every node."""

    nodes: int
    sessions: int
    tags: int
    reflog_entries: int
    logical_bytes: int


class PackCounts(msgspec.Struct, frozen=True):
    """How much of a store is packed (see :mod:`sesstree.store.packs`): its packs, the nodes
    in them and the loose ones, and the packs' bytes as stored and before compression."""

    packs: int
    packed_nodes: int
    loose_nodes: int
    stored_bytes: int
    raw_bytes: int


class Packing(Protocol):
    """What an engine that keeps packs does besides reading them (optional: the memory engine
    keeps none)."""

    def pack_counts(self) -> PackCounts:
        """Packs, packed and loose nodes, and the packs' bytes, without reading any pack."""

    def repack(self, progress: Progress | None = None) -> PackCounts:
        """Pack every loose tail of every ref, whatever its length (and finish an upgrade's
        packing if one is pending), in short transactions: the store stays usable, and a kill
        loses nothing. Returns the counts after."""


class ReflogStamp(msgspec.Struct, frozen=True):
    """A stamp of the whole reflog that changes whenever any ref moves: its entry count and
    its newest entry's time (a move adds an entry, or folds into one with its own time)."""

    entries: int
    newest: float


class ScaleReads(Protocol):
    """Reads whose cost follows what they touch, not what the store holds (optional: a
    backend without them gets the generic, whole-store versions in :mod:`sesstree.repo.scan`).

    Node *keys* are the backend's own integers for nodes, given in write order (a parent's key
    is always smaller than its children's), so that reachability can be computed from pairs of
    integers, never from payloads.
    """

    def list_refs_with_depth(self, prefix: str) -> list[tuple[Ref, int]]:
        """Every ref under ``prefix`` with the depth of its target, sorted by name: one read,
        not one node fetched per ref."""

    def refs_at(self, targets: Sequence[NodeId]) -> list[Ref]:
        """The refs that point at one of ``targets`` (an index lookup per target, not a list
        of every ref)."""

    def node_keys(self, ids: Sequence[NodeId]) -> dict[NodeId, int]:
        """The key of each stored node among ``ids``."""

    def ids_of_keys(self, keys: Sequence[int]) -> dict[int, NodeId]:
        """The id of each key among ``keys`` that is stored."""

    def iter_links(self) -> Iterator[tuple[int, int | None]]:
        """Every node's key and its parent's key (None for a root), newest first, streamed:
        no payload is read."""

    def verify_nodes(self, progress: Progress | None = None) -> Iterator[str]:
        """Re-hash every node against its id, streaming in slices of rows (bounded memory);
        yield one fault line per node that does not match."""

    def newest_refs(self, prefix: str, limit: int, offset: int = 0) -> list[Ref]:
        """The refs under ``prefix`` that moved last, newest first (ties by name): one page,
        read through an index on move time, not a list of every ref."""

    def reflog_stamp(self) -> ReflogStamp:
        """The reflog's :class:`ReflogStamp`, from an index, not a read of every entry."""

    def reflog_page(self, name: str, limit: int, offset: int = 0) -> tuple[list[ReflogEntry], int]:
        """Moves of ref ``name``, newest first: ``limit`` of them after the newest ``offset``,
        and how many the ref has in all; read through the ref's key, not its whole log."""

    def reflog_times(self, name: str, targets: Sequence[NodeId]) -> dict[NodeId, float]:
        """When ref ``name`` last moved to each of ``targets`` it ever moved to (an index
        lookup per target, not a read of the ref's whole log)."""

    def counts(self, progress: Progress | None = None) -> Counts:
        """Counts and logical bytes from indexes or maintained counters, not from a pass over
        every payload (``progress`` hears of any catching up a maintained counter needs)."""

    def sweep(
        self, dry_run: bool, keep: NodeId | None, progress: Progress | None
    ) -> tuple[list[NodeId], int, int]:
        """:meth:`ObjectStore.collect_garbage`, calling ``progress`` as it goes."""


SearchMode = Literal["words", "phrase", "substring"]


class SearchQuery(msgspec.Struct, frozen=True):
    """What a search asks an engine's text index (see :mod:`sesstree.store.textmatch` for
    what each mode matches): the pattern, how it matches, and filters on the node.

    ``roles``/``types``: only nodes of one of these roles (``node_role``) or event types
    (empty: any); ``since``/``until``: only nodes first recorded in that span (Unix seconds,
    both ends included); a node with no recorded time (written before format 6) is outside
    every span."""

    pattern: str
    mode: SearchMode = "words"
    ignore_case: bool = False
    roles: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None


class IndexHit(msgspec.Struct, frozen=True):
    """One stored node a search found: its id, event type, role, depth, when it was first
    recorded (None: before format 6) and its key (the engine's integer for it, in write
    order: results come newest first, by key, and the next page starts below the last key);
    ``text``, its :func:`~sesstree.store.textmatch.node_text` where the engine has it at
    hand (it tried the match on it), so a page of hits is shown without reading each again."""

    id: NodeId
    type: str
    role: str
    depth: int
    time: float | None
    key: int
    text: str | None = None


class IndexCounts(msgspec.Struct, frozen=True):
    """What the text index holds: its entries (one per distinct node), the text they index
    (UTF-8 bytes of every node's search text), the bytes the index itself takes (0 where
    not measured), and how many nodes are still to be indexed (a catch-up pending)."""

    entries: int
    text_bytes: int
    index_bytes: int
    pending: int = 0


class TextIndex(Protocol):
    """A full-text index over every stored node, one entry per distinct node (never per
    session: a node shared by 200 forks is indexed once), kept by the engine (optional: a
    backend without one is searched by a scan above the seam).

    In step with writes: an entry is written in the transaction that stores its node, or
    caught up by :meth:`search_nodes` before it answers (nodes written by another process,
    by a pull or an import included), so a search never misses a committed node; removing a
    node (gc) removes its entry in the same step. The index holds exactly the tokens of
    :func:`~sesstree.store.textmatch.node_text` (see :mod:`sesstree.store.textmatch`), and
    what :meth:`search_nodes` returns equals a scan of every node with
    :func:`~sesstree.store.textmatch.matches` and the query's filters, in the same order.
    """

    def search_nodes(self, query: SearchQuery, limit: int, before: int | None = None) -> list[IndexHit]:
        """The nodes that match ``query``, newest first (by key), at most ``limit``, only
        those whose key is below ``before`` (the last key of the previous page). Fewer than
        ``limit``: there are no more.

        Raises:
            SearchQueryError: a pattern :func:`~sesstree.store.textmatch.check_query` refuses.
        """

    def index_faults(self, progress: Progress | None = None) -> list[str]:
        """One line per fault of the index (fsck): a stored node with no entry or with an
        entry that is not its text's, an entry for no stored node. Finishes a pending
        catch-up first (a node not yet indexed is not a fault)."""

    def rebuild_index(self, progress: Progress | None = None) -> IndexCounts:
        """Build the index again from the nodes (it is derived): what a damaged index is
        restored with. Resumable where the engine builds it in steps."""

    def index_counts(self) -> IndexCounts:
        """The index's :class:`IndexCounts`, without reading every node."""


class RefsReaching(msgspec.Struct, frozen=True):
    """The refs that reach one node (their target is it or below it), each with its target's
    depth, the most recently moved first (ties by name); ``complete`` is False when the walk
    stopped at its bound, and more refs may reach it."""

    refs: list[tuple[Ref, int]]
    complete: bool = True


class Reaching(Protocol):
    """Which refs reach a few nodes, walked down from each node (optional: a backend without
    it gets the generic walk up from every ref in :mod:`sesstree.repo.search`, which reads
    the whole store)."""

    def refs_reaching(self, ids: Sequence[NodeId], prefix: str, bound: int) -> dict[NodeId, RefsReaching]:
        """For each stored node among ``ids``, the refs under ``prefix`` that reach it,
        reading at most ``bound`` nodes below it (its descendants)."""


class ReachingSearch(Protocol):
    """A search that keeps only the hits some ref reaches (optional: a backend without it
    gets :meth:`TextIndex.search_nodes` and :meth:`Reaching.refs_reaching` page by page,
    which read and try every hit no ref reaches before leaving it out)."""

    def search_reaching(self, query: SearchQuery, limit: int, before: int | None, prefix: str,
                        bound: int) -> list[tuple[IndexHit, RefsReaching]]:
        """What :meth:`TextIndex.search_nodes` answers, leaving out every hit no ref under
        ``prefix`` reaches (``refs_reaching`` with ``bound`` finds none), each with its refs;
        the hits kept are the same, in the same order, with the same keys."""


class Backend(ObjectStore, RefStore, Protocol):
    """A storage engine: an object store and a ref store that one transaction can span, so an
    append (a node and its ref's move) is atomic. The conformance suite in
    :mod:`sesstree.testing.conformance` checks every promise."""

    def commit(self, nodes: Sequence[RawNode], updates: Sequence[RefUpdate]) -> None:
        """Atomically store ``nodes`` (idempotent) and apply every ref update with its reflog.

        A node's parent must be stored already or come earlier in ``nodes``. If any update's
        ``old`` differs from the ref's current target, raise ConflictError and write nothing.
        An update with ``fold`` rewrites the ref's newest reflog entry instead of adding one
        (if the ref has no entry, one is added). Inside :meth:`batch`, the work joins the
        batch and is durable when the batch ends.
        """

    def batch(self) -> AbstractContextManager[None]:
        """Group commits: one transaction, acknowledged (and durable) when the block exits.
        Nothing else: every commit in it is logged as it says (``fold`` or not)."""

    def snapshot(self) -> AbstractContextManager[None]:
        """Read everything inside the block from one consistent state of the store (one read
        transaction): what other writers commit meanwhile is not seen. Writes nothing."""

    def check(self) -> list[str]:
        """Backend-level faults (storage integrity, derived indexes, payload hashes)."""

    def close(self) -> None:
        """Release files and locks."""


def describe(value: Any) -> str:
    """A short human form of an id or None, for messages."""
    return "nothing" if value is None else str(value)[:12]
