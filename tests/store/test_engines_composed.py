"""The engines are built by composition: a backend owns its connection state and hands it to
collaborators, each a plain class. So no class under ``sesstree/store/`` derives from a class of
sesstree other than a Protocol (typing), an exception or a msgspec.Struct, and no method is a
stub raising NotImplementedError, waiting for a sibling mixin to provide it (read from the
source, without importing it)."""

from __future__ import annotations

import ast
import builtins
import functools
from pathlib import Path

import pytest

import sesstree

SRC = Path(sesstree.__file__).parent
STORE = SRC / "store"
# Roots a sesstree class may lead to and still be a base in store/: what typing, builtins and
# msgspec define.
_ALLOWED_ROOTS = {"Protocol", "Exception", "BaseException", "msgspec.Struct", "Struct"}


def _modules(package: str) -> list[Path]:
    """The modules of one part of store/: its top level ("store"), or one engine's package."""
    if package == "store":
        return sorted(STORE.glob("*.py"))
    return sorted((STORE / package).rglob("*.py"))


@functools.cache
def _bases_by_class() -> dict[str, list[str]]:
    """Every class defined anywhere in sesstree, by name, with the names of its bases."""
    found: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).extend(_base_names(node))
    return found


def _base_names(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Subscript):  # Protocol[T], Generic[T]
            base = base.value
        names.append(ast.unparse(base))
    return names


def _builtin_exception(name: str) -> bool:
    found = getattr(builtins, name, None)
    return isinstance(found, type) and issubclass(found, BaseException)


def _is_protocol_exception_or_struct(name: str, classes: dict[str, list[str]],
                                     seen: frozenset[str] = frozenset()) -> bool:
    """Whether sesstree class ``name`` is a Protocol, an exception or a msgspec.Struct (one of
    its bases is, directly or through other sesstree classes)."""
    if name in seen:
        return False
    for parent in classes[name]:
        short = parent.rpartition(".")[2]
        if parent in _ALLOWED_ROOTS or _builtin_exception(short):
            return True
        if short in classes and _is_protocol_exception_or_struct(short, classes, seen | {name}):
            return True
    return False


def _allowed(base: str, classes: dict[str, list[str]]) -> bool:
    """Whether ``base`` may be a base class in store/: defined outside sesstree, or a sesstree
    class that is a Protocol, an exception or a msgspec.Struct."""
    short = base.rpartition(".")[2]
    if short not in classes:
        return True  # (typing, builtins, msgspec, the standard library...)
    return _is_protocol_exception_or_struct(short, classes)


PACKAGES = [
    "store",
    "sqlite",
    "postgres",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_class_in_store_is_assembled_from_mixins(package: str) -> None:
    classes = _bases_by_class()
    mixed = []
    for path in _modules(package):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                mixed += [f"{path.relative_to(SRC)}: {node.name}({base})"
                          for base in _base_names(node) if not _allowed(base, classes)]
    assert mixed == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_stub_raises_not_implemented_in_store(package: str) -> None:
    stubs = []
    for path in _modules(package):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if ast.unparse(exc) == "NotImplementedError":
                    stubs.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert stubs == []


def test_the_check_finds_a_mixin() -> None:
    """The scan above can fail: a class built on a plain sesstree class is found."""
    classes = _bases_by_class()
    assert not _allowed("Transactions", classes)  # a plain collaborator class
    assert _allowed("Backend", classes)  # a Protocol
    assert _allowed("StoreError", classes)  # an exception
    assert _allowed("RefUpdate", classes)  # a msgspec.Struct
    assert _allowed("threading.Thread", classes)  # not sesstree's
