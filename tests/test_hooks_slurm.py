"""The node hooks end to end on a real Slurm cluster: 4 nodes, 8 stand-in GPUs each, the real
prolog/epilog/healthcheck commands wired into slurm.conf.

- XID 79 on GPU 2 of n3: the prolog drains n3 with `slurmguard: gpu-xid: ...`, and a
  `--requeue` job that Slurm first placed on n3 completes on another node by itself.
- After the fault is cleared (a "reboot": new boot id, empty kernel log), `slurmguard
  healthcheck` on n3 undrains it; an admin's drain with another reason is left alone.
- A healthy cluster runs 50 jobs with the prolog and epilog on: zero drains.
- A crashing check, a missing NVML library, or an unreadable config never drains a node.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from fakehw.kmsg import inject_xid, write_gpu_tree
from fakehw.nvml import build_fake_nvml, default_config, write_config
from support.helpers import REPO, sg_argv, sg_env
from support.slurmcluster import write_hook_script
from support.wait import wait_for

pytestmark = pytest.mark.slurm
NODES = ["n1", "n2", "n3", "n4"]
GPU2_PCI = "0000:3a:00.0"


class Fleet:
    """Per-node simulated hardware (NVML json, kernel log, boot id, state) + the config."""

    def __init__(self, root: Path, site_checks: bool = False) -> None:
        self.root = root
        self.libdir = build_fake_nvml(root.parent / "fakenvml")
        self.nvml_dir = root / "nvml"
        self.nvml_dir.mkdir(parents=True)
        self.gpus = write_gpu_tree(root / "gpus")
        for n in NODES:
            write_config(self.nvml_dir / f"{n}.json", default_config(8))
            self.reboot(n)
        groups = "\n".join(
            f"""
[[group]]
nodes = "{n}"
hooks.state_dir = "{root}/state/{n}"
checks.xid.file = "{root}/{n}.kmsg"
checks.xid.boot_id_path = "{root}/{n}.boot_id"
""" for n in NODES)
        self.config = root / "slurmguard.toml"
        self.config.write_text(f"""
[hooks]
budget = 15.0
log_file = "{root}/hooks.log"
healthcheck = ["gpu-count", "gpu-lost", "gpu-ecc", "gpu-xid", "fs-mount", "host-cpus"]
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
nvidia_proc_root = "{self.gpus}"
{'[checks]' + chr(10) + 'site_modules = ["support.faultsite"]' if site_checks else ''}
{groups}
""")

    def reboot(self, node: str) -> None:
        """What a reboot does to what the checks read: a new boot id and an empty kernel log."""
        (self.root / f"{node}.boot_id").write_text(str(uuid.uuid4()) + "\n")
        (self.root / f"{node}.kmsg").write_text("")

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}",
            "SLURMGUARD_CONFIG": str(self.config),
            "LD_LIBRARY_PATH": str(self.libdir),
            "FAKE_NVML_CONFIG": str(self.nvml_dir),
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        }
        env.update(extra)
        return env

    def hook(self, name: str, **extra: str) -> str:
        return write_hook_script(self.root / f"hook-{name}", sg_argv(name), self.env(**extra))


def drained_nodes(cluster) -> dict[str, str]:
    out = {}
    for n in cluster.nodes:
        info = cluster.node(n)
        if info.drained:
            out[n] = info.reason
    return out


def test_xid79_drains_n3_and_job_completes_elsewhere(slurm_cluster_factory, tmp_path):
    fleet = Fleet(tmp_path / "fleet")
    # Without the requeue watcher (docs/requeue.md) a requeued job waits cred_expire to be
    # eligible again (EligibleTime, testbed.md section 3): 120 s by default, 10 s here.
    c = slurm_cluster_factory(nodes=4, prolog=fleet.hook("prolog"), epilog=fleet.hook("epilog"),
                              extra_conf=["AuthInfo=cred_expire=10"])
    # Make n3 the scheduler's first choice, so the job really meets the bad node.
    for n in NODES:
        c.run("scontrol", "update", f"nodename={n}", f"weight={1 if n == 'n3' else 10}")
    inject_xid(tmp_path / "fleet" / "n3.kmsg", GPU2_PCI, 79, "GPU has fallen off the bus.")

    jid = c.sbatch("#!/bin/sh\necho ran on $SLURMD_NODENAME\n", "-N1", "--requeue",
                   f"--output={tmp_path}/job-%j.out")
    job = c.wait_job(jid, timeout=300)
    info = c.node("n3")
    assert info.drained, info
    assert info.reason.startswith("slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79"), info.reason
    out = (tmp_path / f"job-{jid}.out").read_text()
    assert "ran on n3" not in out and "ran on n" in out
    assert job.get("Restarts") == "1", job
    assert drained_nodes(c) == {"n3": info.reason}

    # An admin drains n1 by hand for maintenance: slurmguard must never clear it.
    c.run("scontrol", "update", "nodename=n1", "state=drain", "reason=maintenance: swap PSU")

    # Fault still there: the healthcheck keeps n3 drained (the Xid is sticky for this boot).
    hc = subprocess.run(sg_argv("healthcheck"), env=sg_env(**fleet.env(SLURMD_NODENAME="n3"),
                                                            SLURM_CONF=str(c.conf_path)),
                        capture_output=True, text=True, timeout=60)
    assert hc.returncode == 1, hc.stdout + hc.stderr
    assert c.node("n3").drained

    # The node is rebooted (new boot id, clean kernel log): the healthcheck undrains it.
    fleet.reboot("n3")
    hc = subprocess.run(sg_argv("healthcheck", "--json"),
                        env=sg_env(**fleet.env(SLURMD_NODENAME="n3"), SLURM_CONF=str(c.conf_path)),
                        capture_output=True, text=True, timeout=60)
    assert hc.returncode == 0, hc.stdout + hc.stderr
    assert json.loads(hc.stdout)["applied"] == "undrained"
    assert not c.node("n3").drained
    for n in ("n1", "n2", "n4"):
        subprocess.run(sg_argv("healthcheck"), env=sg_env(**fleet.env(SLURMD_NODENAME=n),
                                                          SLURM_CONF=str(c.conf_path)),
                       capture_output=True, text=True, timeout=60)
    n1 = c.node("n1")
    assert n1.drained and n1.reason == "maintenance: swap PSU"


def test_healthy_cluster_runs_50_jobs_without_a_drain(slurm_cluster_factory, tmp_path):
    fleet = Fleet(tmp_path / "fleet")
    c = slurm_cluster_factory(nodes=4, prolog=fleet.hook("prolog"), epilog=fleet.hook("epilog"))
    ids = [c.sbatch("#!/bin/sh\ntrue\n", "-N1", "--requeue", "--output=/dev/null")
           for _ in range(50)]
    t0 = time.monotonic()
    for jid in ids:
        job = c.wait_job(jid, timeout=300)
        assert job["JobState"] == "COMPLETED", job
        assert job.get("Restarts") == "0", job
    assert drained_nodes(c) == {}
    log = (tmp_path / "fleet" / "hooks.log").read_text()
    assert log.count("prolog node=") >= 50 and log.count("epilog node=") >= 50
    assert "drain:" not in log
    print(f"50 jobs with prolog+epilog in {time.monotonic() - t0:.1f}s")


def test_checker_faults_never_drain(slurm_cluster_factory, tmp_path):
    """A crashing check, a missing NVML library, an unreadable config: jobs run, no drain."""
    fleet = Fleet(tmp_path / "fleet", site_checks=True)
    bad_cfg = tmp_path / "bad.toml"
    bad_cfg.write_text("[hooks\nbudget = ")
    # n1: a check that raises; n2: no NVML library; n3: unreadable config; n4: hung source.
    script = tmp_path / "prolog-dispatch"
    argv = " ".join(sg_argv("prolog"))
    env = fleet.env()
    exports = "\n".join(f"export {k}='{v}'" for k, v in env.items())
    script.write_text(f"""#!/bin/sh
{exports}
case "$SLURMD_NODENAME" in
  n1) export SLURMGUARD_CONFIG={tmp_path}/crash.toml ;;
  n2) export LD_LIBRARY_PATH=/nonexistent ;;
  n3) export SLURMGUARD_CONFIG={bad_cfg} ;;
  n4) export SLURMGUARD_CONFIG={tmp_path}/hang.toml ;;
