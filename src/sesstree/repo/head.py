"""Where HEAD is kept: in the store for a local one, on this machine for a shared one.

HEAD is a checkout's notion, as git keeps it in ``.git/HEAD``. A local store is one checkout:
its HEAD lives in the store (in the store folder's file), and moves in the same transaction as
the refs it follows. A shared store on a server (PostgreSQL) has many users at once, and one
user's ``sess checkout`` must not move everyone's HEAD: there HEAD is a small file of this
user on this machine, one per store URL, under ``$SESS_HOME`` (default
``$XDG_STATE_HOME/sesstree``, else ``~/.local/state/sesstree``), private (0600).

Its value is ``ref: sessions/NAME`` or a node id (detached), as in git.

A file on this machine and a transaction on a server cannot change together. When HEAD must
follow a ref the store moves (a rename or a delete of HEAD's session), the store moves first
and HEAD after it commits, and a note written before the store's transaction (a
:class:`HeadMove`, beside the HEAD file) says where HEAD is going: a process killed between
the two leaves HEAD on a session that is gone, and the next read of HEAD finds the note, sees
in the store's reflog that the move committed, and finishes it (:func:`settle`). So after a
kill at any point, HEAD names the session as it was before the command or as it is after.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import msgspec
from blake3 import blake3

from ..errors import StoreError
from ..node import NodeId, parse_symbolic, session_ref, short_name, symbolic
from ..store.base import Backend
from .files import unwritable, write_private
from .scan import reflog_page

__all__ = ["Checkout", "FileHead", "HeadKeeper", "HeadMove", "MetaHead", "head_file_for",
           "moved_to", "settle"]


class HeadMove(msgspec.Struct, frozen=True):
    """Where HEAD goes once a store's move of the ref it names commits.

    ``before``: HEAD's raw value when the move began (``ref: sessions/OLD``); ``ref``: the ref
    whose reflog shows the move committed (a rename's new name, a deleted session's own);
    ``reason``: that reflog entry's reason; ``since``: how many entries that reflog had when
    the move was noted. A rename's entry comes after them: an older entry with the same
    reason (the same rename, done and undone long ago) is not this move, which may never
    have committed. (A deletion is proved by being the ref's newest entry.) ``node``: where
    the session was when the move was noted, what a deletion leaves HEAD on if its entry was
    folded into its batch's (whose ``old`` is where the batch began). A note without
    ``since`` or ``node``, from an older sesstree, reads as 0 and None.
    """

    before: str
    ref: str
    reason: str
    since: int = 0
    node: str | None = None


class HeadKeeper(Protocol):
    """Reads and writes the raw HEAD value (None: never set)."""

    #: True if HEAD moves in the store's own transactions (so with the refs it follows).
    in_store: bool

    def get(self) -> str | None:
        """The raw value, or None."""

    def set(self, value: str) -> None:
        """Write the raw value (and forget any :class:`HeadMove` noted)."""

    def intend(self, move: HeadMove) -> None:
        """Note, before the store's transaction, where HEAD goes if it commits."""

    def intent(self) -> HeadMove | None:
        """The move noted and not finished, or None."""


class MetaHead:
    """HEAD in the store itself: a local store is one checkout."""

    in_store = True

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def get(self) -> str | None:
        """The raw value, or None."""
        return self._backend.get_head()

    def set(self, value: str) -> None:
        """Write the raw value (inside the store's transaction, if one is open)."""
        self._backend.set_head(value)

    def intend(self, move: HeadMove) -> None:
        """Nothing to note: this HEAD moves in the same transaction as the ref."""

    def intent(self) -> HeadMove | None:
        """None: this HEAD is never left behind."""
        return None


class FileHead:
    """HEAD of this user's checkout of a shared store: a file on this machine."""

    in_store = False

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Where a :class:`HeadMove` under way is noted.
        self.intent_path = path.with_name(path.name + ".moving")

    def get(self) -> str | None:
        """The raw value, or None."""
        try:
            return self.path.read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read HEAD at {self.path}: {exc.strerror}") from None
        except UnicodeDecodeError:  # damaged: sesstree writes it as UTF-8 text only
            raise StoreError(f"cannot read HEAD at {self.path}: it is not UTF-8 text, so not "
                             "a HEAD sesstree wrote (remove it: HEAD is then session main)"
                             ) from None

    def set(self, value: str) -> None:
        """Write the raw value, atomically (a temporary file renamed over the old one), then
        forget the move noted, which this write finishes or overrides."""
        try:
            write_private(self.path, (value + "\n").encode())
        except OSError as exc:
            raise unwritable("HEAD", self.path, exc) from None
        self.forget_intent()

    def intend(self, move: HeadMove) -> None:
        """Note ``move`` beside HEAD (atomically), before the store's transaction."""
        try:
            write_private(self.intent_path, msgspec.json.encode(move) + b"\n")
        except OSError as exc:
            raise unwritable("the note beside HEAD", self.intent_path, exc) from None

    def intent(self) -> HeadMove | None:
        """The move noted, or None (none, or a note that cannot be read: HEAD then stays)."""
        try:
            return msgspec.json.decode(self.intent_path.read_bytes(), type=HeadMove)
        except (OSError, msgspec.DecodeError):
            return None

    def forget_intent(self) -> None:
        """Drop a note that no longer applies (HEAD moved elsewhere since)."""
        try:
            self.intent_path.unlink(missing_ok=True)
        except OSError:
            # Read-only, or something else in its place (a folder): a note left is harmless,
            # as settle() checks it against HEAD and the reflog each time.
            pass


def settle(keeper: HeadKeeper, backend: Backend, raw: str) -> str | None:
    """HEAD's value once the move noted beside it is found committed, or None.

    Called when HEAD (``raw``) names a session that does not exist. If a move noted before a
    store's transaction started from this very HEAD, and the reflog of its ``ref`` shows the
    move (the rename into it; the deletion as the ref's newest entry), HEAD is written where
    the move sends it and that value returned. A move not committed (killed before, or still
    under way in another process) leaves HEAD as it is.
    """
    move = keeper.intent()
    if move is None:
        return None
    if move.before != raw:
        if isinstance(keeper, FileHead):
            keeper.forget_intent()  # HEAD moved on since: the note is stale
        return None
    value = moved_to(backend, move)
    if value is None:
        return None
    try:
        keeper.set(value)
    except StoreError:
        pass  # cannot write HEAD here: this read still sees where it went
    return value


def moved_to(backend: Backend, move: HeadMove) -> str | None:
    """Where HEAD goes if the store's reflog shows ``move`` committed (the rename into its
    ``ref`` logged since the note; the deletion as the ref's newest entry), else None."""
    entries = backend.reflog(move.ref)
    value: str | None = None
    for i in range(len(entries) - 1, -1, -1):
        entry = entries[i]
        if entry.reason == move.reason or entry.reason.startswith(move.reason + " ("):
            if entry.new is not None:
                # The rename into ref, if logged since the note: an older one is the same
                # rename done long ago. (An expiry only shortens the log, so this never
                # reaches back past the note; a rename's entry is its own, never folded.)
                if i >= move.since:
                    value = symbolic(move.ref)
            elif i == len(entries) - 1 and entry.old is not None:
                # The deletion, not undone since: detached where it was. Folded into the
                # entry its batch's appends began (older than the note, perhaps), the entry's
                # old is where the batch began; the batch held the session from its first
                # move, so where the note saw it is where it was deleted.
                value = move.node if entry.started is not None and move.node else entry.old
            break
    return value


class Checkout:
    """HEAD as one store moves it: kept by ``keeper``; when that is outside the store, a value
    set inside a batch waits (per thread, as batches are) until the batch commits.

    ``batch_depth`` says how many batches the calling thread has open.
    """

    def __init__(self, keeper: HeadKeeper, backend: Backend,
                 batch_depth: Callable[[], int]) -> None:
        self.keeper = keeper
        self._backend = backend
        self._batch_depth = batch_depth
        self._pending = threading.local()

    def _waiting(self) -> str | None:
        value: str | None = getattr(self._pending, "value", None)
        return value

    def raw(self) -> str:
        """HEAD's raw value as this thread sees it (a value waiting for its batch included)."""
        return self._waiting() or self.keeper.get() or symbolic(session_ref("main"))

    def set(self, value: str) -> None:
        """Move HEAD: in the store's transaction when it is kept there; when it is kept
        outside, at once, or (inside a batch) once the batch commits."""
        if not self.keeper.in_store and self._batch_depth():
            if self._waiting() is None:
                # What the file said when this batch first moved HEAD: if another process
                # of this user (another terminal) moves it before the batch commits, that
                # newer move is kept (see batch_ended).
                self._pending.seen = self.keeper.get()
            self._pending.value = value
        else:
            self.keeper.set(value)

    def follow(self, name: str, value: str) -> None:
        """Inside the transaction that renames or deletes session ``name``: HEAD, if it names
        that session, goes to ``value`` (with the transaction, or once it commits)."""
        if self.raw() == symbolic(session_ref(name)):
            self.set(value)

    @contextmanager
    def moving(self, name: str, ref: str, reason: str) -> Iterator[None]:
        """Around the batch that renames or deletes session ``name``: on a HEAD kept outside
        the store that names it, note the move first (:meth:`note_move`); if the batch fails,
        put back the note this one replaced (another terminal's move, which may have
        committed and died before writing HEAD: its note is what finishes it), or none. A
        failure once the move committed (HEAD could not be written) keeps this note."""
        replaced = self.note_move(name, ref, reason)
        try:
            yield
        except BaseException:
            if replaced is not None and isinstance(self.keeper, FileHead):
                ours, before = replaced
                # (Another move noted since is theirs to keep; a committed one is ours.)
                if self.keeper.intent() == ours and moved_to(self._backend, ours) is None:
                    if before is not None:
                        self.keeper.intend(before)
                    else:
                        self.keeper.forget_intent()
            raise

    def note_move(self, name: str, ref: str, reason: str
                  ) -> tuple[HeadMove, HeadMove | None] | None:
        """Before the batch that renames or deletes session ``name``, on a HEAD kept outside
        the store that names it: note the move (:class:`HeadMove`) for :func:`settle`.
        Returns the note written and the one it replaced (None: none written)."""
        raw = symbolic(session_ref(name))
        if self.keeper.in_store or self.raw() != raw:
            return None
        tip = self._backend.get_ref(session_ref(name))
        if tip is None:
            # Gone already, so this move will fail; HEAD may be left on it by a move killed
            # after its commit (a retry of that very command, often): finish that move by
            # its note rather than replace the note.
            self.settle(raw)
            return None
        since = reflog_page(self._backend, ref, 0)[1]  # a count, not a read of the log
        move, before = HeadMove(raw, ref, reason, since, tip.target), self.keeper.intent()
        self.keeper.intend(move)
        return move, before

    def batch_ended(self, committed: bool) -> None:
        """The outermost batch committed (HEAD waiting for it is written now, unless another
        process moved HEAD meanwhile: its move is the newer), or rolled back (HEAD stays
        where it was)."""
        pending, self._pending.value = self._waiting(), None
        if committed and pending is not None and self.keeper.get() == self._pending.seen:
            self.keeper.set(pending)

    def current(self, session_head: Callable[[str], NodeId | None]
                ) -> tuple[str | None, NodeId | None]:
        """``(session name, node)`` of HEAD, as :meth:`Store.head` returns it; ``session_head``
        says where a session points."""
        raw = self.raw()
        if (followed := parse_symbolic(raw)) is not None:
            name = short_name(followed)
            node = session_head(name)
            # A session that is gone: a rename or delete this HEAD was following may have
            # committed in a process killed before it could move HEAD (see settle).
            settled = self.settle(raw) if node is None else None
            if settled is None:
                return name, node
            raw = settled
            if (followed := parse_symbolic(raw)) is not None:
                name = short_name(followed)
                return name, session_head(name)
        return None, NodeId(raw)

    def settle(self, raw: str) -> str | None:
        """For a HEAD ``raw`` naming a session that is gone: where a move noted for it went
        (see :func:`settle`), or None. Never inside a batch: its moves are not committed."""
        if self.keeper.in_store or self._batch_depth():
            return None
        return settle(self.keeper, self._backend, raw)


def head_file_for(url: str) -> Path:
    """The file that keeps this user's HEAD of the store at ``url`` (its password left out
    of the key, so a changed password keeps the same HEAD)."""
    from ..store.urls import redact_url

    home = os.environ.get("SESS_HOME")
    if home:
        base = Path(home)
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(state) / "sesstree"
    key = blake3(redact_url(url).encode()).hexdigest()[:24]
    return base / "heads" / key
