"""The one permit's cost (slurmguard.drainguard.decide) against the size of the ledger.

    python tests/bench/bench_permit.py [--fleet 10000] [-n 21]

A SQLite store holding L ledger events in the blast window (L = 0, 100, 1,000, 5,000:
permits and drains of a mass event), a fleet of --fleet nodes in 10 partitions; the median
time of one permit decision (read the ledger, guard, write the permit or refusal event),
for a cause with room (allowed) and for a cause at its cap (refused, which also updates
the alert). Every node's prolog may wait on this during a mass failure.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", type=int, default=10000)
    ap.add_argument("-n", type=int, default=21)
    args = ap.parse_args()
    from slurmguard.drainguard import decide
    from slurmguard.policy.blast import DrainRequest
    from slurmguard.policy.params import PolicyParams
    from slurmguard.store.api import Store
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    nodes = [f"g{i:05d}" for i in range(args.fleet)]
    scopes = {"fleet": frozenset(nodes)}
    for k in range(10):
        part = nodes[k * len(nodes) // 10:(k + 1) * len(nodes) // 10]
        scopes[f"partition:p{k}"] = frozenset(part)
    params = PolicyParams()
    print(f"fleet {args.fleet} nodes, 10 partitions; median of {args.n} permits")
    print(f"{'ledger events':>14}  {'allowed ms':>10}  {'refused ms':>10}")
    for size in (0, 100, 1000, 5000):
        with tempfile.TemporaryDirectory() as d:
            url = f"sqlite:///{d}/s.db"
            engine = make_engine({"url": url})
            upgrade(engine)
            engine.dispose()
            store = Store.open(url=url)
            now = time.time()
            # `size` events for one cause, spread over the fleet (at most its cap per partition
            # is reached for "fs-mount": the refused case), older ones for others
            for i in range(size):
                store.nodes.record_event(nodes[(i * 7) % len(nodes)], "permit" if i % 2 else "drain",
                                   "slurmguard", "r", source="fs-mount" if i < 60 else f"c{i % 40}",
                                   at=now - 1000 + i * 0.01)
            for i in range(60 if size == 0 else 0):
                store.nodes.record_event(nodes[i * 7], "drain", "slurmguard", "r", source="fs-mount",
                                   at=now - 500)
            times: dict[str, list[float]] = {"ok": [], "no": []}
            for j in range(args.n):
                for key, cause in (("ok", f"free-{j}"), ("no", "fs-mount")):
                    req = DrainRequest(nodes[-1 - j], cause, f"slurmguard: {cause}: x")
                    t0 = time.perf_counter()
                    v = decide(store, req, scopes, params, via="bench", now=now)
                    times[key].append(time.perf_counter() - t0)
                    assert v.allowed == (key == "ok"), (key, v)
            store.close()
        print(f"{size:>14}  {statistics.median(times['ok']) * 1000:>10.2f}  "
              f"{statistics.median(times['no']) * 1000:>10.2f}")


if __name__ == "__main__":
    main()
