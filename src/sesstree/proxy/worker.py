"""The proxy's recorder thread: recordings taken in turns, so that a long one cannot hold up
the others.

A recording is a job made of steps (a generator: each ``yield`` ends a step). The thread runs
one step of the job at the front of the queue, then puts the job at the back if it has more:
a call whose reply took a megabyte is parsed a megabyte per turn, and the short calls that
came after it are recorded between two of its turns instead of after all of them. Every job
runs on this one thread (the store is used from one thread only), in the order it came,
turn by turn.

When the proxy stops, :meth:`RecordWorker.close` takes no more jobs, gives the ones queued a
bounded time to finish, and hands back those that did not, for the proxy to report.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["Job", "RecordWorker", "ctrl_c_sets"]

T = TypeVar("T")


class Job:
    """One recording: its steps, and what to say if the proxy stops before they end."""

    __slots__ = ("abandon", "steps")

    def __init__(self, steps: Iterator[None], abandon: Callable[[bool], None]) -> None:
        self.steps = steps
        #: Called with True if the job was cut in the middle of a step (it may have been
        #: written), False if it was still waiting for its turn.
        self.abandon = abandon


def _nothing(started: bool) -> None:
    pass


@contextmanager
def ctrl_c_sets(event: threading.Event) -> Iterator[None]:
    """A Ctrl-C sets ``event`` in the block, on the main thread (elsewhere no signal
    arrives, and nothing changes). A server stopping for a first Ctrl-C (uvicorn) takes the
    next ones with a handler that only sets a flag of its own, which a wait inside its
    shutdown never looks at: the user's "give up" waited out the whole bound."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda sig, frame: event.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)


class RecordWorker:
    """One thread running :class:`Job` steps in turns."""

    def __init__(self, name: str) -> None:
        self._jobs: deque[Job] = deque()
        self._busy: Job | None = None  # the job whose step is running
        self._cond = threading.Condition()
        self._closed = False  # no more jobs taken
        self._stopped = False  # the thread ends after the step it is running
        # A daemon: a store that hangs must not keep a stopped proxy alive (close() bounds
        # the wait, and reports what it gave up on).
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job`` behind those already waiting.

        Raises:
            RuntimeError: the worker was closed.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError("the recorder is stopping")
            self._jobs.append(job)
            self._cond.notify_all()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the thread, in its turn, and return what it returns (or raise what
        it raised)."""
        future: Future[T] = Future()

        def steps() -> Iterator[None]:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
            return
            yield  # a generator of one step

        self.submit(Job(steps(), _nothing))
        return future.result()

    def pending(self) -> int:
        """Jobs queued or running."""
        with self._cond:
            return len(self._jobs) + (self._busy is not None)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far has ended; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and self._busy is None, timeout)

    def close(self, timeout: float, give_up: threading.Event | None = None
              ) -> tuple[list[Job], Job | None]:
        """Take no more jobs, and let the queued ones run for up to ``timeout`` seconds, or
        until ``give_up`` is set (see :func:`ctrl_c_sets`).

        Returns the jobs that had not ended by then (their steps will not run), and the one
        whose step was still running, if any (it may end yet, or not). A Ctrl-C while it
        waits ends the wait at once.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        try:
            # In slices: a signal handler that sets give_up cannot wake a condition.
            while not (give_up is not None and give_up.is_set()):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.wait_idle(min(remaining, 0.1)):
                    break
        except KeyboardInterrupt:
            pass  # asked to stop now: what is left is reported
        with self._cond:
            self._stopped = True
            left, busy = list(self._jobs), self._busy
            self._jobs.clear()
            self._cond.notify_all()
        return left, busy

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                cond.wait_for(lambda: self._jobs or self._stopped or self._closed)
                if self._stopped or not self._jobs:
                    return  # stopped, or closed with nothing left to do
                job = self._jobs.popleft()
                self._busy = job
            try:
                next(job.steps)
                more = True
            except StopIteration:
                more = False
            except Exception:  # a job reports its own failures; one that did not is dropped
                more = False
            with cond:
                self._busy = None
                if more and not self._stopped:
                    self._jobs.append(job)
                cond.notify_all()
