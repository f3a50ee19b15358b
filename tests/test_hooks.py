"""The hook commands as real subprocesses: exit-code contract, budgets, checker faults.

Draining against a real Slurm is covered in test_hooks_slurm.py; here Slurm is absent on
purpose (scontrol points nowhere) to show that the verdict does not depend on it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.helpers import REPO, run_sg, sg_env

HEAVY = ("sqlalchemy", "kubernetes", "paramiko", "alembic", "psycopg", "tabulate")


def write_cfg(tmp_path: Path, checks: list[str], extra: str = "") -> str:
    p = tmp_path / "sg.toml"
    names = ", ".join(f'"{c}"' for c in checks)
    p.write_text(f"""
[slurm]
scontrol = "{tmp_path}/no-scontrol"
[hooks]
state_dir = "{tmp_path}/state"
check_timeout = 1.0
budget = 4.0
log_file = "{tmp_path}/hooks.log"
prolog = [{names}]
epilog = [{names}]
healthcheck = [{names}]
check = [{names}]
{extra}
[checks]
site_modules = ["support.faultsite"]
""")
    return str(p)


def env_for(cfg: str, **extra: str) -> dict[str, str]:
    env = sg_env(SLURMGUARD_CONFIG=cfg, SLURMD_NODENAME="n7", **extra)
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(REPO / "tests")
    return env


def test_prolog_node_fault_without_slurm_exits_0_verdict_kept(tmp_path):
    cfg = write_cfg(tmp_path, ["fault-value"])
    p = run_sg("prolog", "--json", env=env_for(cfg, FAULT_VALUE="bad"))
    # No Slurm here: the drain is tried and not made, so exit 0 (a non-zero prolog would make
    # Slurm drain the node itself, past the guard); the verdict is kept in the record.
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["node"] == "n7" and rec["hook"] == "prolog"
    assert rec["decision"] == {"action": "drain", "reason": "slurmguard: fault-value: injected node fault"}
    assert rec["applied"].startswith("drain failed")
    assert "drain: slurmguard: fault-value" in (tmp_path / "hooks.log").read_text()


# Stand-ins for Slurm's commands as a slurmctld too busy to answer leaves them: the one-node
# read fails as sinfo prints it, or the drain's `scontrol update` hangs past slurm.timeout.
_SINFO_TIMED_OUT = ("#!/bin/sh\necho 'slurm_load_node error: Socket timed out on send/recv "
                    "operation' >&2\nexit 1\n")
_SINFO_IDLE = "#!/bin/sh\necho 'n7|idle|Unknown|Unknown|(null)|gpu|(null)|(null)|none'\n"
_SCONTROL_HANGS = "#!/bin/sh\necho \"$@\" >>{log}\nexec sleep 30\n"
_SCONTROL_LOGS = "#!/bin/sh\necho \"$@\" >>{log}\n"


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
@pytest.mark.parametrize("sinfo,scontrol,tried", [
    (_SINFO_TIMED_OUT, _SCONTROL_LOGS, False),  # the node unreadable: nothing asked or tried
    (_SINFO_IDLE, _SCONTROL_HANGS, True),       # the drain itself timed out
], ids=["read-timed-out", "drain-timed-out"])
def test_a_drain_not_made_exits_0_so_slurm_does_not_drain_past_the_guard(
        tmp_path, hook, sinfo, scontrol, tried):
    log = tmp_path / "scontrol.log"
    for name, text in (("sinfo", sinfo), ("scontrol", scontrol.format(log=log))):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    cfg = write_cfg(tmp_path, ["fault-value"])
    text = Path(cfg).read_text().replace(
        f'scontrol = "{tmp_path}/no-scontrol"',
        f'scontrol = "{tmp_path}/scontrol"\nsinfo = "{tmp_path}/sinfo"\ntimeout = 1.0')
    Path(cfg).write_text(text)
    p = run_sg(hook, "--json", env=env_for(cfg, FAULT_VALUE="bad"))
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["decision"]["action"] == "drain"
    assert rec["applied"].startswith("drain failed: ")
    updates = log.read_text() if log.exists() else ""
    assert ("state=drain" in updates) == tried


@pytest.mark.parametrize("check", ["fault-hang", "fault-gather-raises", "fault-check-raises",
                                   "fault-unsupported"])
def test_checker_faults_never_fail_the_prolog(tmp_path, check):
    cfg = write_cfg(tmp_path, [check])
    p = run_sg("prolog", "--json", env=env_for(cfg))
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["decision"]["action"] in ("checker-error", "pass")
    assert rec["applied"] == "none"


def test_check_command_reports_checker_error_with_code_8(tmp_path):
    cfg = write_cfg(tmp_path, ["fault-check-raises"])
    p = run_sg("check", env=env_for(cfg))
    assert p.returncode == 8
    assert "fault-check-raises" in p.stdout and "error" in p.stdout


def test_hung_source_stays_inside_budget(tmp_path):
    cfg = write_cfg(tmp_path, ["fault-hang", "fault-value"])
    t0 = time.monotonic()
    p = run_sg("prolog", env=env_for(cfg))
    elapsed = time.monotonic() - t0
    assert p.returncode == 0
    assert elapsed < 4.0, f"prolog took {elapsed:.2f}s with a 4s budget"


def test_unreadable_config_never_blocks_a_job(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[hooks]\nbudget = "soon"\n')
    env = env_for(str(bad))
    p = run_sg("prolog", env=env)
    assert p.returncode == 0
    assert 'hooks.budget: expected a number, got "soon"' in p.stderr
    c = run_sg("check", env=env)
    assert c.returncode == 3
    assert c.stderr.strip().splitlines() == [
        f'slurmguard: error: hooks.budget: expected a number, got "soon" (in {bad})']


def test_node_identity_prefers_slurmd_nodename(tmp_path):
    cfg = write_cfg(tmp_path, ["fault-value"])
    p = run_sg("check", "--node", "other", "--json", env=env_for(cfg))
    assert json.loads(p.stdout)["node"] == "n7"
    env = env_for(cfg)
    del env["SLURMD_NODENAME"]
    p = run_sg("check", "--node", "other", "--json", env=env)
    assert json.loads(p.stdout)["node"] == "other"


def test_hook_path_imports_no_heavy_module(tmp_path):
    """`slurmguard prolog` with the default checks must not load heavy modules."""
    env = sg_env(SLURMD_NODENAME="n1", SLURMGUARD_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text(f'[hooks]\nstate_dir = "{tmp_path}/s"\n')
    p = run_sg("-v", "prolog", env=env | {"PYTHONPROFILEIMPORTTIME": "1"})
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert "slurmguard.node.hooks" in imported, p.stderr[-2000:]
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert heavy == [], f"heavy modules on the hook path: {heavy}"


def test_hook_fast_path_skips_click_but_help_still_works(tmp_path):
    env = sg_env(SLURMD_NODENAME="n1", SLURMGUARD_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text(f'[hooks]\nstate_dir = "{tmp_path}/s"\nprolog = []\n')
    p = run_sg("prolog", "--json", env=env | {"PYTHONPROFILEIMPORTTIME": "1"})
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert p.returncode == 0 and json.loads(p.stdout)["hook"] == "prolog"
    assert "click" not in imported
    h = run_sg("prolog", "--help", env=env)
    assert h.returncode == 0 and "Example:" in h.stdout
    bad = run_sg("prolog", "--bogus", env=env)
    assert bad.returncode == 2 and "No such option" in bad.stderr


def test_forget_drops_saved_state(tmp_path):
    cfg = write_cfg(tmp_path, ["fault-counter"])
    env = env_for(cfg)
    for expected in (1, 2):
        p = run_sg("check", "--json", env=env)
        assert json.loads(p.stdout)["results"][0]["details"]["runs"] == expected
    p = run_sg("check", "--forget", "fault-counter", "--json", env=env)
    assert "forgot saved state of: fault-counter" in p.stderr
    assert json.loads(p.stdout)["results"][0]["details"]["runs"] == 1
    bad = run_sg("check", "--forget", "nope", env=env)
    assert bad.returncode == 3 and "--forget: unknown check 'nope'" in bad.stderr


def test_check_and_dry_run_never_try_to_drain(tmp_path):
    cfg = write_cfg(tmp_path, ["fault-value"])
    env = env_for(cfg, FAULT_VALUE="bad")
    p = run_sg("check", "--json", env=env)
    assert p.returncode == 1
    assert json.loads(p.stdout)["applied"] == "none (check only)"
    d = run_sg("prolog", "--dry-run", "--json", env=env)
    assert d.returncode == 1
    assert json.loads(d.stdout)["applied"] == "none (dry run)"
