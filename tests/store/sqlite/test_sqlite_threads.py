"""The SQLite engine's background threads block SIGINT and SIGTERM, so a Ctrl-C always reaches
the main thread: one that landed on the idle checkpointer left ``sess run`` waiting on its model
(and ``sess serve`` on its socket) until that wait ended by itself."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from sesstree import open_store
from sesstree.store.sqlite.threads import MAIN_THREAD_SIGNALS, start_daemon


def _blocked(thread: threading.Thread) -> set[int]:
    """The signals ``thread`` blocks, read from the kernel's view of it."""
    for line in Path(f"/proc/self/task/{thread.native_id}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    raise AssertionError("no SigBlk line")


def test_the_checkpointer_of_a_store_being_written_blocks_ctrl_c(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        session = store.session("main")
        session.add_message({"role": "user", "content": "hello"})
        deadline = time.monotonic() + 10
        ours = []
        while not ours and time.monotonic() < deadline:
            ours = [t for t in threading.enumerate() if t.name == "sesstree-checkpoint"]
            time.sleep(0.01)
        assert ours, "the idle checkpointer did not start"
        for thread in ours:
            assert {int(s) for s in MAIN_THREAD_SIGNALS} <= _blocked(thread), thread.name
    assert {int(s) for s in MAIN_THREAD_SIGNALS}.isdisjoint(_blocked(threading.main_thread()))


def test_a_plain_thread_would_take_ctrl_c_and_start_daemon_does_not() -> None:
    """The check above can fail: a thread started the plain way blocks nothing."""
    release = threading.Event()
    plain = threading.Thread(target=release.wait, daemon=True)
    plain.start()
    quiet = start_daemon(release.wait, "sesstree-test")
    try:
        assert signal.SIGINT not in _blocked(plain)
        assert signal.SIGINT in _blocked(quiet) and signal.SIGTERM in _blocked(quiet)
    finally:
        release.set()
        plain.join(5)
        quiet.join(5)
