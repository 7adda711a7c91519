"""Every error sesstree raises, in one flat hierarchy.

::

    SesstreeError
    ├── StoreError
    │   ├── StoreNotFoundError      no store at the path, or none found upwards
    │   ├── StoreCorruptError       the store file is damaged or not a store
    │   │   └── WalDamagedError     its write-ahead log is damaged: kept, and reported until accepted
    │   ├── StoreLockedError        another process holds the write lock too long
    │   ├── StoreFormatError        written by a newer sesstree
    │   ├── StoreReadOnlyError      a write to a store on read-only media (reads still work)
    │   ├── ReadViewWriteError      a write inside a read view (``store.snapshot()``)
    │   └── StoreFullError          the disk holding the store is full (nothing was lost)
    ├── RevisionError
    │   ├── UnknownRevisionError    no ref, tag or node matches
    │   └── AmbiguousPrefixError    an id prefix matches several nodes
    ├── InvalidRefNameError         a name that cannot be a ref (``../x``, ``-x``, empty)
    ├── RefExistsError              creating a ref that already exists
    ├── ConflictError               compare-and-set lost: the ref moved under the writer
    ├── MissingNodeError            a node's parent, or a ref's target, is not stored
    ├── InvalidEventError           an unknown event type or data that is not JSON
    ├── InputError                  a malformed input file (names file and line)
    ├── SearchQueryError            a search pattern that cannot be searched (empty, too long)
    ├── RemoteError                 a remote cannot be reached, refuses, or answers garbage
    │   └── PushRejectedError       the remote refused to move some refs (non-fast-forward, ...)
    └── AgentError
        ├── ProviderError           the model endpoint failed or answered garbage
        │   └── IncompleteReplyError  the reply stopped part-way (a cut or stalled stream)
        └── MaxTurnsExceeded        the loop ran out of turns without an answer

A CLI user sees the message of any of these as one line; none of them is a bug in sesstree.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "AmbiguousPrefixError",
    "ConflictError",
    "IncompleteReplyError",
    "InputError",
    "InvalidEventError",
    "InvalidRefNameError",
    "MaxTurnsExceeded",
    "MissingNodeError",
    "ProviderError",
    "PushRejectedError",
    "ReadViewWriteError",
    "RefExistsError",
    "RemoteError",
    "RevisionError",
    "SearchQueryError",
    "SesstreeError",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "UnknownRevisionError",
    "WalDamagedError",
]


class SesstreeError(Exception):
    """Base of every error sesstree raises on purpose."""


class StoreError(SesstreeError):
    """The store itself cannot be used."""


class StoreNotFoundError(StoreError):
    """No store at the given path, or none found in this folder or its parents."""


class StoreCorruptError(StoreError):
    """The store file is damaged or is not a sesstree store. Nothing was written to it."""


class WalDamagedError(StoreCorruptError):
    """The store's write-ahead log is damaged: commits after the damage would be dropped at
    this open. The log was kept beside the store and every open raises this until the loss is
    accepted (``sess fsck --accept-wal-loss``); nothing was changed."""


class StoreLockedError(StoreError):
    """Another process held the store's write lock for longer than the timeout."""


class StoreFormatError(StoreError):
    """The store was written by a newer sesstree whose format this one does not know."""


class StoreReadOnlyError(StoreError):
    """A write to a store that cannot be written (read-only media or files). Reads work."""


class ReadViewWriteError(StoreError):
    """A write (an append, a ref or HEAD moved, a tag, metadata, gc) inside a read view,
    ``with store.snapshot():``. The view only reads: nothing was changed; write after the
    block."""


class StoreFullError(StoreError):
    """The disk holding the store is full. The write was rolled back and nothing stored was
    lost; once there is space again, the store works as before."""


class RevisionError(SesstreeError):
    """A revision (ref name, ``REF~N``, id prefix) could not be resolved to one node."""


class UnknownRevisionError(RevisionError):
    """No session, tag or node matches the revision."""


class AmbiguousPrefixError(RevisionError):
    """An id prefix matches more than one node."""


class InvalidRefNameError(SesstreeError):
    """A name that cannot be used for a session or tag."""


class RefExistsError(SesstreeError):
    """A session or tag of that name already exists."""


class ConflictError(SesstreeError):
    """A compare-and-set lost: the ref no longer points where the writer expected.

    Nothing was written. Call :meth:`sesstree.Session.refresh` to see the new head, then
    append again, or append with ``rebase=True`` to put the event on whatever the head is now.
    """


class MissingNodeError(SesstreeError):
    """A node whose parent is not stored, or a ref moved to a node that is not stored.

    Nothing was written. Unlike :class:`ConflictError`, retrying does not help: store the
    parent (or the target) first, or in the same write before its children.
    """


class InvalidEventError(SesstreeError):
    """An event type that is not registered, or data that is not a JSON value; also text that
    no store can hold in a session's metadata, a reflog reason or an import's origin (see
    :mod:`sesstree.store.storable`). Nothing was written."""


class InputError(SesstreeError):
    """A malformed input file. The message names the file and the line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class SearchQueryError(SesstreeError):
    """A search pattern that cannot be searched: empty, too long, or (for a words search)
    with no word in it. The message says which, and what to search instead."""


class RemoteError(SesstreeError):
    """Another store could not be synced with: unknown remote, bad URL, server down, a token
    missing or refused, or a peer that sent something that does not verify. Nothing that was
    stored before is lost, and no ref moved because of the failed step."""


class PushRejectedError(RemoteError):
    """The remote refused to move some refs: ``results`` says which, and why (the others,
    if any, were pushed)."""

    def __init__(self, message: str, results: list[object] | None = None) -> None:
        super().__init__(message)
        self.results = results or []


class AgentError(SesstreeError):
    """The agent loop could not finish a turn."""


class ProviderError(AgentError):
    """The model endpoint failed, after retries, or answered with something unusable."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class IncompleteReplyError(ProviderError):
    """A reply that stopped before it was complete, on every attempt the retries allowed.

    A stream that ended with no ``finish_reason``, no ``[DONE]`` and no error (a proxy or the
    server cut it, after any number of chunks, none included), or broke off or stalled past
    the read timeout after part of the reply came. Each cut attempt is recorded as a step
    marked ``incomplete`` with the chunks it received as ``assistant/chunk`` events; the turn
    ends with reason ``incomplete``.
    """


class MaxTurnsExceeded(AgentError):
    """The loop used all its turns without a final answer. The turn is recorded as ended."""
