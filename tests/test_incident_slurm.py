"""`slurmguard incident` on a real Slurm cluster: a 2-node training job under `slurmguard run`
(tests/train_job.py), an Xid 79 in one node's kernel log, that node's healthcheck drains it
through serve's guard, the job's wrapper is told, checkpoints now, is requeued without the
node and resumes elsewhere; then `goodput --job` accounts it and `incident list|show` tell the
story: one incident, cause gpu-xid:79, the drain by slurmguard after the failing run, and a lane
for the job with its notice, its steps to redo and where it ran again."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from fakehw.kmsg import DEFAULT_GPUS, inject_xid, write_gpu_tree
from support.drain_notice import Job, Setup, sg
from support.helpers import REPO, run_sg, sg_env
from support.wait import wait_for

pytestmark = pytest.mark.slurm
STEPS, EVERY = 60, 20


def xid_setup(factory: Any, tmp: Path, accounting: Any) -> tuple[Setup, Path]:
    hw = tmp / "hw"
    gpus = write_gpu_tree(hw / "gpus")
    kmsg, boot = hw / "kmsg", hw / "boot_id"
    kmsg.write_text("")
    boot.write_text(str(uuid.uuid4()) + "\n")
    s = Setup(factory, tmp, policy=True, accounting=accounting, hooks='healthcheck = ["gpu-xid"]', extra=(
        f'[checks.gpu]\nexpected_count = 8\n'
        f'[checks.xid]\nsource = "file"\nfile = "{kmsg}"\nboot_id_path = "{boot}"\n'
        f'nvidia_proc_root = "{gpus}"\n'))
    return s, kmsg


def healthcheck(s: Setup, node: str) -> Any:
    return run_sg("healthcheck", env=sg_env(
        SLURMGUARD_CONFIG=str(s.cfg), SLURM_CONF=str(s.c.conf_path), SLURMD_NODENAME=node,
        PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}"))


def test_an_xid_drain_under_a_job_is_one_incident_with_its_job_lane(
        slurm_cluster_factory: Any, slurmdbd: Any, tmp_path: Path) -> None:
    s, kmsg = xid_setup(slurm_cluster_factory, tmp_path, slurmdbd)
    try:
        job = Job(s, "job", steps=STEPS, every=EVERY)
        job.submit()
        job.wait_steps(EVERY + 4)  # past the first periodic checkpoint
        victim = job.victim()
        inject_xid(kmsg, DEFAULT_GPUS[3], 79, "GPU has fallen off the bus.")
        t_check = time.time()
        p = healthcheck(s, victim)
        assert p.returncode == 1, (p.stdout, p.stderr)  # unhealthy: drained
        assert s.c.node(victim).reason.startswith("slurmguard: gpu-xid: GPU 3"), s.c.node(victim)
        job.finish()
    finally:
        s.stop()
    first, second = job.runs()
    assert first["ended_by_notice"]["nodes"] == [victim] and second["verdict"] == "success"
    # sacct answers for real once slurmdbd has the final record; `incident list --collect`
    # accounts the job first (as `goodput --collect`: sacct + runs.jsonl + store).
    wait_for(lambda: any(a.state == "COMPLETED" and a.end for a in s.c.cli().accounting(
        [job.jid])), 60, interval=0.5, what="sacct to show the job ended")
    r = sg(s, "incident", "list", "--since", "1h", "--collect", "--json")
    assert r.returncode == 0, r.stderr
    assert "incident: accounted 1 job(s) newly ended" in r.stderr
    doc = json.loads(r.stdout)
    r = sg(s, "goodput", "--job", job.jid, "--json")  # the same breakdown, to compare with
    assert r.returncode == 0, r.stderr
    gp = json.loads(r.stdout)
    assert gp["unknown"] == [] and len(gp["runs"]) == 2, gp

    [inc] = doc["incidents"]
    assert (inc["cause"], inc["nodes"], inc["drained_by"], inc["jobs"]) == (
        "gpu-xid:79", [victim], "slurmguard", [job.jid])  # serve's cause: the check and Xid
    assert t_check - 5 <= inc["first_signal"]["at"] <= inc["drained_at"] <= time.time()
    # The first signal is the Xid line's kernel time, which the healthcheck read just after.
    assert inc["first_signal"]["source"] == "kernel log (gpu-xid result)", inc
    assert inc["first_signal"]["what"].startswith("Xid 79 in the kernel log") and inc["outcome"] == "out"
    assert doc["goodput"]["jobs"] == 1
    assert doc["goodput"]["explained_gpu_hours"] <= doc["goodput"]["badput_gpu_hours"] + \
        doc["goodput"]["tolerance_gpu_hours"]

    png = tmp_path / "incident.png"
    r = sg(s, "incident", "show", inc["id"], "--json", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    show = json.loads(r.stdout)
    [hit] = show["hits"]
    run0, run1 = gp["runs"]
    # The job's figures are goodput's: the steps to redo, the seconds of each part.
    assert hit["steps_redone"] == gp["infra"]["steps_redone"] == first["steps_to_redo"]
    assert hit["seconds"]["redone"] == pytest.approx(run0["parts"]["lost_work"], abs=1e-3)
    assert hit["seconds"]["detect"] == pytest.approx(run0["parts"]["drained_node"], abs=1e-3)
    assert hit["seconds"]["waiting"] == pytest.approx(
        run1["start"] - run0["end"] + run1["parts"]["restart"], abs=1e-3)
    assert victim not in hit["next_nodes"] and hit["next_start"] == run1["start"]
    lanes = {st["lane"] for st in show["timeline"]}
    assert lanes == {"node", f"job {job.jid}"}
    whats = [st["what"] for st in show["timeline"] if st["lane"] == f"job {job.jid}"]
    assert any(w.startswith("drain notice arrived") for w in whats), whats
    assert any(w.startswith("checkpoint-now save") for w in whats), whats
    assert any(w.startswith("ran again on") for w in whats), whats
    node = [st["what"] for st in show["timeline"] if st["lane"] == "node"]
    assert node[0].startswith("first bad signal") and node[1].startswith(
        "drained by slurmguard: slurmguard: gpu-xid: GPU 3"), node
    if "--plot needs matplotlib" not in r.stderr:
        assert png.read_bytes()[:4] == b"\x89PNG"
    r = sg(s, "incident", "show", inc["id"])
    print("\n" + r.stdout)
    assert f"incident {inc['id']}: gpu-xid:79 on {victim}" in r.stdout
