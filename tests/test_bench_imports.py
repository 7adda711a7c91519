"""The benchmarks and examples still find what they import from sesstree: mypy checks only
src/, and most of bench/ imports lazily inside the function that measures, so a module moved or
a name moved to another module would otherwise show only when someone next runs the benchmark.
(An import inside ``try: ... except ImportError`` is a fallback for an older sesstree, and is
left alone.)"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*(ROOT / "bench").glob("*.py"), *(ROOT / "examples").rglob("*.py")])


def _fallbacks(tree: ast.AST) -> set[int]:
    """Ids of the import statements inside a ``try`` that catches ImportError."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            h.type is not None and "ImportError" in ast.unparse(h.type) for h in node.handlers
        ):
            inside.update(id(n) for part in (node.body, *(h.body for h in node.handlers))
                          for stmt in part for n in ast.walk(stmt))
    return inside


def sesstree_imports(source: str, filename: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of every import of sesstree in ``source``, at any depth."""
    tree = ast.parse(source, filename)
    skip = _fallbacks(tree)
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None \
                and node.module.split(".")[0] == "sesstree":
            found += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names
                      if a.name.split(".")[0] == "sesstree"]
    return sorted(found, key=lambda f: f[0])


def unresolved(source: str, filename: str) -> list[str]:
    """The imports of sesstree in ``source`` that do not resolve, as ``line: what``."""
    missing = []
    for line, module, name in sesstree_imports(source, filename):
        try:
            found = importlib.import_module(module)
            if name is not None and name != "*" and not hasattr(found, name):
                importlib.import_module(f"{module}.{name}")  # a submodule
        except ImportError:
            missing.append(f"{line}: {module}" + (f".{name}" if name else ""))
    return missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_of_sesstree_resolves(script: Path) -> None:
    assert unresolved(script.read_text(), str(script)) == []


def test_the_check_finds_a_moved_name_and_spares_a_fallback() -> None:
    source = (
        "def f():\n"
        "    from sesstree.node import no_such_name\n"
        "    from sesstree.no_such_module import x\n"
        "    try:\n"
        "        from sesstree.gone import y\n"
        "    except ImportError:\n"
        "        from sesstree import open_store\n"
        "    from sesstree.store.sqlite import dicts\n"
    )
    assert unresolved(source, "<snippet>") == [
        "2: sesstree.node.no_such_name", "3: sesstree.no_such_module.x",
    ]
