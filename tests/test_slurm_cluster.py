"""The Slurm adapter against a real slurmctld + slurmd cluster (tests/support/slurmcluster.py).

Proves the ownership rules on real Slurm 22.05: our drain round-trips, an admin's drain and
a DOWN node are left alone, and a Prolog that drains first and then fails keeps our reason
while the job is requeued (not held) under nohold_on_prolog_fail.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from support.helpers import sg_env
from support.slurmcluster import write_hook_script, write_shell_hook
from support.wait import wait_for

from slurmguard.adapters.slurm.commands import format_reason
from slurmguard.errors import InputError

pytestmark = pytest.mark.slurm


def test_cluster_starts_all_idle(slurm_cluster) -> None:
    c = slurm_cluster
    nodes = c.cli().nodes()
    assert [n.name for n in nodes] == ["n1", "n2", "n3", "n4"]
    assert all(n.state == "idle" and not n.flags for n in nodes)
    assert c.cli().ping() is True
    assert c.startup_seconds < 30, c.startup_seconds
    assert {n.name for n in c.cli().nodes_json()} == {"n1", "n2", "n3", "n4"}
    assert c.cli().nodes("n[2-3]")[1].name == "n3"
    with pytest.raises(InputError, match="not known to Slurm"):
        c.cli().node("n9")


def test_drain_undrain_roundtrip(slurm_cluster) -> None:
    cli = slurm_cluster.cli()
    hostile = "slurmguard: gpu-xid: Xid=79\non GPU 3\x1b[31m (bus=0000:3b:00.0) " + "y" * 400
    assert cli.drain("n1", hostile) is True
    n1 = cli.node("n1")
    assert n1.drained and n1.ours and n1.state == "idle"
    assert n1.reason.startswith("slurmguard: gpu-xid: Xid=79 on GPU 3 ")
    assert n1.reason.isprintable() and len(n1.reason) <= 200
    assert cli.drain("n1", format_reason("other", "second")) is False  # first cause kept
    assert cli.node("n1").reason == n1.reason
    assert cli.undrain("n1") is True
    n1 = cli.node("n1")
    assert n1.state == "idle" and not n1.drained and n1.reason == ""
    assert cli.undrain("n1") is False
    # A draining node (job still running) is ours to drain and to undrain too.
    jid = slurm_cluster.sbatch("sleep 300\n", "-w", "n2")
    slurm_cluster.wait_job(jid, {"RUNNING"})
    assert cli.drain("n2", format_reason("gpu-ecc", "3 uncorrectable")) is True
    assert cli.node("n2").draining
    assert cli.undrain("n2") is True
    # UNDRAIN marks the node NOT_RESPONDING and pings it at once; the flag clears on reply.
    n2 = slurm_cluster.wait_node("n2", lambda n: not n.flags, timeout=30, what="flagless")
    assert n2.state == "mixed" and n2.reason == ""


def test_admin_drain_is_left_alone(slurm_cluster) -> None:
    c = slurm_cluster
    c.run("scontrol", "update", "nodename=n2", "state=drain", "reason=maintenance")
    cli = c.cli()
    assert cli.drain("n2", format_reason("gpu-xid", "Xid 79")) is False
    assert cli.undrain("n2") is False
    n2 = cli.node("n2")
    assert n2.drained and n2.reason == "maintenance" and not n2.ours


def test_down_node_is_left_alone(slurm_cluster_factory) -> None:
    c = slurm_cluster_factory(nodes=2, slurmd_timeout=5)
    cli = c.cli()
    assert cli.drain("n2", format_reason("gpu-xid", "Xid 79")) is True
    c.kill_slurmd("n1")
    c.kill_slurmd("n2")
    n1 = c.wait_node("n1", lambda n: n.state == "down", timeout=90, what="down")
    assert n1.down and not n1.drained
    assert cli.drain("n1", format_reason("gpu-xid", "Xid 79")) is False
    assert not cli.node("n1").drained
    n2 = c.wait_node("n2", lambda n: n.state == "down", timeout=90, what="down")
    assert n2.drained and n2.ours  # our drain survives the node going down
    assert cli.undrain("n2") is False  # ... but a DOWN node is Slurm's business
    assert cli.node("n2").state == "down"
    # ReturnToService=2: a restarted slurmd brings n1 back without anyone's help.
    c.start_slurmd("n1")
    c.wait_node("n1", lambda n: n.state == "idle" and not n.flags, timeout=60, what="idle")


def test_prolog_drain_then_fail_requeues_without_hold(slurm_cluster_factory, tmp_path) -> None:
    """testbed.md section 3: our reason stays, the job is requeued, not held."""
    reason = "slurmguard: gpu-count: 7 of 8 GPUs visible"
    prolog = write_shell_hook(tmp_path / "prolog.sh", f"""
