"""CI's time by module (tests/support/module_times.py): the suite's own plugin adds each
test's setup, call and teardown to its file and ends the run with the slowest modules, in a
real pytest run in a subprocess over tiny test files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.helpers import REPO
from support.module_times import slowest, table


def test_the_slowest_modules_come_first_with_their_share():
    times = {"tests/a.py": 1.0, "tests/b.py": 3.0, "tests/c.py": 1.0}
    assert slowest(times, 2) == [("tests/b.py", 3.0), ("tests/a.py", 1.0)]
    lines = table(times, 6.5, n=2)
    assert lines[0].split() == ["3.0", "s", "60.0", "%", "tests/b.py"]
    assert lines[-1].startswith("     5.0 s  in tests of 3 modules; 6.5 s wall")


def test_a_run_prints_and_writes_its_module_times(tmp_path: Path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_slow.py").write_text(
        "import time\n\nimport pytest\n\n\n@pytest.fixture(scope='module')\ndef once():\n"
        "    time.sleep(0.4)\n\n\ndef test_one(once):\n    pass\n\n\ndef test_two(once):\n"
        "    time.sleep(0.2)\n")
    (tmp_path / "test_fast.py").write_text("def test_quick():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(REPO / "tests"), SLURMGUARD_MODULE_TIMES=str(tmp_path / "t.json"))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "support.module_times",
                        "-p", "no:cacheprovider", "-q"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "slowest modules" in r.stdout
    got = json.loads((tmp_path / "t.json").read_text())
    assert list(got["modules"]) == ["test_fast.py", "test_slow.py"]
    assert got["modules"]["test_slow.py"] >= 0.6  # the module fixture counts where it is paid
    assert got["wall_s"] >= got["modules"]["test_slow.py"]


def test_the_ci_table_merges_the_parts_of_a_run(tmp_path: Path):
    """`.ci/run` runs the suite in parts (the dockerized part beside the rest, tests/scale
    alone) and prints one table over all of them: a module's seconds summed across parts."""
    for name, part in {"main": {"wall_s": 10.0, "modules": {"tests/a.py": 4.0, "tests/b.py": 5.0}},
                       "e2e": {"wall_s": 7.0, "modules": {"tests/e2e/c.py": 6.5}},
                       "scale": {"wall_s": 3.0, "modules": {"tests/a.py": 2.0}}}.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(part))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "support" / "module_times.py"),
                        *sorted(str(p) for p in tmp_path.glob("*.json"))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split()[-1] for ln in lines[:3]] == ["tests/e2e/c.py", "tests/a.py", "tests/b.py"]
    assert lines[1].split()[0] == "6.0"  # 4.0 + 2.0
    assert lines[-1].startswith("    17.5 s  in tests of 3 modules; 20.0 s of the 3 parts' walls")