esac
exec {argv}
""")
    script.chmod(0o755)
    base = fleet.config.read_text()
    (tmp_path / "crash.toml").write_text(base.replace(
        "[checks.gpu]", 'prolog = ["gpu-count", "fault-check-raises", "fault-gather-raises"]\n[checks.gpu]', 1))
    (tmp_path / "hang.toml").write_text(base.replace(
        "budget = 15.0", 'budget = 3.0\nprolog = ["fault-hang", "gpu-count"]', 1))
    c = slurm_cluster_factory(nodes=4, prolog=str(script))
    ids = {n: c.sbatch("#!/bin/sh\ntrue\n", "-w", n, "--output=/dev/null") for n in NODES}
    for n, jid in ids.items():
        job = c.wait_job(jid, timeout=120)
        assert job["JobState"] == "COMPLETED", (n, job)
    assert drained_nodes(c) == {}
    log = (tmp_path / "fleet" / "hooks.log").read_text()
    assert "node=n1 checker-error" in log or "node=n1 checker error" in log, log


def test_an_epilog_that_drains_keeps_its_reason(slurm_cluster_factory, tmp_path):
    """A fault that appears while a job runs is found by the job's epilog, which drains the
    node and exits 1: Slurm 22.05 keeps the reason the epilog set (as it does the prolog's,
    testbed.md section 3), so slurmguard's healthcheck can return the node once the fault is
    gone. (A 512-node fleet day showed 41 nodes reading "Epilog error", which slurmguard may
    not clear: there the epilog's own drain had not taken, docs/fleet-day.md.)"""
    fleet = Fleet(tmp_path / "fleet")
    c = slurm_cluster_factory(nodes=4, epilog=fleet.hook("epilog"))
    started = tmp_path / "started"
    jid = c.sbatch(f"#!/bin/sh\ntouch {started}\nsleep 4\n", "-N1", "-w", "n2",
                   f"--output={tmp_path}/job-%j.out")
    wait_for(started.exists, 60, interval=0.2, what="the job to start")
    inject_xid(tmp_path / "fleet" / "n2.kmsg", GPU2_PCI, 79, "GPU has fallen off the bus.")
    c.wait_job(jid, timeout=120)
    info = c.wait_node("n2", lambda i: i.drained, timeout=60, what="n2 drained")
    time.sleep(3)  # slurmctld's own drain on a non-zero Epilog would have landed by now
    info = c.node("n2")
    assert info.drained and info.reason.startswith("slurmguard: gpu-xid: GPU 2"), info.reason
    fleet.reboot("n2")
    hc = subprocess.run(sg_argv("healthcheck", "--json"),
                        env=sg_env(**fleet.env(SLURMD_NODENAME="n2"), SLURM_CONF=str(c.conf_path)),
                        capture_output=True, text=True, timeout=60)
    assert json.loads(hc.stdout)["applied"] == "undrained", hc.stdout + hc.stderr
    assert not c.node("n2").drained
