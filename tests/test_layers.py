"""The map of the house holds: each layer imports only the layers below it (the contracts in
pyproject.toml, run by import-linter), and no two modules import each other, directly or round
a circle, except the session handle and the store it belongs to.

Lazy imports inside functions count, as they do for import-linter: an import that runs later
is still a dependency. Imports under ``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LINT = Path(sys.executable).with_name("lint-imports")

#: The one circle the design keeps: a Session is made by its Store and writes through it.
ALLOWED_CYCLE = frozenset({"sesstree.repo.session", "sesstree.repo.store"})


def _lint(src: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def test_every_layer_imports_only_the_layers_below_it(tmp_path: Path) -> None:
    result = _lint(SRC, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """The contract can fail: a copy of the package where the store imports the CLI breaks it,
    and the report names the import."""
    copy = tmp_path / "src"
    shutil.copytree(SRC / "sesstree", copy / "sesstree",
                    ignore=shutil.ignore_patterns("__pycache__"))
    base = copy / "sesstree" / "store" / "base.py"
    base.write_text(base.read_text() + "\n\ndef _upward() -> None:\n    from ..cli import core  # noqa\n")
    result = _lint(copy, tmp_path)
    assert result.returncode != 0
    assert "sesstree.store.base -> sesstree.cli.core" in result.stdout


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("sesstree", exclude_type_checking_imports=True, cache_dir=None)


def test_no_import_cycle_but_the_session_and_its_store(graph: grimp.ImportGraph) -> None:
    cycles = [sorted(c) for c in _cycles(graph) if c != ALLOWED_CYCLE]
    assert cycles == []


def test_the_cycle_finder_finds_a_circle() -> None:
    """A circle added to the real graph is found, so the test above can fail."""
    circled = grimp.build_graph("sesstree", exclude_type_checking_imports=True, cache_dir=None)
    circled.add_import(importer="sesstree.node", imported="sesstree.repo.store")
    assert any("sesstree.node" in c and "sesstree.repo.store" in c for c in _cycles(circled))
