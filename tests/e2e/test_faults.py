"""Faults on real (containerized) nodes: a bad GPU, a node lost, hung, or cut off.

What each test shows:
- a GPU fault (NVML: a GPU off the bus; the driver's Xid line is test_version_matrix.py's,
  on every Slurm version) makes the prolog drain the node with a `slurmguard: gpu-...` reason naming the GPU; the
  job runs elsewhere; once the GPU is good again (a reboot: new boot id)
  `slurmguard healthcheck` returns the node;
- a node killed, frozen, or partitioned mid-job is marked DOWN by Slurm, the `--requeue` job
  is requeued and completes on another node, and when the node comes back it returns to
  service by itself (ReturnToService=2) with no leftover job processes, and runs a job.
"""

from __future__ import annotations

import pytest
from dockercluster import DockerCluster, wait_for

pytestmark = pytest.mark.e2e

JOB_SECONDS = 15


def _running_on(cluster: DockerCluster, job_id: str) -> str:
    job = cluster.wait_job(job_id, {"RUNNING"}, timeout=60)
    return job["NodeList"]


def _no_job_processes(cluster: DockerCluster, node: str) -> bool:
    # The job script is `sleep N`: after the node returns, slurmd must have killed it.
    rc, out = cluster.exec(node, ["pgrep", "-f", f"sleep {JOB_SECONDS}"], check=False)
    return rc == 1


GPU_FAULTS = {
    # name: (sg-fault arguments on n1, expected start of the drain reason, words in it)
    # (The Xid fault, with the admin drain beside it, is test_version_matrix.py's scenario:
    # it runs there on every Slurm version, this one's included.)
    # NVML no longer enumerates GPU 2: gpu-count is the first check to fail (n1 has 4).
    "nvml-off-bus": (["nvml", "2", "off_bus=true"], "slurmguard: gpu-count: ",
                     ["3 of 4 GPUs"]),
}


@pytest.mark.parametrize("fault", list(GPU_FAULTS))
def test_gpu_fault_drains_node_job_completes_elsewhere(cluster: DockerCluster,
                                                         fault: str) -> None:
    args, prefix, words = GPU_FAULTS[fault]
    # n1 is the node Slurm picks first on an idle cluster (equal weights, node order), so
    # the job's first start meets the fault; the drain below proves it did.
    cluster.exec("n1", ["sg-fault", *args])
    job_id = cluster.sbatch("--requeue", "-N1", "--wrap", "sleep 2; hostname")
    node = cluster.wait_node("n1", lambda n: "DRAIN" in n["State"], "drained", timeout=60)
    reason = node.get("Reason", "")
    assert reason.startswith(prefix), reason
    assert all(w in reason for w in words), reason
    job = cluster.wait_job(job_id, {"COMPLETED"}, timeout=120)
    assert job["NodeList"] != "n1" and int(job["Restarts"]) >= 1, job

    # The GPU is replaced / the node rebooted: the healthcheck clears our drain.
    cluster.exec("n1", ["sg-fault", "clear"])
    rc, out = cluster.exec("n1", ["/usr/lib/slurmguard/prolog/slurmguard-healthcheck"],
                           check=False)
    assert rc == 0, out
    node = cluster.wait_node("n1", lambda n: n["State"] == "IDLE", "idle again", timeout=30)
    assert not node.get("Reason"), node


FAULTS = {
    # name: (inject, undo)
    "lost": (DockerCluster.kill, DockerCluster.revive),
    "hung": (DockerCluster.pause, DockerCluster.unpause),
    "partition": (DockerCluster.disconnect, DockerCluster.reconnect),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_node_fault_mid_job_requeues_and_node_returns(cluster: DockerCluster, fault: str) -> None:
    inject, undo = FAULTS[fault]
    job_id = cluster.sbatch("--requeue", "-N1", "--wrap", f"sleep {JOB_SECONDS}")
    victim = _running_on(cluster, job_id)

    inject(cluster, victim)
    # Slurm notices within SlurmdTimeout (10 s) plus a ping round, marks the node DOWN and
    # requeues the job, which then completes on a healthy node.
    cluster.wait_node(victim, lambda n: "DOWN" in n["State"], "DOWN", timeout=90)
    job = cluster.wait_job(job_id, {"COMPLETED"}, timeout=150)
    assert int(job["Restarts"]) >= 1, job
    assert job["NodeList"] != victim, job

    undo(cluster, victim)
    # ReturnToService=2: the node comes back by itself once its slurmd registers again...
    node = cluster.wait_node(victim, lambda n: n["State"] == "IDLE", "back to IDLE", timeout=120)
    assert not node.get("Reason"), node
    # ...with the stale copy of the requeued job gone...
    wait_for(f"no leftover job processes on {victim}",
             lambda: _no_job_processes(cluster, victim), timeout=60)
    # ...and it runs jobs again: the prolog passes there.
    pinned = cluster.sbatch("-N1", "-w", victim, "--wrap", "hostname")
    assert cluster.wait_job(pinned, {"COMPLETED"}, timeout=60)["NodeList"] == victim
