"""Child process for the pack crash tests: one job against a format-5 store, until killed.

Usage: ``pack_crash_child.py JOB STORE [SESSION]``

- ``write STORE SESSION``: append :func:`message` ``i`` one at a time (inline packing runs
  after every 256th), printing ``ACK i`` (flushed) once the append has returned. The first
  index follows what the session holds, so a restarted child resumes.
- ``repack STORE``: ``backend.repack()`` of the whole store, then ``DONE``.
- ``gc STORE``: gc (``sesstree.repo.maintenance.gc``, what ``store.gc()`` runs, printing
  ``CHUNK`` after each of its delete transactions), then ``DONE``.

Every job prints ``START`` when the store is open, ``PACKING`` as it starts a pack's
transaction (packing.py's ``Packer._pack_run``) and ``PACKED`` once that committed, and
``TRIM`` as gc starts rebuilding packs (``trim_packs``), so that a test can kill it while
it packs, not only at a random moment.
"""

from __future__ import annotations

import sys
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


def announce() -> None:
    """Print a line as each pack starts and once it committed, and as gc starts rebuilding
    packs."""
    run, trim = packing.Packer._pack_run, packing.trim_packs

    def pack_run(self: packing.Packer, *args: Any) -> int:
        print("PACKING", flush=True)
        made = run(self, *args)
        print("PACKED", flush=True)
        return made

    def trim_packs(*args: Any) -> int:
        print("TRIM", flush=True)
        return trim(*args)

    packing.Packer._pack_run = pack_run  # type: ignore[method-assign]
    packing.trim_packs = trim_packs


def main() -> int:
    job, path, *rest = sys.argv[1:]
    announce()
    with open_store(path, create=job == "write") as store:
        print("START", flush=True)
        if job == "write":
            session = store.session(rest[0])
            i = len(session.messages())
            while True:
                session.add_message(message(i))
                print(f"ACK {i}", flush=True)
                i += 1
        elif job == "repack":
            store.backend.repack()
        elif job == "gc":
            gc(store, progress=lambda done, total: print("CHUNK", flush=True))
        else:
            raise SystemExit(f"unknown job {job}")
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
