"""Under CI=true a skip fails the run unless it is on the allow-list (tests/support/noskip.py,
docs/testing.md "No silent skips"): a real pytest run in a subprocess over tiny test files,
with the suite's plugin loaded, once with CI=true and once without."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import REPO
from support.noskip import ALLOWED_SKIPS

FILES = {
    "tests/test_other.py": ("import pytest\n\n\ndef test_passes():\n    pass\n\n\n"
                            "def test_skips():\n    pytest.skip('a daemon is missing')\n"),
    "tests/test_optional.py": ("import pytest\n\npytest.importorskip('no_such_module_sg')\n\n\n"
                               "def test_never():\n    pass\n"),
    "tests/test_param.py": ("import pytest\n\n\n@pytest.mark.skipif(True, reason='not here')\n"
                            "def test_conditional():\n    pass\n"),
    "tests/test_fails.py": ("import pytest\n\n\ndef test_fails():\n    assert False\n\n\n"
                            "def test_skips():\n    pytest.skip('and a skip')\n"),
}


def _tree(tmp: Path) -> Path:
    (tmp / "pytest.ini").write_text("[pytest]\n")  # the root: node ids relative to tmp
    for rel, text in FILES.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    # An allowed skip at the very id the allow-list names.
    nodeid = next(iter(ALLOWED_SKIPS))
    path, name = nodeid.split("::")
    (tmp / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp / path).write_text(f"import pytest\n\n\ndef {name}():\n    pytest.skip('platform')\n")
    return tmp / path


def _pytest(tmp: Path, ci: str, *files: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(REPO / "tests")
    if ci:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "support.noskip",
                           "-p", "no:cacheprovider", "-q", *files], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("file, without_ci", [
    ("tests/test_other.py", 0), ("tests/test_param.py", 0),
    ("tests/test_optional.py", 5),  # a module skipped whole: pytest's own "no tests ran"
])
def test_a_skip_fails_the_run_under_ci_and_not_without(tmp_path: Path, file: str,
                                                       without_ci: int) -> None:
    _tree(tmp_path)
    r = _pytest(tmp_path, "true", file)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "skips under CI=true" in r.stdout and f"SKIPPED {file}" in r.stdout, r.stdout
    r = _pytest(tmp_path, "", file)
    assert r.returncode == without_ci, r.stdout + r.stderr
    assert "skipped" in r.stdout and "skips under CI=true" not in r.stdout


def test_an_allowed_skip_passes_under_ci(tmp_path: Path) -> None:
    allowed = _tree(tmp_path)
    r = _pytest(tmp_path, "true", str(allowed.relative_to(tmp_path)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout and "skips under CI=true" not in r.stdout


def test_a_failing_run_keeps_its_own_exit_status(tmp_path: Path) -> None:
    _tree(tmp_path)
    r = _pytest(tmp_path, "true", "tests/test_fails.py")
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout
    assert "SKIPPED tests/test_fails.py::test_skips" in r.stdout


def test_every_allowed_skip_names_a_test_that_exists_and_is_documented() -> None:
    doc = (REPO / "docs" / "testing.md").read_text()
    assert ALLOWED_SKIPS
    for nodeid, why in ALLOWED_SKIPS.items():
        path, name = nodeid.split("::")
        assert f"def {name}(" in (REPO / path).read_text(), nodeid
        assert why and f"`{nodeid}`" in doc, nodeid
