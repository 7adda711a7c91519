"""Sync and the server use a store only through :class:`~sesstree.Store`'s methods, and the
repository layer never calls up into sync: the structure that keeps the layers apart."""

from __future__ import annotations

import ast
from pathlib import Path

import sesstree
from sesstree import Store, sync

SRC = Path(sesstree.__file__).parent


def _modules(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


def test_sync_and_server_read_no_backend_of_a_store() -> None:
    reads = [f"{path.relative_to(SRC)}:{node.lineno}"
             for package in ("sync", "server") for path in _modules(package)
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "backend"]
    assert reads == []


def test_the_repository_layer_imports_nothing_of_sync() -> None:
    """Not even lazily, inside a function: that too is an import edge up the layers."""
    found = []
    for path in _modules("repo"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [f"{'.' * node.level}{node.module or ''}"]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names
                      if n.startswith(("..sync", "sesstree.sync"))]
    assert found == []


def test_sync_is_functions_that_take_a_store() -> None:
    for verb in ("push", "fetch", "pull"):
        assert not hasattr(Store, verb)
        assert callable(getattr(sync, verb))
