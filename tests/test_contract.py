"""What slurmguard owns has one definition (slurmguard/contract.py), and the package uses it.

The `slurmguard:` prefix decides what slurmguard may undrain, so a second spelling of it (a
literal `"slurmguard: lemon: ..."` somewhere) is a second definition waiting to drift: this
test reads every string in the package (docstrings aside) and fails on one. Likewise the
Kubernetes marks (taint, cordon annotation, condition: what the reconciler may remove).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from support.helpers import REPO

from slurmguard import contract
from slurmguard.contract import (
    HEALTHS,
    REASON_MAX,
    REASON_PREFIX,
    Health,
    format_reason,
    is_ours,
    reason_source,
    reason_text,
)

PACKAGE = REPO / "slurmguard"
# `slurmguard: <word>: ...` is the reason form; these are messages on stderr, not reasons.
_REASON_FORM = re.compile(r"^slurmguard: ?(?!error\b|warning\b|internal error\b)[a-z0-9-]+: ")


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_second_spelling_of_the_reason_prefix() -> None:
    found = [f"{p.relative_to(REPO)}:{line}: {text[:40]!r}"
             for p in sorted(PACKAGE.rglob("*.py")) if p.name != "contract.py"
             for line, text in _strings(p) if _REASON_FORM.match(text) or text == REASON_PREFIX]
    assert found == [], "spell the prefix as slurmguard.contract.REASON_PREFIX / format_reason"


def test_the_scan_finds_a_literal_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('"""slurmguard: doc: fine"""\nR = "slurmguard: lemon: flagged"\n'
                   'E = "slurmguard: error: not a reason"\n')
    assert [t for _, t in _strings(bad) if _REASON_FORM.match(t)] == ["slurmguard: lemon: flagged"]


# The owned Kubernetes marks, as whole literals (prose that names them is fine).
_MARKS = {contract.TAINT_KEY, contract.CORDONED_BY, contract.REASON_ANNOTATION,
          contract.MARKED_AT, contract.CONDITION}


def test_no_second_spelling_of_the_kubernetes_marks() -> None:
    found = [f"{p.relative_to(REPO)}:{line}: {text!r}"
             for p in sorted(PACKAGE.rglob("*.py")) if p.name != "contract.py"
             for line, text in _strings(p) if text in _MARKS]
    assert found == [], "spell the marks as slurmguard.contract.TAINT_KEY, CORDONED_BY, ..."


def test_the_scan_finds_a_literal_mark(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('"""Taints slurmguard.io/unhealthy."""\nT = "slurmguard.io/unhealthy"\n')
    assert [t for _, t in _strings(bad) if t in _MARKS] == ["slurmguard.io/unhealthy"]


def test_mark_time_is_rfc3339_utc_whole_seconds() -> None:
    assert contract.rfc3339(1_800_000_000.9) == "2027-01-15T08:00:00Z"


def test_health_values_are_the_stored_strings() -> None:
    assert HEALTHS == ("healthy", "degraded", "unhealthy", "unsupported", "error")
    assert [h.value for h in Health] == list(HEALTHS)


def test_every_user_takes_the_health_values_from_the_contract() -> None:
    from slurmguard.metrics import textfile
    from slurmguard.policy import types
    from slurmguard.store import records
    assert textfile.HEALTHS is HEALTHS and records.HEALTHS is HEALTHS
    assert (types.HEALTHY, types.DEGRADED, types.UNHEALTHY, types.UNSUPPORTED, types.ERROR) == HEALTHS


def test_reason_parsing_table() -> None:
    assert format_reason("gpu-xid", "Xid 79 on GPU 3") == "slurmguard: gpu-xid: Xid 79 on GPU 3"
    assert reason_source("slurmguard: gpu-xid: GPU 2") == "gpu-xid"
    assert reason_source("slurmguard:fs-mount: x") == "fs-mount"
    assert reason_source("Prolog error") is None
    assert reason_source("slurmguard: no colon after") is None
    assert reason_source(None) is None
    assert is_ours("slurmguard: k8s: NotReady") and not is_ours("admin: slurmguard: x")
    assert not is_ours("") and not is_ours(None)
    assert reason_text("slurmguard: lemon: 3 failures") == "lemon: 3 failures"
    assert reason_text("bad psu") == "bad psu"


def test_record_fields_are_what_make_record_writes() -> None:
    from slurmguard.node.record import make_record
    rec = make_record("n1", "prolog", [], "pass", "")
    assert tuple(rec) == contract.RECORD_FIELDS


@given(st.text(max_size=30), st.text(max_size=400))
def test_format_reason_is_ours_one_line_and_bounded(source: str, text: str) -> None:
    r = format_reason(source, text)
    assert is_ours(r) and len(r) <= REASON_MAX and "\n" not in r
    assert r.isprintable()
