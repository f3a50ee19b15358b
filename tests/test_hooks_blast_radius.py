"""The real prolog, run by slurmd on 10 nodes that all fail the same check at once, asks
serve's blast-radius guard before draining: only the cap (10 % = 1 node) drains, the others
let their jobs run (exit 0, "not drained: ..."), and one fleet alert names the check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.helpers import REPO, sg_argv
from support.sgserve import Serve, new_port, new_store, write_config
from support.slurmcluster import write_hook_script
from support.wait import wait_for

pytestmark = pytest.mark.slurm
NODES = 10


def test_shared_fault_drains_at_most_the_cap(slurm_cluster_factory, tmp_path: Path) -> None:
    from slurmguard.store import Store
    url = new_store(tmp_path)
    port = new_port()
    cfg = write_config(tmp_path, store_url=url, port=port, report_timeout=60.0, extra=f"""
log_file = "{tmp_path}/hooks.log"
prolog = ["fault-value"]
[checks]
site_modules = ["support.faultsite"]
""")
    # Every node's prolog finds the same fault: what a dead shared filesystem looks like.
    hook = write_hook_script(tmp_path / "prolog", sg_argv("prolog"), {
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SLURMGUARD_CONFIG": str(cfg),
        "FAULT_VALUE": "bad", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    c = slurm_cluster_factory(nodes=NODES, prolog=hook, timeout=120)
    serve = Serve(cfg, port, env={"SLURM_CONF": str(c.conf_path)}).start()
    try:
        ids = [c.sbatch("#!/bin/sh\ntrue\n", "-w", n, "--output=/dev/null") for n in c.nodes]
        log_path = tmp_path / "hooks.log"
        def prolog_nodes() -> bool:  # every node's prolog has run once
            log = log_path.read_text() if log_path.exists() else ""
            return len({ln.split("node=")[1].split()[0] for ln in log.splitlines() if "node=" in ln}) == NODES

        wait_for(prolog_nodes, 180, interval=0.5, what="every node's prolog in hooks.log")
        # Jobs on nodes the guard spared run to completion (their prolog exited 0).
        # (the one job whose prolog drained its node was requeued: Restarts=1, pending)
        done = [c.wait_job(jid, states={"COMPLETED"}, timeout=120) for jid in ids
                if c.job(jid).get("Restarts") == "0"]
        assert len(done) == NODES - 1
        drained = {n: c.node(n).reason for n in c.nodes if c.node(n).drained}
        log = log_path.read_text()
        assert len(drained) == 1, (drained, log)
        (reason,) = drained.values()
        assert reason == "slurmguard: fault-value: injected node fault"
        assert log.count("not drained: ") == NODES - 1, log
        store = Store.open(url=url)
        try:
            alerts = store.nodes.alerts()
            assert len(alerts) == 1, alerts
            assert alerts[0].cause == "fault-value"
        finally:
            store.close()
    finally:
        serve.stop()
