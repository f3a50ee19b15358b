"""The dockerized cluster comes up as a real Slurm cluster with slurmguard's hooks wired in."""

from __future__ import annotations

import pytest
from dockercluster import DockerCluster, wait_for

pytestmark = pytest.mark.e2e


def test_cluster_ready_each_node_its_own_host(cluster: DockerCluster) -> None:
    assert "is UP" in cluster.sh("ctl", "scontrol ping")
    nodes = sorted(cluster.gpus)
    # One task per node: each prints its own hostname (not the controller's, not the host's).
    out = cluster.sh("ctl", f"srun -N{len(nodes)} --ntasks-per-node=1 hostname")
    assert sorted(out.split()) == nodes
    # The prolog and epilog ran slurmguard on every node and passed (hooks.log_file: one
    # line a run; the epilog ends after srun returns, hence the wait).
    for name in nodes:
        def logged(name: str = name) -> str | None:
            log = cluster.sh(name, "cat /var/log/slurmguard.log", check=False)
            return log if "slurmguard prolog" in log and "slurmguard epilog" in log else None
        log = wait_for(f"prolog and epilog lines in {name}'s log", logged, timeout=30)
        assert all(" pass: " in line for line in log.splitlines()), f"{name}: {log!r}"


def test_simulated_gpus_per_node(cluster: DockerCluster) -> None:
    for name, n in cluster.gpus.items():
        gpus = cluster.sh(name, "ls /var/lib/fakehw/nvidia-gpus").split()
        assert len(gpus) == n, f"{name}: {gpus}"
    # slurmguard's own check on a node sees the GPUs through the fixture tree and the Xid
    # log, and finds nothing wrong.
    rc, out = cluster.exec("n1", ["slurmguard", "check", "--only", "gpu-xid"], check=False)
    assert rc == 0 and "gpu-xid" in out and "healthy" in out, out
