"""The code stays `ruff check` clean (style.md: type hints throughout, ruff clean)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from support.helpers import REPO, require


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(REPO / ".venv" / "bin" / "ruff")
    require(shutil.which("ruff") is not None or (REPO / ".venv" / "bin" / "ruff").exists(),
            "ruff is installed with the test extra")
    p = subprocess.run([ruff, "check", "--output-format", "concise", "slurmguard", "tests"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_package_is_typed():
    assert (REPO / "slurmguard" / "py.typed").exists()
    assert sys.version_info >= (3, 11)


def _top_level_names(path: Path) -> set[str]:
    """Names a module defines at its top level (inside top-level if/try too); "*" when it
    has a module ``__getattr__`` (lazy exports)."""
    names: set[str] = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If):
            body += node.body + node.orelse
        elif isinstance(node, ast.Try):
            body += node.body + node.orelse + node.finalbody
            for h in node.handlers:
                body += h.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
            names.add("*")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_every_internal_import_resolves():
    """A module moved or renamed leaves no caller behind (ruff does not see this): every
    `slurmguard...` import in the package and the tests names a module that exists and a name
    it defines, and every import of a test helper module (``from test_hooks_slurm import X``)
    names a file in tests/ that defines X. Read with ast, nothing is imported."""
    files = [*(REPO / "slurmguard").rglob("*.py"), *(REPO / "tests").rglob("*.py")]
    pkg: dict[str, Path] = {}
    for p in (REPO / "slurmguard").rglob("*.py"):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        pkg[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    helpers = {p.stem: p for p in (REPO / "tests").rglob("*.py")}
    cache: dict[Path, set[str]] = {}

    def names(p: Path) -> set[str]:
        if p not in cache:
            cache[p] = _top_level_names(p)
        return cache[p]

    broken = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "slurmguard" and a.name not in pkg:
                        broken.append(f"{f.relative_to(REPO)}:{node.lineno}: import {a.name}")
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                mod = node.module
                if mod.split(".")[0] == "slurmguard":
                    if mod not in pkg:
                        broken.append(f"{f.relative_to(REPO)}:{node.lineno}: no module {mod}")
                        continue
                    target = pkg[mod]
                elif mod in helpers and mod.startswith(("test_", "requeue_support")):
                    target = helpers[mod]
                elif mod.startswith("test_"):
                    broken.append(f"{f.relative_to(REPO)}:{node.lineno}: no test module {mod}")
                    continue
                else:
                    continue
                for a in node.names:
                    known = names(target)
                    if a.name != "*" and f"{mod}.{a.name}" not in pkg and a.name not in known \
                            and "*" not in known:
                        broken.append(f"{f.relative_to(REPO)}:{node.lineno}: {mod} has no {a.name}")
    assert broken == []


# Functions over this many lines are split (style.md: functions under ~60 lines).
LONG_FUNCTION_LINES = 80


def long_functions(root: Path, limit: int = LONG_FUNCTION_LINES) -> list[str]:
    """``path:name (N lines)`` of every function in ``root`` longer than ``limit`` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.name} ({lines} lines)")
    return out


def test_no_function_over_80_lines():
    found = long_functions(REPO / "slurmguard")
    assert found == [], "split these functions (style.md: under ~60 lines):\n" + "\n".join(found)


