"""One Xid table (slurmguard/checks/xid_table.py), and everything that lists Xids derived from
it: the fallback's node-intrinsic causes, the repair ladders a config may name, and the lists
in docs/hooks.md, docs/checks.md and docs/repair.md."""

from __future__ import annotations

import re

import pytest
from support import xid_docs
from support.helpers import REPO, run_sg, sg_env

from slurmguard.checks.xid_table import XID_TABLE, XidClass, classify
from slurmguard.node.fallback import INTRINSIC
from slurmguard.repair.params import DEFAULT_LADDERS, RepairParams, known_cause

DRAIN = {c for c, (k, _) in XID_TABLE.items() if k is XidClass.DRAIN}  # the table's drain class


def test_the_fallback_drains_at_once_exactly_the_xids_the_table_drains() -> None:
    xids = {int(c.partition(":")[2]) for c in INTRINSIC if c.startswith("gpu-xid:")}
    assert xids == DRAIN, (sorted(xids - DRAIN), sorted(DRAIN - xids))
    assert INTRINSIC - {f"gpu-xid:{c}" for c in xids} == {"gpu-lost", "gpu-count", "gpu-ecc",
                                                          "gpu-remap"}
    # The catalog's facts (shared/data/xid-catalog.md): GSP errors drain, a remap event is
    # informational, a contained ECC error is the application's.
    assert {"gpu-xid:119", "gpu-xid:120", "gpu-xid:79", "gpu-xid:48"} <= INTRINSIC
    assert not {"gpu-xid:63", "gpu-xid:94"} & INTRINSIC
    # Every code whose plain line (no message to decode) classifies as drain is intrinsic.
    assert {c for c in XID_TABLE if classify(c, "")[0] is XidClass.DRAIN} <= DRAIN
    from slurmguard.checks.xid_table import DRAIN_XIDS  # what the code derives it from

    assert DRAIN_XIDS == DRAIN


def test_a_ladder_may_name_only_an_xid_that_drains() -> None:
    xid_keys = [c for c in DEFAULT_LADDERS if c.startswith("gpu-xid:")]
    assert xid_keys and all(int(c.partition(":")[2]) in DRAIN for c in xid_keys), xid_keys
    for code in range(1, 200):
        assert known_cause(f"gpu-xid:{code}") == (code in DRAIN), code
    assert known_cause("gpu-xid") and known_cause("gpu-lost")
    # Every default Xid ladder can fire: its cause is one a drain can carry.
    assert RepairParams.from_section({"ladders": dict(DEFAULT_LADDERS)}).ladder("gpu-xid:119")


@pytest.mark.parametrize("code, klass", [(63, "info"), (94, "app"), (999, "unknown")])
def test_config_refuses_a_ladder_for_an_xid_that_never_drains(tmp_path, code: int, klass: str) -> None:
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[repair.ladders]\n"gpu-xid:{code}" = "reset-gpu, reboot, ticket"\n')
    p = run_sg("config", env=sg_env(SLURMGUARD_CONFIG=str(cfg)))
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1, p.stderr
    assert lines[0].startswith("slurmguard: error: repair.ladders: cause 'gpu-xid:"), lines
    assert f"Xid {code} never drains (checks/xid_table.py classes it {klass})" in lines[0]


def test_the_docs_lists_are_generated_from_the_table() -> None:
    stale = xid_docs.stale()
    assert not stale, f"Xid lists stale in {stale}; regenerate with `{xid_docs.REGENERATE}`"
    assert xid_docs.codes_text([46, 48, 57, 58, 59, 61, 62]) == "46, 48, 57-59, 61, 62"


def _expand(cell: str) -> set[int]:
    out: set[int] = set()
    for part in cell.split(","):
        lo, _, hi = part.strip().partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def test_the_classification_table_in_checks_md_is_the_code_table() -> None:
    """docs/checks.md's table groups codes with a reason per group (written by hand); each
    code is in it once, with the class the code gives it."""
    text = (REPO / "docs" / "checks.md").read_text()
    section = text.split("### Xid classification", 1)[1].split("\n#", 1)[0]
    documented: dict[int, str] = {}
    for cell, klass in re.findall(r"^\| ([0-9][0-9, -]*) \| [^|]* \| (\w+|per \w+) \|", section,
                                  re.M):
        for code in _expand(cell):
            assert code not in documented, f"Xid {code} is in docs/checks.md's table twice"
            if klass.startswith("per "):  # decoded from the line (144-150, 154): the table's
                # class is what a line that says nothing more gets
                klass = str(classify(code, "")[0])
            documented[code] = klass
    assert documented == {c: str(k) for c, (k, _) in XID_TABLE.items()}
