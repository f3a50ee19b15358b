"""Observe mode holds on the acting paths of a real Slurm cluster (docs/policy.md, "Observe
mode"): one 4-node cluster, every node observing, every slurmguard process (the hooks, the
allocation gate, serve's policy pass with its probation marks) pointed at a
Slurm shim (tests/support/slurmshim.py) that forwards reads and refuses and logs every call
that would change Slurm. The scenarios are those of tests/test_guard_cluster.py, which acts:

1. a mount missing on all 4 nodes, cap 2: the health checks would drain 2 and would be
   refused 2 (the guard counts would-drains), and drain none;
2. 4 jobs flow through the gate (PrologSlurmctld) and the prolog, both of which see the
   fault: every job runs and completes (the prolog exits 0, the gate lets them through), and
   the ledger still holds one would-event per node (once per episode, not per pass or path);
3. the mount comes back: each node's episode ends; a node returned on probation gets its
   probation mark withheld, as a would_act event.

Nothing reached Slurm: the shim's change log is empty and no node is drained.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.gatehook import gate_cluster
from support.helpers import REPO, run_sg, sg_argv, sg_env
from support.sgserve import Serve, new_port, new_store, write_config
from support.slurmcluster import write_hook_script
from support.slurmshim import SlurmShim
from support.wait import wait_for

from slurmguard.store import Store

pytestmark = pytest.mark.slurm


def test_observing_cluster_changes_nothing_on_any_acting_path(slurm_cluster_factory,
                                                              tmp_path: Path) -> None:
    shim = SlurmShim(tmp_path / "shim")
    url, port = new_store(tmp_path), new_port()
    shared = tmp_path / "shared"
    shared.mkdir()
    mountinfo = tmp_path / "mountinfo"  # the mount table the check reads: shared not in it
    table = Path("/proc/self/mountinfo").read_text()
    mountinfo.write_text(table)
    cfg = write_config(tmp_path, store_url=url, port=port, report_timeout=60.0, extra=f"""
log_file = "{tmp_path}/hooks.log"
prolog = ["fs-mount"]
healthcheck = ["fs-mount"]
[checks.fs]
mounts = ["/", "{shared}"]
mountinfo = "{mountinfo}"
[policy]
mode = "observe"
blast_max_percent = 50.0
[gate]
log_file = "{tmp_path}/gate.log"
{shim.config()}""", serve_extra="policy_interval = 1.0")
    base = {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SLURMGUARD_CONFIG": str(cfg),
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    prolog = write_hook_script(tmp_path / "prolog", sg_argv("prolog"), base)
    c = gate_cluster(slurm_cluster_factory, tmp_path, cfg, 4, prolog=prolog, timeout=120)
    conf = c.env["SLURM_CONF"]
    serve = Serve(cfg, port, env={"SLURM_CONF": conf}).start()
    store = Store.open(url=url)

    def healthcheck(node: str) -> int:
        p = run_sg("healthcheck", env=sg_env(SLURMGUARD_CONFIG=str(cfg), SLURM_CONF=conf,
                                              SLURMD_NODENAME=node))
        assert "would drain (observe)" in p.stderr or "ok" in p.stderr, p.stderr
        return p.returncode

    def would() -> list[tuple[str, str]]:
        return sorted((e.node, e.kind) for e in store.nodes.events(
            kinds=["would_drain", "would_drain_refused"]))

    try:
        # 1. the health checks: 2 would-drains, 2 refused by the cap
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(healthcheck, c.nodes)) == [0] * 4
        wait_for(lambda: len(would()) == 4, 30, interval=0.5, what="4 would-events")
        assert sorted(k for _, k in would()) == ["would_drain"] * 2 + ["would_drain_refused"] * 2
        # 2. jobs flow through the gate and the prolog, which both see the fault
        jobs = [c.sbatch("#!/bin/sh\ntrue\n", "--output=/dev/null") for _ in range(4)]
        for j in jobs:
            c.wait_job(j, timeout=120)
        gate_log = (tmp_path / "gate.log").read_text()
        assert "observe mode, would refuse" in gate_log, gate_log
        time.sleep(3)  # policy passes (every 1 s) over the jobs' prolog records
        assert len(would()) == 4, would()  # once per episode, whatever the passes and paths
        vias = {e.details.get("via") for e in store.nodes.events(kinds=["would_drain",
                                                                        "would_drain_refused"])}
        assert vias == {"healthcheck"}, vias
        # 3. the mount is back: the episodes end; a node returned on probation
        root = next(x for x in table.splitlines() if x.split()[4] == "/").split(" ")
        mountinfo.write_text(table + " ".join([*root[:4], str(shared), *root[5:]]) + "\n")
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(healthcheck, c.nodes)) == [0] * 4
        wait_for(lambda: len(store.nodes.events(kinds=["would_end"])) == 4, 30, interval=0.5,
                 what="4 would_end events")
        store.nodes.return_node("n4", "admin:test", "tested")
        assert healthcheck("n4") == 0  # a fresh record: serve's pass looks at n4 now
        marks = wait_for(lambda: store.nodes.events(node="n4", kinds=["would_act"]), 30,
                         interval=0.5, what="the probation mark withheld")
        assert [(e.source, e.details["verb"]) for e in marks] == [("features", "features")]
        time.sleep(2)  # more passes: still one
        assert len(store.nodes.events(node="n4", kinds=["would_act"])) == 1
    finally:
        store.close()
        serve.stop()
    assert shim.changes() == []
    calls = shim.calls()
    assert any(x.startswith("sinfo ") for x in calls) and any(
        x.startswith("scontrol show") for x in calls), calls[:20]  # the shim was in the path
    for n in c.nodes:
        info = c.node(n)
        assert not info.drained and "sg_probation" not in info.features, info
    for j in jobs:
        assert c.job(j)["JobState"] == "COMPLETED" and c.job(j).get("Restarts") == "0"