def test_long_function_finder_sees_a_long_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (pkg / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(pkg) == ["pkg/m.py:long (86 lines)"]


# -- every test asserts: no early return, no assertion that may never run --------------------
#
# A test that returns before its first assertion passes without testing anything on the inputs
# that take that return (a Hypothesis draw filtered with `if ...: return` instead of
# `assume()`), and a test whose every assertion sits under an `if` or in a loop over data it
# made (a list the code under test returned, a drawn sample) passes on an empty list. Each test
# function therefore has an assertion that runs whatever the data: at the top of its body, in
# a `with` or `try` body, in a loop over a literal, or on every branch of an if or a try.
# Assertions: `assert`, `pytest.raises/warns` blocks, `pytest.fail`, calls of `assert*`.

def _is_assertion(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return any(isinstance(i.context_expr, ast.Call)
                   and isinstance(i.context_expr.func, ast.Attribute)
                   and i.context_expr.func.attr in ("raises", "warns") for i in node.items)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        f = node.value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name == "fail" or name.startswith("assert")
    return False


def _literal_iterable(it: ast.expr) -> bool:
    """A loop over this runs its body at least once: a non-empty literal, range(constant)."""
    if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
        return bool(it.elts)
    if isinstance(it, ast.Dict):
        return bool(it.keys)
    if isinstance(it, ast.Call):
        f = it.func
        if isinstance(f, ast.Name) and f.id == "range":
            return bool(it.args) and all(isinstance(a, ast.Constant) for a in it.args) and \
                len(range(*[a.value for a in it.args])) > 0  # type: ignore[misc]
        if isinstance(f, ast.Name) and f.id in ("enumerate", "sorted", "zip", "reversed", "list"):
            return bool(it.args) and all(_literal_iterable(a) for a in it.args)
        if isinstance(f, ast.Attribute) and f.attr in ("items", "keys", "values"):
            return _literal_iterable(f.value)
    return False


def _always_asserts(stmts: list[ast.stmt]) -> bool:
    """Whether running ``stmts`` to the end always runs an assertion."""
    for s in stmts:
        if _is_assertion(s):
            return True
        if isinstance(s, (ast.With, ast.AsyncWith)) and _always_asserts(s.body):
            return True
        if isinstance(s, ast.Try) and (
                _always_asserts(s.body) or _always_asserts(s.finalbody)
                or (s.handlers and all(_always_asserts(h.body) for h in s.handlers)
                    and _always_asserts(s.orelse))):
            return True
        if isinstance(s, ast.If) and _always_asserts(s.body) and _always_asserts(s.orelse):
            return True
        if isinstance(s, (ast.For, ast.AsyncFor)) and _literal_iterable(s.iter) \
                and _always_asserts(s.body):
            return True
    return False


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function body, without those of functions and classes defined in it."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out


def unasserted_tests(root: Path) -> list[str]:
    """``path:line:name: why`` of every test function under ``root`` that can pass without
    asserting: one that returns before its first assertion, or whose assertions may all be
    skipped (under an ``if``, in a loop over data)."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and fn.name.startswith("test_")):
                continue
            nodes = _own_nodes(fn)
            asserts = [n.lineno for n in nodes if isinstance(n, ast.stmt) and _is_assertion(n)]
            returns = [n.lineno for n in nodes if isinstance(n, ast.Return)]
            where = f"{path.relative_to(root.parent)}:{fn.lineno}:{fn.name}"
            if returns and (not asserts or min(returns) < min(asserts)):
                found.append(f"{where}: returns before its first assertion")
            elif asserts and not _always_asserts(fn.body):
                found.append(f"{where}: every assertion may be skipped (under an if, in a loop)")
    return found


def test_every_test_asserts_whatever_its_data():
    found = unasserted_tests(REPO / "tests")
    assert found == [], ("use assume() for a draw to skip, assert the loop's data is not "
                         "empty:\n" + "\n".join(found))


def test_unasserted_test_finder_sees_both_shapes(tmp_path):
    t = tmp_path / "tests"
    t.mkdir()
    (t / "test_m.py").write_text(
        "def test_early(x):\n    if not x:\n        return\n    assert x\n\n\n"
        "def test_loop(xs):\n    for x in xs:\n        assert x\n\n\n"
        "def test_if(x):\n    if x:\n        assert x\n\n\n"
        "def test_ok(xs):\n    assert xs\n    for x in xs:\n        assert x\n\n\n"
        "def test_branches(x):\n    try:\n        y = int(x)\n    except ValueError as e:\n"
        "        assert str(e)\n    else:\n        assert y == y\n\n\n"
        "def test_literal_loop():\n    for x in (1, 2):\n        assert x\n\n\n"
        "def test_helper():\n    def inner():\n        return 1\n    assert inner()\n")
    assert unasserted_tests(t) == [
        "tests/test_m.py:1:test_early: returns before its first assertion",
        "tests/test_m.py:7:test_loop: every assertion may be skipped (under an if, in a loop)",
        "tests/test_m.py:12:test_if: every assertion may be skipped (under an if, in a loop)",
    ]
