"""The HealthCheckProgram chain beside a site's own (prolog/slurmguard-healthcheck-chain,
docs/install.md "Beside an existing HealthCheckProgram"): the site's program first, then
slurmguard's health check (this checkout's, observing), each with its own exit handling; the
site's runs even when slurmguard cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.helpers import REPO

from slurmguard.install.plan import entry_script


def _install(tmp: Path, defaults: str) -> Path:
    """Both entry scripts as setup installs them, side by side, reading a defaults file."""
    lib = tmp / "lib"
    lib.mkdir()
    (tmp / "default").write_text(defaults)
    for name in ("slurmguard-healthcheck", "slurmguard-healthcheck-chain"):
        p = lib / name
        p.write_bytes(entry_script(name, str(tmp / "default")))
        p.chmod(0o755)
    return lib / "slurmguard-healthcheck-chain"


def _site(tmp: Path, rc: int) -> Path:
    """A site's health check: it appends to the run log and exits ``rc``."""
    p = tmp / "site-check"
    p.write_text(f"#!/bin/sh\necho \"site $*\" >> {tmp}/runs.log\nexit {rc}\n")
    p.chmod(0o755)
    return p


def _slurmguard(tmp: Path) -> Path:
    """This checkout's slurmguard, logging that it ran."""
    p = tmp / "slurmguard"
    p.write_text(f"#!/bin/sh\necho slurmguard >> {tmp}/runs.log\nPYTHONPATH={REPO} "
                 f"exec {sys.executable} -m slurmguard \"$@\"\n")
    p.chmod(0o755)
    return p


def _run(chain: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURMD_NODENAME": "n1"}
    return subprocess.run([str(chain)], env=env, capture_output=True, text=True, timeout=120)


def _config(tmp: Path) -> Path:
    cfg = tmp / "sg.toml"
    cfg.write_text(f'[hooks]\nhealthcheck = ["fs-mount"]\nstate_dir = "{tmp}/state"\n'
                   f'spool_dir = "{tmp}/spool"\n[checks.fs]\nmounts = ["/"]\n'
                   '[policy]\nmode = "observe"\n[slurm]\nscontrol = "/bin/false"\n'
                   'sinfo = "/bin/false"\n')
    return cfg


def test_the_site_check_runs_first_and_its_failure_is_its_own(tmp_path: Path) -> None:
    chain = _install(tmp_path, f"SLURMGUARD={_slurmguard(tmp_path)}\n"
                               f"SLURMGUARD_CONFIG={_config(tmp_path)}\n"
                               f"SLURMGUARD_STATE_DIR={tmp_path}/state\n"
                               f'SLURMGUARD_SITE_HEALTHCHECK="{_site(tmp_path, 1)} -t 30"\n'
                               "SLURMGUARD_AGENT_CLIENT=\n")
    p = _run(chain, tmp_path)
    assert (tmp_path / "runs.log").read_text().splitlines() == ["site -t 30", "slurmguard"]
    assert p.returncode == 1, p.stderr  # the site's failure, said in slurmd's log
    assert f"the site's health check ({tmp_path}/site-check -t 30) exited 1" in p.stderr
    assert "healthcheck" in p.stderr and "ok" in p.stderr  # slurmguard ran and passed


def test_the_site_check_runs_when_slurmguard_cannot(tmp_path: Path) -> None:
    chain = _install(tmp_path, f"SLURMGUARD={tmp_path}/gone\n"
                               f"SLURMGUARD_STATE_DIR={tmp_path}/state\n"
                               f"SLURMGUARD_SITE_HEALTHCHECK={_site(tmp_path, 0)}\n")
    (tmp_path / "state").mkdir()
    p = _run(chain, tmp_path)
    assert (tmp_path / "runs.log").read_text().splitlines() == ["site "]
    assert p.returncode == 0 and "cannot run slurmguard" in p.stderr  # its fail-open, loud
