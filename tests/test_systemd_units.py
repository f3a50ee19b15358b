"""Every unit in slurmguard/data/systemd/ (ours and other areas'): `systemd-analyze verify`
clean with @SLURMGUARD@ substituted as setup does, hardened, and installed by a role."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import require

from slurmguard.install.plan import ROLES, data_dir, unit_role

UNITS = sorted(p for p in (data_dir() / "systemd").iterdir() if p.suffix in (".service", ".timer"))
SG = str(Path(sys.executable).parent / "slurmguard")


def substituted(tmp: Path) -> list[Path]:
    out = []
    for unit in UNITS:
        p = tmp / unit.name
        p.write_text(unit.read_text().replace("@SLURMGUARD@", SG).replace("@SERVE_USER@", "root"))
        out.append(p)
    return out


def test_the_contract_units_exist() -> None:
    names = {u.name for u in UNITS}
    assert {"slurmguard-serve.service", "slurmguard-reconcile.service",
            "slurmguard-requeue-watch.service"} <= names
    assert not [p.name for p in (data_dir() / "systemd").iterdir()
                if p.suffix not in (".service", ".timer")], "only unit files live there"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_names_slurmguard_by_token_and_a_role(unit: Path) -> None:
    text = unit.read_text()
    assert unit_role(text) in ROLES
    if unit.suffix == ".service":
        execs = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
        assert execs and all(ln.startswith("ExecStart=@SLURMGUARD@ ") for ln in execs), execs


def test_systemd_analyze_verify_every_unit(tmp_path) -> None:
    tool = shutil.which("systemd-analyze")
    require(tool is not None, "systemd-analyze (package systemd) is not installed")
    files = substituted(tmp_path)
    r = subprocess.run([tool, "verify", "--man=no", *map(str, files)], capture_output=True,
                       text=True, timeout=120)
    # verify prints warnings (unknown keys, bad values) but may still exit 0: both must be clean.
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), r.stdout + r.stderr


def test_verify_catches_a_broken_unit(tmp_path) -> None:
    tool = shutil.which("systemd-analyze")
    require(tool is not None, "systemd-analyze (package systemd) is not installed")
    bad = tmp_path / "slurmguard-bad.service"
    serve = next(u for u in UNITS if u.name == "slurmguard-serve.service")
    bad.write_text(serve.read_text().replace("@SLURMGUARD@", SG).replace("@SERVE_USER@", "root")
                   .replace("ProtectSystem=strict", "ProtectSytem=strict"))
    r = subprocess.run([tool, "verify", "--man=no", str(bad)], capture_output=True, text=True,
                       timeout=60)
    assert "ProtectSytem" in r.stderr


# The controller services; a unit that needs devices (the node agent) sets its own hardening.
HARDENED = [u for u in UNITS if u.name in ("slurmguard-serve.service", "slurmguard-reconcile.service",
                                           "slurmguard-requeue-watch.service")]


@pytest.mark.parametrize("unit", HARDENED, ids=lambda p: p.name)
def test_services_are_hardened(tmp_path, unit: Path) -> None:
    tool = shutil.which("systemd-analyze")
    require(tool is not None, "systemd-analyze (package systemd) is not installed")
    path = tmp_path / unit.name
    path.write_text(unit.read_text().replace("@SLURMGUARD@", SG).replace("@SERVE_USER@", "root"))
    r = subprocess.run([tool, "security", "--offline=yes", "--no-pager", str(path)],
                       capture_output=True, text=True, timeout=60)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    score = float(last.split("level for")[1].split(":")[1].split()[0])
    assert score <= 6.0, f"{unit.name}: exposure {score} (systemd-analyze security): {last}"
