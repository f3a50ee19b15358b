"""The package's import graph has no circle, and the layers import downwards only.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts, including
the lazy ones inside functions (a lazy import hides a circle from Python's loader, not from a
reader); only imports under ``if TYPE_CHECKING:`` are left out. A submodule's implicit import
of its own parent package is not an edge (it is how packages work).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from support.helpers import REPO

PACKAGE = REPO / "slurmguard"


def _modules(root: Path) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for p in root.rglob("*.py"):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(id(n) for n in ast.walk(sub))
    return skip


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its body)."""
    mods = _modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                hit = resolve(t)
                if hit and hit != mod:
                    graph[mod].add(hit)
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_cycle_finder_finds_a_circle_and_passes_a_tree():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_import_graph_reads_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .. import a\nif TYPE_CHECKING:\n    import pkg.c\n")
    (pkg / "c.py").write_text("")
    g = import_graph(pkg)
    assert g["pkg.a"] == {"pkg.sub.b"}
    assert g["pkg.sub.b"] == {"pkg.a"}
    assert cycles(g) == [["pkg.a", "pkg.sub.b"]]


@functools.lru_cache(maxsize=1)
def _package_graph() -> dict[str, set[str]]:
    return import_graph()


def test_package_import_graph_has_no_cycle():
    graph = _package_graph()
    assert len(graph) > 50, "the graph reader found the package"
    assert cycles(graph) == []


def test_checks_and_field_types_do_not_import_config():
    """config pulls each check area's PARAMS; the areas declare them with slurmguard.fieldtypes."""
    graph = _package_graph()
    mods = [m for m in graph if m == "slurmguard.fieldtypes" or m.startswith("slurmguard.checks")]
    assert "slurmguard.checks.gpu" in mods
    assert [m for m in mods if "slurmguard.config" in graph[m]] == []


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_store_is_reached_through_its_api_only():
    """SQLAlchemy, the engine, the models and the migrations belong to slurmguard/store/ (and
    the Alembic scripts); everyone else goes through slurmguard.store.api."""
    inner = ("sqlalchemy", "alembic", "slurmguard.store.engine", "slurmguard.store.models",
             "slurmguard.store.migrate")
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).parts
        if rel[0] in ("store", "migrations"):
            continue
        bad = sorted(n for n in _imported_names(path) if n.startswith(inner))
        if bad:
            offenders[str(path.relative_to(REPO))] = bad
    assert offenders == {}


# -- layers -----------------------------------------------------------------------------------
# Pure code: decisions and the types they read, tested with hand-built inputs (style.md,
# practice 2). It may import other pure code and the shared bottom (contract, fieldtypes,
# nodeset, errors, lazyre), never anything that touches the world.
PURE = ("slurmguard.checks", "slurmguard.policy", "slurmguard.reconcile.plan",
        "slurmguard.reconcile.views", "slurmguard.burnin.stats", "slurmguard.burnin.verdict",
        "slurmguard.node.decide", "slurmguard.job.exitmap", "slurmguard.sources",
        "slurmguard.repair.plan", "slurmguard.repair.ledger", "slurmguard.goodput.account")
# What touches the world: the adapters and the one subprocess helper.
ADAPTERS = ("slurmguard.adapters", "slurmguard.proc")
# The layers above the adapters that use them; an adapter importing one of them runs the
# arrow the wrong way (move the shared type down, into slurmguard/sources/ or contract.py).
ABOVE_ADAPTERS = ("slurmguard.checks", "slurmguard.policy", "slurmguard.reconcile",
                  "slurmguard.node", "slurmguard.gate", "slurmguard.job", "slurmguard.serve",
                  "slurmguard.repair")
# config, the store and the fleet figures sit below the controller's orchestration packages
# (serve's pass, repair, burn-in, goodput's gathering): of those they may import pure code only
# (a declared section, a value type, a pure accounting), which is why such modules live in
# policy/ and sources/.
BELOW_CONTROLLER = ("slurmguard.config", "slurmguard.store", "slurmguard.fleet",
                    "slurmguard.migrations")
CONTROLLER = ("slurmguard.serve", "slurmguard.repair", "slurmguard.burnin", "slurmguard.goodput",
              "slurmguard.triage", "slurmguard.install", "slurmguard.reconcile",
              "slurmguard.metrics")