if [ "$SLURMD_NODENAME" = n1 ]; then
  /usr/bin/scontrol update nodename=n1 state=drain reason="{reason}"
  exit 1
fi
exit 0""")
    c = slurm_cluster_factory(nodes=2, prolog=prolog)
    cli = c.cli()
    jid = c.sbatch("true\n", "-w", "n1", "--requeue")
    job = wait_for(lambda: (j := cli.job(jid)).restart_count >= 1 and j.state == "PENDING" and j,
                   60, interval=0.3, what=f"job {jid} requeued and pending")
    n1 = cli.node("n1")
    assert n1.drained and n1.reason == reason and n1.ours
    assert not job.held and job.priority and job.requeue
    assert job.eligible_time and job.eligible_time > time.time() + 60  # the ~121 s wait
    assert jid in {j.job_id for j in cli.jobs()}
    # What the requeue watcher does: move it off the bad node and make it eligible now.
    cli.update_job(jid, ReqNodeList="n2", ExcNodeList="n1", EligibleTime="now")
    done = c.wait_job(jid, {"COMPLETED"}, timeout=60)
    assert done["NodeList"] == "n2" and done["ExcNodeList"] == "n1"


def test_hook_wrapper_gets_slurm_environment(slurm_cluster_factory, tmp_path) -> None:
    out = tmp_path / "env.json"
    code = (f"import json, os, slurmguard; json.dump(dict(os.environ), open({str(out)!r}, 'w'))")
    hook = write_hook_script(tmp_path / "prolog", [sys.executable, "-c", code],
                             {"PYTHONPATH": sg_env()["PYTHONPATH"], "SG_MARK": "x y'z"})
    c = slurm_cluster_factory(nodes=1, prolog=hook)
    jid = c.sbatch("true\n")
    c.wait_job(jid)
    env = json.loads(out.read_text())
    assert env["SG_MARK"] == "x y'z" and env["SLURMD_NODENAME"] == "n1"
    assert env["SLURM_JOB_ID"] == jid and env["SLURM_CONF"] == str(c.conf_path)
    assert env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"


def test_requeue_release_and_teardown(slurm_cluster_factory) -> None:
    c = slurm_cluster_factory(nodes=1)
    cli = c.cli()
    jid = c.sbatch("sleep 300\n", "--requeue")
    c.wait_job(jid, {"RUNNING"})
    cli.requeue(jid)
    c.wait_job(jid, {"PENDING"})
    job = cli.job(jid)
    assert job.restart_count == 1 and not job.held
    c.run("scontrol", "hold", jid)
    assert cli.job(jid).held
    cli.release(jid)
    assert not cli.job(jid).held
    cli.update_job(jid, EligibleTime="now")
    c.wait_job(jid, {"RUNNING"})
    pids = [c.slurmd_pid("n1")]
    c.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert c._stray_pids() == []


def test_epilog_and_healthcheck_hooks(slurm_cluster_factory, tmp_path) -> None:
    """What the Epilog and HealthCheckProgram see: which node, and whether node_env reaches them."""
    body = f'env > {tmp_path}/$1-${{SLURMD_NODENAME:-none}}.env\nexit 0'
    epilog = write_shell_hook(tmp_path / "epilog.sh", body.replace("$1", "epilog"))
    health = write_shell_hook(tmp_path / "health.sh", body.replace("$1", "health"))
    c = slurm_cluster_factory(nodes=2, epilog=epilog, health_check_program=health,
                              health_check_interval=5, node_env={"SG_NODE_ENV": "1"})
    jid = c.sbatch("true\n", "-w", "n2")
    c.wait_job(jid)
    wait_for(lambda: (tmp_path / "epilog-n2.env").exists() and (tmp_path / "health-n1.env").exists(),
             30, interval=0.2, what="the epilog's and the health check's environment files")
    epi = dict(line.split("=", 1) for line in (tmp_path / "epilog-n2.env").read_text().splitlines()
               if "=" in line)
    assert epi["SLURM_JOB_ID"] == jid and epi["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert "SG_NODE_ENV" not in epi  # the daemons' environment does not reach Prolog/Epilog
    hc = (tmp_path / "health-n1.env").read_text()
    assert "SLURMD_NODENAME=n1" in hc
