"""Guards of the package's structure, read from the source (no import, no store).

- The store is the one door to its engine: outside ``repo/``, ``store/`` and ``testing/`` no
  module reads an attribute named ``backend`` (of a store or of anything), nor a private
  attribute (``store._x``) of a Store. What a caller needs is a documented
  :class:`~sesstree.Store` method, which translates the engine's errors.
- Ref names are built and parsed in ``node.py`` only (``session_ref()``, ``tag_ref()``,
  ``short_name()``...): no literal beginning ``sessions/``, ``tags/`` or ``ref: `` elsewhere,
  and no ``SESSIONS + name``.

Each guard lists every offending ``file:line``; each is also run on a small bad snippet, so a
guard that stopped seeing anything would fail rather than pass.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "sesstree"
#: Where the engine may be reached directly: the store itself, the engines, the contract suite.
BEHIND_THE_DOOR = ("repo", "store", "testing")
#: The one module that spells ref namespaces out.
REF_NAMES = "node.py"
_REF_PREFIXES = ("sessions/", "tags/", "ref: ")
_NAMESPACES = frozenset({"SESSIONS", "TAGS"})
_STORE_TYPE = re.compile(r"\bStore\b")


@functools.cache
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of the package, parsed (once for every guard), by its path in it."""
    return tuple((path.relative_to(PACKAGE).as_posix(),
                  ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
                 for path in sorted(PACKAGE.rglob("*.py")))


def _in_order(faults: list[str]) -> list[str]:
    """``file:line: what`` by file, then by line."""
    def key(fault: str) -> tuple[str, int]:
        where, line, _ = fault.split(":", 2)
        return where, int(line)
    return sorted(faults, key=key)


def _is_private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def _typed_stores(tree: ast.AST) -> set[str]:
    """Names (parameters, annotated variables and attributes) annotated as a Store."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if _STORE_TYPE.search(ast.unparse(node.annotation)):
                names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and _STORE_TYPE.search(ast.unparse(node.annotation)):
            target = node.target
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    return names


def _names_a_store(expr: ast.expr, typed: set[str]) -> bool:
    """``store``, ``self.store``, ``self._store``, ``src_store``, ``Store``, or a name
    annotated as a Store in this module."""
    if isinstance(expr, ast.Name):
        name = expr.id
    elif isinstance(expr, ast.Attribute):
        name = expr.attr
    else:
        return False
    bare = name.lstrip("_")
    return name in typed or name == "Store" or bare == "store" or bare.endswith("_store")


def door_faults(where: str, tree: ast.AST) -> list[str]:
    """Where module ``where`` reaches past the Store: ``.backend`` off anything, or a private
    attribute of a Store (also through ``getattr``)."""
    typed = _typed_stores(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "backend":
                out.append(f"{where}:{node.lineno}: .backend")
            elif _is_private(node.attr) and _names_a_store(node.value, typed):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)} (private to Store)")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(attr := node.args[1], ast.Constant) and isinstance(attr.value, str)):
            if attr.value == "backend" or (_is_private(attr.value)
                                           and _names_a_store(node.args[0], typed)):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return out


def ref_name_faults(where: str, tree: ast.AST) -> list[str]:
    """Where module ``where`` spells a ref name out: a literal (or an f-string) beginning
    ``sessions/``, ``tags/`` or ``ref: ``, or ``SESSIONS + x`` / ``f"{SESSIONS}{x}"``."""
    out = []
    inner: set[int] = set()  # the constant parts of f-strings after their first
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inner.update(id(part) for part in node.values[1:])
            first = node.values[0] if node.values else None
            if isinstance(first, ast.FormattedValue) and _namespace(first.value):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _namespace(node.left):
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in inner and node.value.startswith(_REF_PREFIXES)):
            out.append(f"{where}:{node.lineno}: {node.value[:40]!r}")
    return out


def _namespace(expr: ast.expr) -> bool:
    """``SESSIONS`` / ``TAGS``, bare or as a module's attribute (``node.SESSIONS``)."""
    if isinstance(expr, ast.Name):
        return expr.id in _NAMESPACES
    return isinstance(expr, ast.Attribute) and expr.attr in _NAMESPACES


def test_only_the_store_reaches_its_engine() -> None:
    faults = _in_order([fault for where, tree in _modules()
                        if not where.startswith(tuple(f"{d}/" for d in BEHIND_THE_DOOR))
                        for fault in door_faults(where, tree)])
    if faults:
        pytest.fail("read through a Store method instead:\n" + "\n".join(faults))


def test_ref_names_are_spelled_out_only_in_node_py() -> None:
    faults = _in_order([fault for where, tree in _modules() if where != REF_NAMES
                        for fault in ref_name_faults(where, tree)])
    if faults:
        pytest.fail("use node.py's session_ref(), tag_ref(), symbolic(), session_name(), "
                    "short_name()...:\n" + "\n".join(faults))


_BAD_DOOR = '''
def one(store):
    return store.backend.list_refs("")

def two(thing):
    return thing.backend

def three(repo: Store | None, other: "Store"):
    return repo._policy, other._head, Store._named

class Four:
    def five(self):
        return self.store._checkout, self._store._chain_of("x", None), getattr(store, "backend")
'''


def test_the_door_guard_sees_each_way_past_the_store() -> None:
    faults = door_faults("bad.py", ast.parse(_BAD_DOOR))
    assert sorted(int(f.split(":")[1]) for f in faults) == [3, 6, 9, 9, 9, 13, 13, 13], faults
    ok = ast.parse("def f(store, self):\n    return store.refs(), self._cache, store.__class__\n")
    assert door_faults("ok.py", ok) == []


_BAD_REFS = '''
a = "sessions/" + name
b = SESSIONS + name
c = node.TAGS + name
d = f"tags/{name}"
e = f"{SESSIONS}{name}"
f = "ref: " + ref
g = x.startswith(("sessions/", "tags/"))
'''


def test_the_ref_name_guard_sees_each_spelling() -> None:
    faults = ref_name_faults("bad.py", ast.parse(_BAD_REFS))
    assert sorted(int(f.split(":")[1]) for f in faults) == [2, 3, 4, 5, 6, 7, 8, 8], faults
    ok = ast.parse('a = session_ref(name)\nb = f"/api/sessions/{name}"\nc = f"{x} tags/"\n'
                   'd = SESSIONS\ne = name + SESSIONS\n')
    assert ref_name_faults("ok.py", ok) == []
