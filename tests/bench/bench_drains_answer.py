"""Benchmark: serve's answer to one job's drain poll (``GET /drains``) against the store's
ledger. Every running job's `slurmguard run` asks every ``notice.interval``, so a fleet with
J jobs asks J / interval times a second, all answered by serve.

    python tests/bench/bench_drains_answer.py [--fleet 1024] [-n 201]

A SQLite store holding E drain and clear events in the last hour (E = 0, 1,000, 10,000: a
day of churn to a mass event), a node table of --fleet nodes as Slurm reports it (one of
them drained), read once (serve's cached view, its cost left out); the median time of one
answer for a job of 1 node and of 8 nodes, none of them drained (almost every poll), and
for a job with the drained node among its 8. Beside them, the store's read of the drain
events since the job's start: what every poll paid before serve asked Slurm's flag first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


class NodeTable:
    """The node table serve's view reads, as Slurm's parser gives it (read once: serve
    caches it for every job; its cost is Slurm's, measured in bench_slurm_node_reads.py)."""

    def __init__(self, nodes: list[str], drained: str) -> None:
        from slurmguard.adapters.slurm.parse import NodeInfo

        self.table = [NodeInfo(n, "idle",
                               frozenset({"DRAIN"}) if n == drained else frozenset(),
                               reason="slurmguard: gpu-xid: Xid 79" if n == drained else "")
                      for n in nodes]

    def nodes(self) -> list:
        return self.table


def _median_ms(fn, n: int) -> float:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", type=int, default=1024)
    ap.add_argument("-n", type=int, default=201)
    args = ap.parse_args()
    from support.sgserve import new_store

    from slurmguard.serve.drains import DrainView
    from slurmguard.store.api import Store

    nodes = [f"g{i:05d}" for i in range(args.fleet)]
    drained = nodes[5]
    print(f"fleet {args.fleet} nodes, one drained; median of {args.n} answers (ms)")
    print(f"{'events':>7}  {'1 node':>7}  {'8 nodes':>7}  {'8, one drained':>14}  "
          f"{'store read alone':>16}")
    for size in (0, 1000, 10000):
        with tempfile.TemporaryDirectory() as d:
            store = Store.open(url=new_store(Path(d)))
            now = time.time()
            for i in range(size):
                store.nodes.record_event(nodes[(i * 7) % len(nodes)], "drain" if i % 2 else "clear",
                                         "slurmguard", "r", source="gpu-xid",
                                         at=now - 3600 + i * 3600 / max(size, 1))
            view = DrainView(store, NodeTable(nodes, drained), cache_s=3600)
            since = str(now - 3600)
            q1 = {"nodes": [nodes[100]], "since": [since]}
            q8 = {"nodes": [f"{nodes[100]},{','.join(nodes[101:108])}"], "since": [since]}
            qd = {"nodes": [",".join(nodes[:8])], "since": [since]}
            assert view.drains(q8)[1] == {"drains": [], "complete": True}
            assert [x["node"] for x in view.drains(qd)[1]["drains"]] == [drained]
            row = [_median_ms(lambda q=q, v=view: v.drains(q), args.n) for q in (q1, q8, qd)]
            row.append(_median_ms(lambda s=store, t=now - 3600: s.nodes.events(
                since=t, kinds=("drain", "clear"), limit=10000), args.n))
            store.close()
        print(f"{size:>7}  {row[0]:>7.3f}  {row[1]:>7.3f}  {row[2]:>14.3f}  {row[3]:>16.3f}")


if __name__ == "__main__":
    main()
