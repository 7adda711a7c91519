"""Guards of the package's structure, read from the source (no import, no store).

- The store is the one door to its engine: outside ``repo/``, ``store/`` and the engine
  contract suite (``testing/contract/``) no module reads an attribute named ``backend`` (of a
  store or of anything, also through ``getattr``, ``attrgetter`` or ``vars(x)["backend"]``),
  nor a private attribute (``store._x``) of a Store, also through a name bound to one
  (``s = store``, ``with open_store(p) as s``) or straight off ``open_store(...)``. What a
  caller needs is a documented :class:`~sesstree.Store` method, which translates the
  engine's errors.
- Ref names are built and parsed in ``node.py`` only (``session_ref()``, ``tag_ref()``,
  ``short_name()``...): no literal beginning ``sessions/``, ``tags/`` or ``ref: `` elsewhere,
  no ``SESSIONS + name``, and no ``name[len(SESSIONS):]``.

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
#: Where the engine may be reached directly: the store itself, the engines, the contract suite
#: (the repo-level suite in ``testing/repo/`` uses the Store only, like any caller).
BEHIND_THE_DOOR = ("repo", "store", "testing/contract")
#: The one module that spells ref namespaces out.
REF_NAMES = "node.py"
_REF_PREFIXES = ("sessions/", "tags/", "ref: ")
_NAMESPACES = frozenset({"SESSIONS", "TAGS"})
_STORE_TYPE = re.compile(r"\bStore\b")
#: Calls that hand out a Store.
_STORE_MAKERS = frozenset({"Store", "open_store", "clone"})
#: Ways to read an attribute named by a string.
_BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr", "attrgetter"})


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


def _store_names(tree: ast.AST) -> set[str]:
    """Names that hold a Store in this module: parameters, variables and attributes annotated
    as one, and names bound to one (``s = store``, ``s = open_store(p)``, ``with ... as s``,
    ``(s := store)``), followed through chains of such bindings."""
    names: set[str] = set()
    bindings: list[tuple[ast.expr, ast.expr]] = []  # (target, value)
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if _STORE_TYPE.search(ast.unparse(node.annotation)):
                names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and _STORE_TYPE.search(ast.unparse(node.annotation)):
            names.update(_bound(node.target))
        elif isinstance(node, ast.Assign):
            bindings += [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.NamedExpr):
            bindings.append((node.target, node.value))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bindings.append((node.optional_vars, node.context_expr))
    grew = True
    while grew:  # until no binding adds a name: s = store; t = s
        before = len(names)
        for target, value in bindings:
            if _names_a_store(value, names):
                names.update(_bound(target))
        grew = len(names) > before
    return names


def _bound(target: ast.expr) -> list[str]:
    """The name a binding target gives (``x``, ``self.x``), if it is a single one."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    return []


def _names_a_store(expr: ast.expr, known: set[str]) -> bool:
    """``store``, ``self.store``, ``self._store``, ``src_store``, ``Store``, a name known to
    hold a Store in this module, or a call that makes one (``open_store(p)``)."""
    if isinstance(expr, ast.Call):
        func = expr.func
        made = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else "")
        return made in _STORE_MAKERS
    if isinstance(expr, ast.Name):
        name = expr.id
    elif isinstance(expr, ast.Attribute):
        name = expr.attr
    else:
        return False
    bare = name.lstrip("_")
    return name in known or name == "Store" or bare == "store" or bare.endswith("_store")


def _by_name(node: ast.Call) -> tuple[ast.expr | None, str] | None:
    """``(object, attribute)`` of ``getattr(obj, "x")`` and its kin, ``(None, "x")`` of
    ``attrgetter("x")``; None for any other call."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else "")
    if called not in _BY_NAME:
        return None
    args = node.args
    if called == "attrgetter":
        return next(((None, a.value) for a in args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)), None)
    if len(args) >= 2 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str):
        return args[0], args[1].value
    return None


def door_faults(where: str, tree: ast.AST) -> list[str]:
    """Where module ``where`` reaches past the Store: ``.backend`` off anything, or a private
    attribute of a Store (also through ``getattr``, ``attrgetter`` or ``vars(...)[...]``)."""
    stores = _store_names(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "backend":
                out.append(f"{where}:{node.lineno}: .backend")
            elif _is_private(node.attr) and _names_a_store(node.value, stores):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)} (private to Store)")
        elif isinstance(node, ast.Call) and (named := _by_name(node)) is not None:
            owner, attr = named
            if attr.split(".")[-1] == "backend" or (
                    _is_private(attr) and owner is not None and _names_a_store(owner, stores)):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and node.slice.value == "backend"):
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")  # vars(store)["backend"]
    return out


def ref_name_faults(where: str, tree: ast.AST) -> list[str]:
    """Where module ``where`` spells a ref name out: a literal (or an f-string) beginning
    ``sessions/``, ``tags/`` or ``ref: ``, ``SESSIONS + x`` / ``f"{SESSIONS}{x}"``, or cuts
    one by hand, ``x[len(SESSIONS):]``."""
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
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)
              and isinstance(low := node.slice.lower, ast.Call)
              and isinstance(low.func, ast.Name) and low.func.id == "len"
              and len(low.args) == 1 and _namespace(low.args[0])):
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")  # name[len(SESSIONS):]
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
        return self.store._checkout, self._store._named("x"), getattr(store, "backend")

def six(store, p):
    s = store
    t = s
    with open_store(p) as u:
        return t._policy, u._head, open_store(p)._checkout

def seven(store):
    if (w := store) is not None:
        return w._named, vars(store)["backend"], operator.attrgetter("backend")(store)
'''


def test_the_door_guard_sees_each_way_past_the_store() -> None:
    faults = door_faults("bad.py", ast.parse(_BAD_DOOR))
    assert sorted(int(f.split(":")[1]) for f in faults) == [
        3, 6, 9, 9, 9, 13, 13, 13, 19, 19, 19, 23, 23, 23], faults
    ok = ast.parse(
        "def f(store, self, p, thing):\n"
        "    s = thing\n"
        "    with open(p) as f:\n"
        "        return (store.refs(), self._cache, store.__class__, s._x, f._y,\n"
        "                getattr(thing, '_z'), attrgetter('_w'), row['backend_kind'])\n")
    assert door_faults("ok.py", ok) == []


_BAD_REFS = '''
a = "sessions/" + name
b = SESSIONS + name
c = node.TAGS + name
d = f"tags/{name}"
e = f"{SESSIONS}{name}"
f = "ref: " + ref
g = x.startswith(("sessions/", "tags/"))
h = ref.name[len(TAGS):]
'''


def test_the_ref_name_guard_sees_each_spelling() -> None:
    faults = ref_name_faults("bad.py", ast.parse(_BAD_REFS))
    assert sorted(int(f.split(":")[1]) for f in faults) == [2, 3, 4, 5, 6, 7, 8, 8, 9], faults
    ok = ast.parse('a = session_ref(name)\nb = f"/api/sessions/{name}"\nc = f"{x} tags/"\n'
                   'd = SESSIONS\ne = name + SESSIONS\nf = x[len(prefix):]\ng = len(TAGS)\n')
    assert ref_name_faults("ok.py", ok) == []
