"""Every serve replica unreachable: a shared fault must still not become a mass drain
(slurmguard/node/fallback.py, docs/hooks.md).

- A real Slurm cluster, no serve at all (report_url on a dead port), a mount missing on every
  node: the health checks of all nodes run at once and the fallback cap over Slurm's own view
  drains at least the cap (20 % of the nodes) and at most the stated bound cap +
  min(fallback_share, ceil(P / fallback_slots)) - 1: 20 nodes, 10 slots, share 2 (bound 5, as
  before); 64 nodes, 4 slots, share 2 (bound cap + 1, where the old arithmetic allowed
  cap + 15 and drained 16 of 64 in its first window). The rest are spared, each with a "not
  drained" line. A lost GPU (gpu-count) on a spared node is still allowed at once, past the
  cap; a window past the hook's deadline is not waited for and reads no node (the partition
  table only, REQUEST_PARTITION_INFO), and a decision in its window reads the drained nodes
  once (sinfo -t drain: one REQUEST_NODE_INFO, as sdiag counts).
- The decision windows themselves (Hypothesis): whatever the partition size, slots, share and
  the time the nodes start, each rank decides in one of its own windows, at most
  fallback_share ranks decide in any one window, and no rank waits 2 cycles.
"""

from __future__ import annotations

import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.helpers import REPO, run_sg, sg_env
from support.sgserve import new_port, new_store, write_config

from slurmguard import config
from slurmguard.drainguard import ServePermit
from slurmguard.node.fallback import SlurmPermit, _shift, cycle_slots, slot_wait


@given(members=st.integers(1, 3000), slots=st.integers(1, 20), share=st.integers(1, 8),
       slot=st.sampled_from([0.5, 1.0, 2.0]), start=st.floats(0, 1e9))
