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
