"""Every serve replica unreachable: a shared fault must still not become a mass drain
(slurmguard/node/fallback.py, docs/hooks.md).

- A real 20-node Slurm cluster, no serve at all (report_url on a dead port), a mount missing
  on every node: the health checks of all 20 nodes run at once and the fallback cap over
  Slurm's own view drains at least the cap (4: 20 % of 20) and at most the stated bound
  cap + ceil(20 / fallback_slots 10) - 1 = 5; the rest are spared, each with a "not drained"
  line. A lost GPU (gpu-count) on a spared node is still allowed at once, past the cap.
- The decision windows themselves: each rank waits for its own window.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.helpers import REPO, run_sg, sg_env
from support.sgserve import new_port, new_store, write_config

from slurmguard import config
from slurmguard.drainguard import ServePermit
from slurmguard.node.fallback import SlurmPermit, wait_for_slot

NODES, SLOTS, CAP = 20, 10, 4


@pytest.mark.parametrize("now, rank, waited", [
    (100.0, 0, 0.0),     # window 100 is rank 0's (100 % 5 == 0), at its start: go
    (100.1, 0, 0.0),     # early in its own window: go
    (100.5, 0, 4.5),     # too late in its own window: the next cycle's
    (100.0, 3, 3.0),     # rank 3: window 103
    (104.2, 1, 1.8),     # window 104 is rank 4's; rank 1: window 106
])
def test_each_rank_decides_in_its_own_window(now: float, rank: int, waited: float) -> None:
    slept: list[float] = []
    wait_for_slot(rank, 5, 1.0, clock=lambda: now, sleep=slept.append)  # 5 windows a cycle
    assert sum(slept) == pytest.approx(waited)


@pytest.mark.slurm
def test_a_shared_fault_with_every_replica_down_drains_at_most_the_bound(
        slurm_cluster_factory, tmp_path: Path) -> None:
    port = new_port()  # nothing listens there: every permit finds serve unreachable
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port, report_timeout=1.0,
                       extra=f"""
fallback_slot = 1.0
fallback_slots = {SLOTS}
log_file = "{tmp_path}/hooks.log"
healthcheck = ["fs-mount"]
[checks.fs]
mounts = ["/", "{tmp_path}/shared"]
[policy]
blast_max_percent = 20.0
""")
    c = slurm_cluster_factory(nodes=NODES, timeout=120)
    conf = c.env["SLURM_CONF"]

    def healthcheck(node: str) -> str:
        p = run_sg("healthcheck", env=sg_env(SLURMGUARD_CONFIG=str(cfg), SLURM_CONF=conf,
                                              SLURMD_NODENAME=node,
                                              PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}"),
                   timeout=120)
        return p.stderr

    t0 = time.monotonic()
    with ThreadPoolExecutor(NODES) as pool:
        logs = list(pool.map(healthcheck, c.nodes))
    took = time.monotonic() - t0
    drained = [n for n in c.nodes if c.node(n).drained]
    bound = CAP + math.ceil(NODES / SLOTS) - 1
    print(f"\nserve down, shared fault on {NODES} nodes: {len(drained)} drained "
          f"(cap {CAP}, bound {bound}) in {took:.1f} s")
    assert CAP <= len(drained) <= bound, logs
    assert sum("not drained" in x and "Slurm's view" in x for x in logs) == NODES - len(drained), logs
    spared = next(n for n in c.nodes if n not in drained)
    permit = ServePermit(config.load(str(cfg), env={}),
                         SlurmPermit(c.cli(), config.load(str(cfg), env={})))
    allowed, why = permit.ask(spared, "fs-mount", "slurmguard: fs-mount: /shared missing")
    assert not allowed and "Slurm's view" in why
    allowed, why = permit.ask(spared, "gpu-count", "slurmguard: gpu-count: 7 of 8 GPUs")
    assert allowed and "node-intrinsic" in why
