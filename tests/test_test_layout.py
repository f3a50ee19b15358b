"""The suite is laid out by capability and scope (docs/testing.md, "Scopes and markers")."""

from __future__ import annotations

import re
from pathlib import Path

from support.helpers import IN_CI, REPO
from support.reliability import LONG

TESTS = REPO / "tests"


def _modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_modules_are_named_by_capability_not_issue():
    named = [str(p.relative_to(REPO)) for p in _modules() if re.search(r"issue_?\d", p.name)]
    assert named == []


# What may sit flat in tests/ besides test modules: the shared fixtures and the training job
# that Slurm runs by path. Harness code (clusters, servers, site modules, helpers) lives in
# tests/support/, so that a listing of tests/ is a listing of what is tested.
FLAT_ALLOWED = {"conftest.py", "train_job.py"}


def test_only_tests_sit_flat_and_harness_code_lives_in_support():
    flat = sorted(p.name for p in TESTS.glob("*.py")
                  if not p.name.startswith("test_") and p.name not in FLAT_ALLOWED)
    assert flat == []
    support = TESTS / "support"
    assert (support / "__init__.py").is_file()
    assert sorted(p.name for p in support.glob("test_*.py")) == []
    assert {"helpers.py", "slurmcluster.py", "pgserver.py", "sgserve.py"} <= {
        p.name for p in support.glob("*.py")}


def test_modules_that_start_a_cluster_themselves_carry_its_marker():
    """Tests that use the cluster fixtures are marked by tests/conftest.py and
    tests/e2e/conftest.py; a module that starts a cluster itself must say so."""
    starts = "slurmcluster.Cluster" + ".start("  # (not spelled out: this file would match)
    unmarked = []
    for p in _modules():
        text = p.read_text(encoding="utf-8")
        if starts in text and not re.search(
                r"^pytestmark = .*pytest\.mark\.slurm", text, re.M):
            unmarked.append(str(p.relative_to(REPO)))
    assert unmarked == []


def test_a_test_using_a_cluster_fixture_gets_the_slurm_marker():
    import importlib.util

    # By path: under pytest, "conftest" in sys.modules may be tests/e2e/conftest.py.
    spec = importlib.util.spec_from_file_location("tests_root_conftest", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)

    class Item:
        fixturenames = ("tmp_path", "slurm_cluster_factory")

        def __init__(self) -> None:
            self.markers: list[str] = []

        def add_marker(self, m) -> None:
            self.markers.append(m.name)

    item = Item()
    conftest.pytest_collection_modifyitems([item])
    assert item.markers == ["slurm"]


def test_hypothesis_draws_the_same_examples_for_the_same_code_under_ci():
    """Under CI=true the profile derandomizes (a landing fails on what changed, not on the
    draw); outside CI, and in the reliability long form, each run explores a fresh seed. And
    no test overrides that with its own ``derandomize``."""
    from hypothesis import settings

    assert settings.default.derandomize is (IN_CI and not LONG), settings.default
    pinned = [p.relative_to(REPO) for p in (REPO / "tests").rglob("*.py")
              if "derandomize=" in p.read_text() and p.name != "conftest.py"
              and p.name != "test_test_layout.py"]
    assert not pinned, pinned
