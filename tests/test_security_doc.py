"""docs/security.md's threat model: every row names at least one test, and every test it
names exists (a renamed or deleted test fails here, not silently in the doc)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "security.md"
REF = re.compile(r"`(test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)")


def _rows() -> list[str]:
    text = DOC.read_text()
    part = text.split("### The threat model", 1)[1].split("\n### ", 1)[0]
    lines = [x for x in part.splitlines() if x.startswith("| ") and not x.startswith("| who ")]
    return [x for x in lines if not set(x) <= set("|- ")]


def _tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_threat_row_names_a_test_that_exists() -> None:
    rows = _rows()
    assert len(rows) >= 5, rows
    for row in rows:
        refs = REF.findall(row)
        assert refs, f"no test named in: {row[:80]}"
        for file, name in refs:
            path = REPO / "tests" / file
            assert path.exists(), f"{file} (named in the threat model) does not exist"
            assert name in _tests(path), f"{file}::{name} (named in the threat model) is no test"