# The CLI sits on top: only it, the console entry and ``python -m slurmguard`` import it.
CLI = ("slurmguard.cli",)
CLI_USERS = ("slurmguard.cli", "slurmguard.entry", "slurmguard.__main__")


def _within(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def layer_violations(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, str, str]]:
    """(rule, importer, imported) for every arrow that runs the wrong way, sorted."""
    found: list[tuple[str, str, str]] = []
    for mod, deps in graph.items():
        for dep in deps:
            if _within(mod, PURE) and _within(dep, ADAPTERS):
                found.append(("pure code imports no adapter", mod, dep))
            if _within(mod, ADAPTERS) and _within(dep, ABOVE_ADAPTERS):
                found.append(("adapters import no layer above them", mod, dep))
            if (_within(mod, BELOW_CONTROLLER) and _within(dep, CONTROLLER)
                    and not _within(dep, PURE)):
                found.append(("config, store and fleet import no controller package", mod, dep))
            if _within(dep, CLI) and not _within(mod, CLI_USERS):
                found.append(("library code never imports cli/", mod, dep))
    return sorted(found)


def test_package_layers_import_downwards():
    assert layer_violations(_package_graph()) == []


# The arrows that ran the wrong way before the shared types moved down (issue "The house by
# role"): each must be reported by the rule that forbids it.
WRONG_ARROWS = [
    ("pure code imports no adapter", "slurmguard.checks.gpu", "slurmguard.adapters.nvml"),
    ("adapters import no layer above them", "slurmguard.adapters.kmsg", "slurmguard.checks.base"),
    ("adapters import no layer above them", "slurmguard.adapters.kmsg", "slurmguard.checks.xid"),
    ("adapters import no layer above them", "slurmguard.adapters.fs", "slurmguard.checks.base"),
    ("adapters import no layer above them", "slurmguard.adapters.host", "slurmguard.checks.host"),
    ("adapters import no layer above them", "slurmguard.adapters.sysfs", "slurmguard.checks.base"),
    ("adapters import no layer above them", "slurmguard.adapters.k8s", "slurmguard.reconcile.views"),
    ("library code never imports cli/", "slurmguard.store.api", "slurmguard.cli._common"),
    ("library code never imports cli/", "slurmguard.node.hooks", "slurmguard.cli"),
    ("library code never imports cli/", "slurmguard.goodput.report", "slurmguard.cli._common"),
    ("library code never imports cli/", "slurmguard.install.plan", "slurmguard.cli"),
    # Issue "Each node speaks only for itself": the [repair] section and the burn-in value
    # moved down (policy/repair_params.py, sources/burnin.py).
    ("config, store and fleet import no controller package", "slurmguard.config",
     "slurmguard.repair.params"),
    ("config, store and fleet import no controller package", "slurmguard.fleet.replay",
     "slurmguard.repair.params"),
    ("config, store and fleet import no controller package", "slurmguard.store.burnin",
     "slurmguard.burnin.values"),
]


@pytest.mark.parametrize("rule,importer,imported", WRONG_ARROWS)
def test_layer_rules_report_a_wrong_arrow(rule: str, importer: str, imported: str):
    graph = {importer: {imported, "slurmguard.contract"}, imported: set()}
    assert layer_violations(graph) == [(rule, importer, imported)]


def test_layer_rules_pass_downward_arrows():
    graph = {"slurmguard.checks.gpu": {"slurmguard.sources.nvml", "slurmguard.contract"},
             "slurmguard.adapters.kmsg": {"slurmguard.sources.xidline", "slurmguard.proc"},
             "slurmguard.node.runner": {"slurmguard.adapters.nvml", "slurmguard.checks"},
             "slurmguard.entry": {"slurmguard.cli"},
             "slurmguard.__main__": {"slurmguard.cli", "slurmguard.cli.mangen"},
             "slurmguard.goodput.report": {"slurmguard.output"},
             "slurmguard.config": {"slurmguard.policy.repair_params"},
             "slurmguard.store.burnin": {"slurmguard.sources.burnin"},
             "slurmguard.store.goodput": {"slurmguard.goodput.account"}}
    assert layer_violations(graph) == []
