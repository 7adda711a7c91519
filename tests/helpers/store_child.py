"""Child process for the store fault tests: one small job against a store, then exit.

Usage: ``store_child.py JOB STORE [ARGS...]``

Children started with ``STORE_CHILD_GATE=PATH`` print ``READY`` and wait for PATH to exist.

- ``create STORE NAME``: open (creating) the store, append one message to session NAME,
  print ``OK``.
- ``rename STORE``: rename session ``a`` to ``b`` (or ``b`` to ``a``) and back, forever,
  printing ``ACK`` after each.
- ``gc STORE``: run gc in a loop forever, printing ``GC`` after each.
- ``tight STORE``: forever commit tiny write transactions back to back (``GC`` now and then).
- ``hold STORE``: forever hold the write lock 5 ms at a time, letting go only briefly.
- ``churn STORE``: forever write two nodes nothing names, then gc them away (``GC``).
- ``write STORE NAME COUNT``: append COUNT messages to session NAME, ``ACK i`` after each,
  with a short timeout, so a starved writer fails loudly instead of waiting.
"""

from __future__ import annotations

import itertools
import os
import sys
import time

from sesstree import make_node, open_store


def main() -> int:
    job, store_path, *rest = sys.argv[1:]
    gate = os.environ.get("STORE_CHILD_GATE")
    if gate:  # start together with the other children: wait for the gate file
        print("READY", flush=True)
        while not os.path.exists(gate):
            time.sleep(0.0005)
    if job == "create":
        with open_store(store_path) as store:
            store.session(rest[0]).add_message({"role": "user", "content": rest[0]})
        print("OK", flush=True)
    elif job == "rename":
        with open_store(store_path) as store:
            name, other = ("a", "b") if store.has_session("a") else ("b", "a")
            while True:
                store.rename_session(name, other)
                print("ACK", flush=True)
                name, other = other, name
    elif job == "gc":
        with open_store(store_path) as store:
            while True:
                store.gc()
                print("GC", flush=True)
    elif job == "tight":
        with open_store(store_path) as store:
            for i in itertools.count():
                # Short write transactions back to back, with no pause between them.
                with store.batch():
                    store.backend.set_head(f"ref: sessions/hammer-{i}")
                if i % 500 == 0:
                    print("GC", flush=True)
    elif job == "hold":
        with open_store(store_path) as store:
            for i in itertools.count():
                # The write lock held almost all the time: 5 ms in, a moment out.
                with store.batch():
                    store.backend.set_head(f"ref: sessions/hammer-{i}")
                    time.sleep(0.005)
                if i % 20 == 0:
                    print("GC", flush=True)
    elif job == "churn":
        with open_store(store_path) as store:
            for i in itertools.count():
                # An aborted import (nodes nothing names), then gc removes it again.
                root = make_node(None, "user/message", {"role": "user", "content": f"junk {i}"})
                store.write([root, make_node(root.id, "user/message", {"role": "user",
                                                                       "content": "more"})])
                store.gc()
                print("GC", flush=True)
    elif job == "write":
        timeout = float(rest[2]) if len(rest) > 2 else 2.0
        with open_store(store_path, timeout=timeout) as store:
            session = store.session(rest[0])
            for i in range(int(rest[1])):
                session.add_message({"role": "user", "content": f"{rest[0]}:{i}"})
                print(f"ACK {i}", flush=True)
    else:
        raise SystemExit(f"unknown job {job}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
