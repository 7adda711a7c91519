"""The public surface: ``__all__`` is exactly what the package exports (as httpx checks)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import types
from collections.abc import Iterator
from pathlib import Path

import sesstree
from sesstree import errors

INCLUDED_DUNDERS = {"__version__"}
CORE = {
    "open_store", "Store", "Session", "SessionInfo", "Diff", "Node", "NodeId", "make_node",
    "Derived", "Problem", "derive_messages", "register_event_type", "repair_messages",
    "SesstreeError", "StoreError", "StoreNotFoundError", "StoreCorruptError", "StoreLockedError",
    "StoreFormatError", "RevisionError", "UnknownRevisionError", "AmbiguousPrefixError",
    "InvalidRefNameError", "RefExistsError", "ConflictError", "InvalidEventError", "InputError",
    "__version__",
}


def public_names(module: types.ModuleType) -> set[str]:
    """What a module actually exposes: no private names, submodules or ``__future__`` flags."""
    return {
        name for name, value in vars(module).items()
        if (not name.startswith("_") or name in INCLUDED_DUNDERS)
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }


def test_all_equals_the_public_names() -> None:
    # The agent loop's names are loaded on first use; they count as exported all the same.
    lazy = set(sesstree._LAZY)
    assert set(sesstree.__all__) == public_names(sesstree) | lazy
    assert lazy <= set(dir(sesstree))
    assert all(getattr(sesstree, name) is not None for name in lazy)
    assert len(sesstree.__all__) == len(set(sesstree.__all__)), "duplicates in __all__"


def test_all_is_sorted() -> None:
    assert sesstree.__all__ == sorted(sesstree.__all__)


def test_core_names_present() -> None:
    assert set(sesstree.__all__) >= CORE
    for name in CORE:
        assert getattr(sesstree, name) is not None


def test_every_error_exported_and_in_one_tree() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.SesstreeError)
        assert getattr(sesstree, name) is cls
        assert cls.__doc__, f"{name} has no docstring"
        assert name in (errors.__doc__ or ""), f"{name} is not drawn in the errors docstring"
    assert set(errors.__all__) == public_names(errors)


def test_version_matches_metadata() -> None:
    from importlib.metadata import version

    assert sesstree.__version__ == version("sesstree")


def test_public_callables_documented() -> None:
    for name in sesstree.__all__:
        value = getattr(sesstree, name)
        if callable(value) and not isinstance(value, type(sesstree.NodeId)):
            assert value.__doc__, f"{name} has no docstring"


def test_importing_the_store_does_not_load_the_agent_loop() -> None:
    """`import sesstree` and the `sess` commands other than `run` start without the HTTP
    client: the agent loop loads on first use."""
    import subprocess
    import sys

    code = (
        "import sys, sesstree, sesstree.cli\n"
        "assert 'sesstree.agent' not in sys.modules and 'httpx' not in sys.modules\n"
        "sesstree.Agent\n"
        "assert 'sesstree.agent' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _imports_of(tree: ast.AST) -> Iterator[ast.ImportFrom]:
    """Every ``from sesstree... import`` in ``tree``, lazy ones too, but for a fallback under
    ``except ImportError`` (a benchmark that also measures an older sesstree)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers
        ):
            for handler in node.handlers:
                handler.body = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sesstree"):
            yield node


def _importable(module: types.ModuleType, name: str) -> bool:
    """``from module import name`` works: an attribute, or a submodule of a package."""
    if hasattr(module, name):
        return True
    return hasattr(module, "__path__") and importlib.util.find_spec(
        f"{module.__name__}.{name}") is not None


def test_the_benchmarks_and_examples_import_names_that_exist() -> None:
    # They are run by hand, not by the tests: a name moved or renamed would break them unseen.
    root = Path(__file__).resolve().parent.parent
    missing = []
    for path in sorted([*root.glob("bench/*.py"), *root.glob("examples/*.py")]):
        for node in _imports_of(ast.parse(path.read_text())):
            module = importlib.import_module(str(node.module))
            missing += [f"{path.name}:{node.lineno} {node.module}.{alias.name}"
                        for alias in node.names if not _importable(module, alias.name)]
    assert missing == []
