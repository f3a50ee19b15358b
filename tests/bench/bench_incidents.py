"""`incident list` benchmark at fleet scale: N nodes x D days of history with jobs.

    python tests/bench/bench_incidents.py [--nodes 10000] [--days 30] [--jobs 50000] [-n 3]

Writes the history once with tests/support/fleetgen.py (failures at about 5 per 1,000
node-days, lemons, one shared-cause incident), then goodput breakdowns (goodput's own
``account``) of ``--jobs`` jobs: one 8-GPU-per-node job under half of the planted failures
(its run ends 5-600 s after the drain, requeued elsewhere), the rest background jobs, then
prints the median of whole `python -m slurmguard incident list --since Dd --json` processes
and how many incidents, hit jobs and GPU-hours it found. Run by hand; no assertion on time.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

DAY = 86400.0


def job(jid: str, nodes: tuple[str, ...], start: float, end: float, after: float | None,
        rng: random.Random) -> dict:
    """One job's breakdown: a run on ``nodes`` ending at ``end`` (NODE_FAIL when ``after``
    is the next run's start elsewhere), from goodput's own accounting."""
    from slurmguard.goodput.account import Allocation, Fault, JobInputs, RunRecord, account

    step = rng.uniform(1.0, 5.0)
    steps = max(2, int((end - start - 30) / step))
    allocs = [Allocation(start, end, nodes, 8 * len(nodes), "NODE_FAIL" if after else "COMPLETED")]
    runs = [RunRecord(0, start + 1, end, None, "infra" if after else "success",
                      (start + 30, 1), (start + 30 + steps * step, steps), step, steps,
                      ((start + 30 + steps * step / 2, steps // 2, 2.0),))]
    faults = []
    if after:
        other = tuple(f"x{n}" for n in nodes)
        dur = rng.uniform(600, 7200)
        allocs.append(Allocation(after, after + dur, other, 8 * len(nodes), "COMPLETED"))
        runs.append(RunRecord(1, after + 1, after + dur, steps // 2, "success",
                              (after + 40, steps // 2 + 1), (after + dur - 5, steps * 2), step,
                              steps, ()))
        faults.append(Fault(nodes[0], end - 1))
    return account(JobInputs(jid, tuple(allocs), tuple(runs), tuple(faults),
                             state="COMPLETED")).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("-n", type=int, default=3)
    a = ap.parse_args()
    from support.fleetgen import generate

    from slurmguard.store import Store

    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as d:
        start = (time.time() // DAY) * DAY - a.days * DAY
        t0 = time.perf_counter()
        truth = generate(f"{d}/fleet.db", nodes=a.nodes, days=a.days, start=start)
        out = []
        for i, (node, _, _, drained, _, _) in enumerate(truth.failures):
            if i % 2 == 0 and len(out) < a.jobs:
                begin = drained - rng.uniform(600, 6 * 3600)
                end = drained + rng.uniform(5, 600)
                out.append(job(f"f{i}", (node,), begin, end, end + rng.uniform(10, 600), rng))
        while len(out) < a.jobs:
            node = rng.choice(truth.nodes)
            begin = start + rng.uniform(0, a.days * DAY - 8 * 3600)
            out.append(job(f"b{len(out)}", (node,), begin, begin + rng.uniform(600, 8 * 3600),
                           None, rng))
        store = Store.open(url=f"sqlite:///{d}/fleet.db")
        for k in range(0, len(out), 2000):
            store.goodput.record(out[k:k + 2000])
        store.close()
        print(f"history: {a.nodes} nodes x {a.days} days, {len(truth.failures)} failures, "
              f"{len(out)} jobs, written in {time.perf_counter() - t0:.1f} s")
        cfg = Path(d, "sg.toml")
        cfg.write_text(f'[store]\npath = "{d}/fleet.db"\n')
        times, doc = [], {}
        for _ in range(a.n):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "slurmguard", "-c", str(cfg), "incident",
                                "list", "--since", f"{a.days}d", "--json"],
                               capture_output=True, text=True, cwd=REPO)
            times.append(time.perf_counter() - t0)
            assert p.returncode == 0, p.stderr[-2000:]
            doc = json.loads(p.stdout)
        hits = sum(len(i["jobs"]) for i in doc["incidents"])
        print(f"incident list --since {a.days}d --json: median {statistics.median(times):.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times)}); {len(doc['incidents'])} incidents, "
              f"{hits} jobs hit, {doc['total_gpu_hours']['total']:.0f} GPU-hours; goodput "
              f"badput {doc['goodput']['badput_gpu_hours']:.0f}, explained "
              f"{doc['goodput']['explained_gpu_hours']:.0f}")


if __name__ == "__main__":
    main()
