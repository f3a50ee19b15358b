"""The code stays `ruff check` clean (style.md: type hints throughout, ruff clean)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from helpers import REPO, require


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
