"""A shared filesystem that fails twice makes no flapping nodes, on a real Slurm cluster.

The scale run's shared_fault, small: a required mount goes missing on 5 nodes at once, the
blast-radius guard drains its cap and raises the fleet alert naming fs-mount, the mount comes
back, it goes missing again, and comes back. Each of those nodes ran pass, fail, pass, fail,
pass: 4 pass/fail changes, all the shared fault's. Meanwhile a sixth node flaps on its own
(gpu-count). Records arrive as the hooks send them (serve_client.drain_permit, then the drain,
then delivery.deliver); serve is a real `slurmguard serve` with the cluster's SLURM_CONF, and
its own policy pass decides (docs/policy.md, "Shared faults").
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from support.sgserve import Serve, new_port, new_store, write_config
from support.wait import counter_advanced

from slurmguard import config
from slurmguard.adapters.serve_client import drain_permit
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record
from slurmguard.policy.lemon import lemon_verdict
from slurmguard.policy.params import PolicyParams
from slurmguard.store import Store

pytestmark = pytest.mark.slurm

SHARED = ["n1", "n2", "n3", "n4", "n5"]
OWN = "n6"  # flaps on gpu-count, its own fault


def _rec(node: str, fail: str | None, applied: str) -> dict:
    # A health check's run of both checks; the failing one (if any) is unhealthy.
    results = [CheckResult(c, Health.UNHEALTHY if c == fail else Health.HEALTHY, "broken" if c == fail else "")
               for c in ("fs-mount", "gpu-count")]
    reason = f"slurmguard: {fail}: broken" if fail else ""
    r = make_record(node, "healthcheck", results, "drain" if fail else "pass", reason)
    r["applied"] = applied
    return r


def test_a_filer_that_fails_twice_drains_no_node_for_flapping(slurm_cluster_factory,
                                                              tmp_path: Path) -> None:
    cluster = slurm_cluster_factory(nodes=6, timeout=120)
    cli = cluster.cli()
    url = new_store(tmp_path)
    port = new_port()
    # report_timeout: a permit that does not answer in time fails open (see
    # test_policy_slurm); policy_interval 1 s: the full passes the end of the test waits for.
    cfg_path = write_config(tmp_path, store_url=url, port=port, report_timeout=60.0,
                            serve_extra="policy_interval = 1.0")
    cfg = config.load(str(cfg_path), env={})
    serve = Serve(cfg_path, port, env={"SLURM_CONF": cluster.env["SLURM_CONF"]}).start()

    def fail(node: str) -> str:
        # What a health check does on a failing check: ask, drain if allowed, report.
        check = "gpu-count" if node == OWN else "fs-mount"
        reason = f"slurmguard: {check}: broken"
        allowed, _ = drain_permit(node, check, reason, cfg)
        applied = "drained" if allowed and cli.drain(node, reason) else "refused by guard"
        assert delivery.deliver(_rec(node, check, applied), cfg) == "sent"
        return applied

    def recover(node: str) -> None:
        # The check passes again: the health check clears its own drain, and reports.
        applied = "undrained" if cli.undrain(node) else "none"
        assert delivery.deliver(_rec(node, None, applied), cfg) == "sent"

    nodes = [*SHARED, OWN]
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:  # all at once, as the scale run's fault
            list(pool.map(recover, nodes))
            first = list(pool.map(fail, nodes))
            list(pool.map(recover, nodes))
            second = list(pool.map(fail, nodes))
            list(pool.map(recover, nodes))
        # The guard's cap (10 % of 6 nodes: the floor, 1) held both times, and it named the
        # shared cause.
        assert first[:5].count("drained") == 1 and second[:5].count("drained") <= 1, (first, second)
        store = Store.open(url=url)
        alerts = [a for a in store.nodes.alerts() if a.cause == "fs-mount"]
        assert len(alerts) == 1 and alerts[0].count == 5, alerts
        # The node flapping on its own is a lemon and drained for it by serve's policy pass.
        info = cluster.wait_node(OWN, lambda n: n.drained, timeout=30, what="flapping drain")
        assert info.reason == "slurmguard: flapping: 4 pass/fail changes in 1h (gpu-count)", info
        # Two more full passes over every active node: still no shared node is a lemon.
        counter_advanced(serve.policy_passes, by=2, timeout=30, what="policy passes")
        lemons = sorted(s.name for s in store.nodes.summary(nodes) if s.lemon)
        drained = sorted(n.name for n in cli.nodes() if n.drained and n.name in SHARED)
        print(f"after two shared faults: lemons {lemons}, shared nodes drained {drained}")
        assert lemons == [OWN], lemons
        assert not [e for e in store.nodes.events(kinds=["lemon"]) if e.node in SHARED]
        assert drained == [], drained
        # The rule, not the history, spared them: the same views without the alerts that
        # cover them are flapping (what the rule before this one decided).
        now = time.time()
        views = store.nodes.policy_views(SHARED, window=3600.0, now=now)
        assert all(v.shared for v in views.values()), views
        bare = {n: lemon_verdict(replace(v, shared=()), now, PolicyParams()) for n, v in views.items()}
        assert all(v is not None and v.source == "flapping" for v in bare.values()), bare
        store.close()
    finally:
        serve.stop()
