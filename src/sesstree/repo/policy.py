"""The write policy above the storage seam: batches, and how ref moves are logged.

A backend only runs transactions and compare-and-sets (see :mod:`sesstree.store.base`). What
a user sees of them is decided here, once, for every backend:

- a batch (``store.batch()``) is one backend transaction, and each ref it moves gets one reflog
  entry: its first move adds the entry, its later moves fold into it
  (:attr:`~sesstree.store.base.RefUpdate.fold`), named ``REASON (batch of N moves)``;
- a log group (``session.log_group(reason)``: one agent turn) commits every move on its own,
  as it happens, and still logs the session's moves in it as one entry, named ``reason``
  (``reason (N moves)`` once it has several);
- outside both, a session handle's run of plain appends is logged the same way, as if the
  handle had a log group of its own: its first append adds an entry (``append: TYPE``), each
  later one that continues the session from where the handle's last append put it folds into
  it (``append (N moves)``). Any other move of the handle (a reset, one in a batch or in a log
  group) ends the run, and so does another writer's move (the handle's next append then starts
  from a head its run did not make). Every append is still committed on its own;
- if a batch rolls back, the session handles it moved forget what it wrote.

A move folds only onto the move it continues: the ref must be where this batch, group or
run last put it. So a batch rolled back inside a group, or another writer's move in between, starts a
new entry rather than rewriting one that is not ours.

A batch belongs to the thread that opened it (as the backend's transaction does): another
thread's moves meanwhile are logged on their own. A log group belongs to its session handle,
whatever thread writes through it (an async agent's steps run in worker threads).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from ..node import NodeId
from ..store.base import RefUpdate

__all__ = ["Handle", "LogGroup", "WritePolicy"]

#: How a handle's run of plain appends names its entry once it has several moves
#: (``append (N moves)``; an entry of one append keeps that append's own reason).
_APPEND_RUN = "append"


class LogGroup:
    """An open log group of one session handle: its reason and the moves logged so far."""

    __slots__ = ("head", "moves", "reason")

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.moves = 0
        #: Where the group's last move put the session (what a fold must continue from).
        self.head: NodeId | None = None


class Handle(Protocol):
    """What the policy needs of a session handle (a :class:`~sesstree.repo.session.Session`
    is one; this module does not import it, as Session imports this one)."""

    #: The open log group of the handle, or None.
    log_group_open: LogGroup | None
    #: The handle's run of plain appends outside any group or batch (a group of its own, named
    #: by the policy), or None: what the next plain append may fold into.
    append_run: LogGroup | None

    def refresh(self) -> None:
        """Re-read where the session points (after a batch rolled its moves back)."""
        ...


class _Batch:
    """One thread's open batch."""

    __slots__ = ("depth", "moved", "refs")

    def __init__(self) -> None:
        self.depth = 0
        # Session handles moved inside the open batch (a dict: ordered, O(1) membership).
        self.moved: dict[Handle, None] = {}
        # ref -> (moves so far, where the last one put it).
        self.refs: dict[str, tuple[int, NodeId | None]] = {}


class WritePolicy:
    """Batches and reflog folding for one :class:`~sesstree.repo.store.Store` (see the module)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _batch(self) -> _Batch:
        state: _Batch | None = getattr(self._local, "batch", None)
        if state is None:
            state = self._local.batch = _Batch()
        return state

    @contextmanager
    def batch(self) -> Iterator[_Batch]:
        """The policy's side of ``Store.batch``: the caller opens the backend's transaction
        inside; on a rollback it refreshes the handles in ``state.moved``."""
        state = self._batch()
        state.depth += 1
        try:
            yield state
        finally:
            state.depth -= 1
            if state.depth == 0:
                state.moved.clear()
                state.refs.clear()

    def batch_depth(self) -> int:
        """How many batches this thread has open (0: none)."""
        return self._batch().depth

    def update(self, ref: str, old: NodeId | None, new: NodeId | None, reason: str,
               handle: Handle | None, append: bool = False) -> RefUpdate:
        """The compare-and-set that moves ``ref``, logged as the policy says (``append``: a
        plain append of ``handle``, which may fold into the handle's run). Call :meth:`moved`
        once the backend has committed it."""
        group = handle.log_group_open if handle is not None else None
        if group is not None:
            if group.moves and group.head == old:
                return RefUpdate(ref, old, new, f"{group.reason} ({group.moves + 1} moves)",
                                 fold=True)
            return RefUpdate(ref, old, new, group.reason)
        state = self._batch()
        if state.depth:
            count, last = state.refs.get(ref, (0, None))
            if count and last == old:
                return RefUpdate(ref, old, new, f"{reason} (batch of {count + 1} moves)",
                                 fold=True)
            return RefUpdate(ref, old, new, reason)
        run = handle.append_run if handle is not None and append else None
        if run is not None and run.moves and run.head == old and old is not None:
            return RefUpdate(ref, old, new, f"{run.reason} ({run.moves + 1} moves)", fold=True)
        return RefUpdate(ref, old, new, reason)

    def moved(self, update: RefUpdate, handle: Handle | None, append: bool = False) -> None:
        """Note a committed move (see :meth:`update`)."""
        group = handle.log_group_open if handle is not None else None
        if group is not None:
            group.moves = group.moves + 1 if update.fold else 1
            group.head = update.new
        state = self._batch()
        if handle is not None:
            # A plain append outside any group or batch starts or continues the handle's run;
            # any other move of the handle ends it.
            if append and group is None and not state.depth:
                run = handle.append_run
                if update.fold and run is not None:
                    run.moves += 1
                else:
                    run = handle.append_run = LogGroup(_APPEND_RUN)
                    run.moves = 1
                run.head = update.new
            else:
                handle.append_run = None
        if state.depth:
            count, _ = state.refs.get(update.name, (0, None))
            state.refs[update.name] = (count + 1 if update.fold or not count else 1, update.new)
            if handle is not None:
                state.moved[handle] = None
