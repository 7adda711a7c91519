"""``sess`` that SIGKILLs itself at one named point: a crash there, made deterministic.

Usage: ``sess_killed_at.py POINT SESS-ARGS...``. The command runs as the console script runs
it (``sesstree.cli.main``) and, on reaching POINT, sends itself SIGKILL:

- ``before-commit``: inside the store's transaction, right after the rename's or the
  deletion's statement, before the transaction commits;
- ``after-commit``: once the store's transaction has committed, as HEAD is about to be
  written (the write of a shared store's HEAD file).

A point the command never reaches lets it finish; it then prints what it prints.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from sesstree.cli import main
from sesstree.repo.head import FileHead
from sesstree.store.postgres.backend import PostgresBackend


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def patch(point: str) -> None:
    if point == "before-commit":
        rename, commit = PostgresBackend.rename_ref, PostgresBackend.commit

        def rename_ref(self: PostgresBackend, *args: Any) -> None:
            rename(self, *args)
            die()

        def commit_then_die(self: PostgresBackend, nodes: Any, updates: Any) -> None:
            commit(self, nodes, updates)
            if any(u.new is None for u in updates):  # the deletion's move, in its batch
                die()

        PostgresBackend.rename_ref = rename_ref  # type: ignore[method-assign]
        PostgresBackend.commit = commit_then_die  # type: ignore[method-assign]
    elif point == "after-commit":
        def set_head(self: FileHead, value: str) -> None:
            die()

        FileHead.set = set_head  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown point {point!r}")


if __name__ == "__main__":
    patch(sys.argv[1])
    sys.argv = ["sess", *sys.argv[2:]]
    main()
