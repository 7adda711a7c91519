"""Child process for the pack crash tests: one job against a format-5 store, until killed.

Usage: ``pack_crash_child.py JOB STORE [SESSION]``

- ``write STORE SESSION``: append :func:`message` ``i`` one at a time (inline packing runs
  after every 256th), printing ``ACK i`` (flushed) once the append has returned. The first
  index follows what the session holds, so a restarted child resumes.
- ``repack STORE``: ``backend.repack()`` of the whole store, then ``DONE``.
- ``gc STORE``: gc (``sesstree.repo.maintenance.gc``, what ``store.gc()`` runs, printing
  ``CHUNK`` after each of its delete transactions), then ``DONE``.

Every job prints ``START`` when the store is open, ``PACKING`` as it starts a pack's
transaction (packing.py's ``Packer._commit``, in the background thread of a writer) and
``PACKED`` once that committed, and
``TRIM`` as gc starts rebuilding packs (``trim_packs``), so that a test can kill it while
it packs, not only at a random moment.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from sesstree import open_store
from sesstree.repo.maintenance import gc
from sesstree.store.packs import INLINE_MAX
from sesstree.store.sqlite import packing

WORDS = "read the file then run the tests and fix the error in store session".split()


def message(i: int) -> dict[str, Any]:
    """Message ``i`` of a writer: its content starts ``m:i``; every 300th is over INLINE_MAX
    (a payload a pack keeps apart)."""
    text = f"m:{i} " + " ".join(WORDS[(i * k + k) % len(WORDS)] for k in range(i % 37))
    if i % 300 == 150:
        text += " " + "".join(WORDS[(i + k) % len(WORDS)] for k in range(INLINE_MAX // 4))
    return {"role": "user" if i % 2 else "assistant", "content": text}


_said = threading.Lock()


def say(line: str) -> None:
    """Print ``line`` whole (the background thread prints too), flushed."""
    with _said:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def announce() -> None:
    """Print a line as each pack's transaction starts and once it committed, and as gc starts
    rebuilding packs."""
    run, trim = packing.Packer._commit, packing.trim_packs

    def commit(self: packing.Packer, *args: Any) -> int:
        say("PACKING")
        made = run(self, *args)
        say("PACKED")
        return made

    def trim_packs(*args: Any) -> int:
        say("TRIM")
        return trim(*args)

    packing.Packer._commit = commit  # type: ignore[method-assign]
    packing.trim_packs = trim_packs


def main() -> int:
    job, path, *rest = sys.argv[1:]
    announce()
    with open_store(path, create=job == "write") as store:
        say("START")
        if job == "write":
            session = store.session(rest[0])
            i = len(session.messages())
            while True:
                session.add_message(message(i))
                say(f"ACK {i}")
                i += 1
        elif job == "repack":
            store.backend.repack()
        elif job == "gc":
            gc(store, progress=lambda done, total: say("CHUNK"))
        else:
            raise SystemExit(f"unknown job {job}")
    say("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
