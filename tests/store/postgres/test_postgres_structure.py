"""How the PostgreSQL engine is put together: a backend that owns its parts (no mixins, no
stubs), a package that needs neither the SQLite engine nor the dispatch that opens it, and the
seam's methods with the signatures the protocols give them."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from sesstree.store import base
from sesstree.store.postgres import backend as backend_module
from sesstree.store.postgres.backend import PostgresBackend

PACKAGE = Path(backend_module.__file__).parent
# The seam's protocols, and what the PostgreSQL backend offers beyond them (gc's two steps,
# the server's counts).
PROTOCOLS = (base.ObjectStore, base.RefStore, base.Backend, base.ScaleReads)
EXTRAS = ("gc_walk", "gc_remove", "server_stats")


def test_the_backend_owns_its_parts_and_inherits_nothing() -> None:
    assert PostgresBackend.__mro__ == (PostgresBackend, object)
    for module in PACKAGE.glob("*.py"):
        assert "NotImplementedError" not in module.read_text(), module.name


def imported(module: Path) -> set[str]:
    """Every module ``module`` imports, lazily or not, as absolute names."""
    package = "sesstree.store.postgres"
    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base_name = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            name = ".".join(p for p in (base_name, node.module or "") if p)
            names |= {name} | {f"{name}.{a.name}" for a in node.names}
    return names


def test_the_package_imports_neither_the_sqlite_engine_nor_the_dispatch() -> None:
    for module in PACKAGE.glob("*.py"):
        bad = {n for n in imported(module) if n.startswith((
            "sesstree.store.sqlite", "sesstree.store.engines", "sesstree.repo"))}
        assert bad == set(), module.name


def test_every_method_of_the_seam_has_the_protocols_signature(postgres_url: str) -> None:
    store = PostgresBackend(postgres_url)
    try:
        names = {n for p in PROTOCOLS for n, v in vars(p).items()
                 if not n.startswith("_") and inspect.isfunction(v)}
        for name in sorted(names):
            proto = next(p for p in PROTOCOLS if name in vars(p))
            want = list(inspect.signature(vars(proto)[name]).parameters.values())[1:]
            got = list(inspect.signature(getattr(store, name)).parameters.values())
            assert [(p.name, p.kind, p.default) for p in got] == [
                (p.name, p.kind, p.default) for p in want], name
            assert getattr(store, name).__doc__, name
        for name in EXTRAS:
            assert callable(getattr(store, name)) and getattr(store, name).__doc__, name
    finally:
        store.close()
