"""Child process for the crash and concurrency tests: append in a loop, acknowledge each.

Usage: ``append_loop.py STORE SESSION [--durable] [--batch N] [--count N] [--tag TAG]
[--rebase] [--hold SECONDS]``

Prints ``ACK <index>`` (flushed) only after the append that wrote message ``<index>``
returned (with ``--batch``, after the batch holding it committed). Message ``i`` has content
``"<tag>:<i>"``. The first index continues after what the session already holds from this tag,
so a restarted child resumes. Without ``--count`` it loops until killed. ``--retry refresh``
retries a lost compare-and-set after ``session.refresh()``, ``--retry rebase`` with
``append(..., rebase=True)`` in a loop (many writers on one session). ``--hold S`` opens
one batch, appends once, sleeps S seconds inside it, and commits: a long writer.
"""

from __future__ import annotations

import argparse
import sys
import time

from sesstree import ConflictError, StoreLockedError, open_store


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("store")
    p.add_argument("session")
    p.add_argument("--durable", action="store_true")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--count", type=int, default=-1)
    p.add_argument("--tag", default="m")
    p.add_argument("--retry", choices=["none", "refresh", "rebase"], default="none")
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args()
    durability = "durable" if args.durable else "default"
    with open_store(args.store, durability=durability, timeout=args.timeout) as store:
        session = store.session(args.session)
        prefix = args.tag + ":"
        start = sum(1 for m in session.messages() if str(m.get("content", "")).startswith(prefix))
        if args.hold:
            with store.batch():
                session.add_message({"role": "user", "content": f"{prefix}{start}"})
                print("HOLDING", flush=True)
                time.sleep(args.hold)
            print(f"ACK {start}", flush=True)
            return 0
        i = start
        while args.count < 0 or i < start + args.count:
            if args.batch:
                n = args.batch if args.count < 0 else min(args.batch, start + args.count - i)
                with store.batch():
                    for k in range(i, i + n):
                        session.add_message({"role": "user", "content": f"{prefix}{k}"})
                for k in range(i, i + n):
                    print(f"ACK {k}", flush=True)
                i += n
                continue
            message = {"role": "user", "content": f"{prefix}{i}"}
            while True:
                try:
                    session.append("user/message", message, rebase=args.retry == "rebase")
                    break
                except ConflictError:
                    if args.retry == "none":
                        raise
                    if args.retry == "refresh":
                        session.refresh()
                except StoreLockedError:
                    time.sleep(0.001)
            print(f"ACK {i}", flush=True)
            i += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
