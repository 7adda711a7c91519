"""The SQLite engine's background threads (the idle checkpointer, the write-lock waiter, the
release of a full disk's connection), started so that they never take the process's signals.

Linux hands a signal sent to the process to any thread that does not block it. A Ctrl-C that
lands on one of these threads leaves the main thread asleep in whatever it waits for (a reply
from a model, a socket of ``sess serve``) until that wait ends by itself, so ``sess run`` and
``sess serve`` would ignore Ctrl-C for as long. Blocking SIGINT and SIGTERM here sends them to
the main thread, where Python raises KeyboardInterrupt.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ["MAIN_THREAD_SIGNALS", "start_daemon"]

#: The signals that must reach the main thread.
MAIN_THREAD_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def start_daemon(target: Callable[..., object], name: str, *args: object) -> threading.Thread:
    """Start ``target(*args)`` in a daemon thread named ``name`` that blocks the signals of
    :data:`MAIN_THREAD_SIGNALS`, and return the thread."""

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        target(*args)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