def test_at_most_share_nodes_decide_in_one_window(members: int, slots: int, share: int,
                                                  slot: float, start: float) -> None:
    n = cycle_slots(members, slots, share)
    assert n >= slots and -(-members // n) <= share
    deciding: dict[int, int] = {}
    for rank in range(members):
        wait = slot_wait(rank, n, slot, start)
        assert 0 <= wait < 2 * n * slot
        window = round((start + wait) / slot)
        assert (window - _shift(window // n, n)) % n == rank % n  # the rank's own window
        deciding[window] = deciding.get(window, 0) + 1
    assert max(deciding.values()) <= share


@given(now=st.floats(0, 1e9), slots=st.integers(1, 50))
def test_a_node_late_in_its_window_takes_the_next_one(now: float, slots: int) -> None:
    window = int(now // 1.0)
    rank = (window - _shift(window // slots, slots)) % slots  # the rank whose window this is
    wait = slot_wait(rank, slots, 1.0, now)
    decides_in = round(now + wait) if wait else window
    assert (decides_in == window) == (now - window <= 0.25)


@pytest.mark.parametrize("share, one_in", [(2, 38), (8, 10)])
def test_a_run_reaches_its_window_with_the_stated_chance(share: int, one_in: int) -> None:
    # docs/hooks.md: 1,024 nodes, 10 slots of 1 s, about 13 s of a 20-s budget left to wait
    n, left, runs = cycle_slots(1024, 10, share), 13.0, 20_000
    starts = (i * 7.919 + 0.37 * (i % 13) for i in range(runs))  # spread over many cycles
    reached = sum(slot_wait(r % 1024, n, 1.0, t) <= left for r, t in enumerate(starts))
    assert round(runs / reached) == one_in


@pytest.mark.slurm
@pytest.mark.parametrize("nodes, slots, share", [(20, 10, 2), (64, 4, 2)])
def test_a_shared_fault_with_every_replica_down_drains_at_most_the_bound(
        slurm_cluster_factory, tmp_path: Path, nodes: int, slots: int, share: int) -> None:
    cap = math.floor(nodes * 0.2)  # blast_max_percent 20
    cycle = cycle_slots(nodes, slots, share)
    budget = 2 * cycle + 20  # the longest wait (2 cycles of 1-s windows) and the checks
    port = new_port()  # nothing listens there: every permit finds serve unreachable
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port, report_timeout=1.0,
                       extra=f"""
fallback_slot = 1.0
fallback_slots = {slots}
fallback_share = {share}
budget = {budget}
log_file = "{tmp_path}/hooks.log"
healthcheck = ["fs-mount"]
[checks.fs]
mounts = ["/", "{tmp_path}/shared"]
[policy]
blast_max_percent = 20.0
""")
    c = slurm_cluster_factory(nodes=nodes, timeout=180)
    conf = c.env["SLURM_CONF"]

    def healthcheck(node: str) -> str:
        p = run_sg("healthcheck", env=sg_env(SLURMGUARD_CONFIG=str(cfg), SLURM_CONF=conf,
                                              SLURMD_NODENAME=node,
                                              PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}"),
                   timeout=budget + 30)
        return p.stderr

    t0 = time.monotonic()
    with ThreadPoolExecutor(nodes) as pool:
        logs = list(pool.map(healthcheck, c.nodes))
    took = time.monotonic() - t0
    drained = [n for n in c.nodes if c.node(n).drained]
    bound = cap + min(share, math.ceil(nodes / slots)) - 1
    print(f"\nserve down, shared fault on {nodes} nodes: {len(drained)} drained "
          f"(cap {cap}, bound {bound}, {cycle} windows a cycle) in {took:.1f} s")
    assert cap <= len(drained) <= bound, logs
    assert sum("not drained" in x and "Slurm's view" in x for x in logs) == nodes - len(drained), logs
    spared = next(n for n in c.nodes if n not in drained)
    permit = ServePermit(config.load(str(cfg), env={}),
                         SlurmPermit(c.cli(), config.load(str(cfg), env={})))
    allowed, why = permit.ask(spared, "fs-mount", "slurmguard: fs-mount: /shared missing")
    assert not allowed and "Slurm's view" in why
    allowed, why = permit.ask(spared, "gpu-count", "slurmguard: gpu-count: 7 of 8 GPUs")
    assert allowed and "node-intrinsic" in why
    # A window the hook's budget cannot reach is not waited for: not drained this run, and
    # no node read for it (only the partition table, for the rank).
    now = time.time()
    late = SlurmPermit(c.cli(), config.load(str(cfg), env={}), clock=lambda: now,
                       sleep=lambda s: pytest.fail(f"waited {s} s past the deadline"),
                       deadline=time.monotonic() - 1)
    c.run("sdiag", "--reset")
    for cause in ("fs-mount", "fs-other"):
        allowed, why = late.ask(spared, cause, f"slurmguard: {cause}: /shared missing")
        assert not allowed and "past the hook's budget" in why
    late_rpcs = rpcs(c)
    # In its window, one read of the drained nodes (sinfo: the node table packed, filtered
    # on the client) beside the partition table: the RPCs of a decision, by type.
    now_window = SlurmPermit(c.cli(), config.load(str(cfg), env={}), sleep=lambda s: None)
    c.run("sdiag", "--reset")
    allowed, why = now_window.ask(spared, "fs-mount", "slurmguard: fs-mount: /shared missing")
    decision_rpcs = rpcs(c)
    print(f"RPCs of two decisions past the budget: {late_rpcs}; of one in its window: "
          f"{decision_rpcs}")
    assert not allowed and "blast-radius" in why
    assert late_rpcs == {"REQUEST_PARTITION_INFO": 2}, late_rpcs
    assert decision_rpcs == {"REQUEST_PARTITION_INFO": 2, "REQUEST_NODE_INFO": 1}, decision_rpcs
    # the scale harness's attribution of these calls (footprint.RPCS_PER_CALL) rests on this
    from support import footprint

    per = footprint.RPCS_PER_CALL
    assert footprint.call_kind("scontrol show partition -o") == "scontrol show partition"
    assert footprint.call_kind("sinfo -h -N -a -t drain -O NodeList:|") == "sinfo drained nodes"
    assert sum(decision_rpcs.values()) == per["scontrol show partition"] + per["sinfo drained nodes"]


def rpcs(c) -> dict[str, int]:  # noqa: ANN001
    """slurmctld's RPCs by type since the last ``sdiag --reset`` (sdiag's own left out)."""
    part = c.run("sdiag").stdout.split("by message type")[1].split("by user")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)\s*\(\s*\d+\)\s*count:(\d+)", part)
            if m[1] != "REQUEST_STATS_INFO"}
