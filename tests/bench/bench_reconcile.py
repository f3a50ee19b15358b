"""Benchmark: plan one reconcile round for 10,000 nodes (synthetic views).

Run by hand: ``python tests/bench/bench_reconcile.py [NODES] [RUNS]``; prints the median.
Target (issue 5): <= 1 s median for 10,000 nodes. The views mix every rule: healthy nodes,
Slurm drains (ours and admins'), NotReady Nodes, cordons by others, our marks to remove.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurmguard.contract import CORDONED_BY, MARKED_AT, rfc3339  # noqa: E402
from slurmguard.reconcile.plan import Rules, plan  # noqa: E402
from slurmguard.reconcile.views import NameMapping, SlurmView, kube_view, map_kube_names  # noqa: E402


def synth(n: int, now: float, seed: int = 1) -> tuple[dict[str, SlurmView], list[dict]]:
    rnd = random.Random(seed)
    slurm: dict[str, SlurmView] = {}
    raw: list[dict] = []
    for i in range(n):
        name = f"gpu{i:05d}"
        r = rnd.random()
        flags, reason, state = frozenset(), "", "idle"
        if r < 0.03:
            flags, reason = frozenset({"DRAIN"}), "slurmguard: gpu-xid: Xid 79 on GPU 3"
        elif r < 0.05:
            flags, reason = frozenset({"DRAIN"}), "maintenance"
        elif r < 0.06:
            state, reason = "down", "Not responding"
        slurm[name] = SlurmView(name, state, flags, reason, now - rnd.uniform(0, 7200),
                                partitions=(f"gpu{i // 500}",))
        ready = "False" if rnd.random() < 0.02 else "True"
        ann = {}
        spec: dict = {}
        if rnd.random() < 0.03:
            spec = {"unschedulable": True, "taints": [{"key": "slurmguard.io/unhealthy",
                                                       "value": "gpu-xid", "effect": "NoSchedule"}]}
            ann = {CORDONED_BY: "slurmguard", MARKED_AT: rfc3339(now - 4000)}
        elif rnd.random() < 0.01:
            spec = {"unschedulable": True}
        raw.append({"metadata": {"name": name, "resourceVersion": str(i), "annotations": ann,
                                 "labels": {"kubernetes.io/hostname": name}},
                    "spec": spec,
                    "status": {"conditions": [{"type": "Ready", "status": ready,
                                               "lastTransitionTime": rfc3339(now - 900)}]}})
    return slurm, raw


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    now = time.time()
    slurm, raw = synth(n, now)
    rules = Rules(blast_max_nodes=1_000_000, blast_max_percent=100)
    plan_t, full_t = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        kube, unmapped = map_kube_names((kube_view(o) for o in raw), NameMapping())
        t1 = time.perf_counter()
        p = plan(slurm, kube, rules, now, unmapped=unmapped)
        t2 = time.perf_counter()
        plan_t.append(t2 - t1)
        full_t.append(t2 - t0)
    changes = len(p.changes)
    print(f"reconcile plan, {n} nodes, {runs} runs: median {statistics.median(plan_t):.3f} s "
          f"(planner only), {statistics.median(full_t):.3f} s (raw Node JSON -> views -> plan); "
          f"{changes} changes planned")


if __name__ == "__main__":
    main()
