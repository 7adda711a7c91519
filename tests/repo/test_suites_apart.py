"""The two suites in sesstree.testing stay apart: the engine contract, and the repo suite on top.

An engine author runs the contract; the repo suite is sesstree's own promise. Each test is in
exactly one of them, each is exported (a test left out of ``__all__`` would silently never
run), and the repo suite reaches an engine only through the store.
"""

from __future__ import annotations

import ast
import inspect
from importlib.util import resolve_name
from pathlib import Path
from types import ModuleType

from sesstree.testing import conformance, contract, repo
from sesstree.testing.contract import batches, objects, refs, space, text
from sesstree.testing.repo import revisions, sessions

SUITES = {contract: [objects, refs, batches, space, text], repo: [revisions, sessions]}


def defined_tests(module: ModuleType) -> set[str]:
    """The test functions a module defines itself (not those it imports)."""
    return {name for name, f in vars(module).items()
            if name.startswith("test_") and inspect.isfunction(f)
            and f.__module__ == module.__name__}


def test_every_test_of_a_suite_is_exported_by_its_module_and_its_suite() -> None:
    for suite, modules in SUITES.items():
        for module in modules:
            assert defined_tests(module), module.__name__
            assert sorted(n for n in module.__all__ if n.startswith("test_")) == sorted(
                defined_tests(module)), module.__name__
            assert set(module.__all__) <= set(suite.__all__), module.__name__
        assert "store" in suite.__all__  # the fixture the tests ask for


def test_a_test_is_the_engines_or_the_repos_never_both() -> None:
    engine = {n for m in SUITES[contract] for n in defined_tests(m)}
    above = {n for m in SUITES[repo] for n in defined_tests(m)}
    assert engine and above and not engine & above


def test_the_old_module_still_gives_both_suites() -> None:
    both = {n for n in vars(conformance) if n.startswith("test_")}
    assert both == {n for s in SUITES for n in s.__all__ if n.startswith("test_")}


def test_the_repo_suite_reaches_an_engine_only_through_the_store() -> None:
    for module in SUITES[repo]:
        assert module.__file__ is not None
        tree = ast.parse(Path(module.__file__).read_text())
        backend = [n.lineno for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and n.attr == "backend"]
        seam = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and resolve_name("." * n.level + (n.module or ""), module.__package__ or "")
                .startswith("sesstree.store")]
        assert backend == [] and seam == [], module.__name__
