"""How long the risk score's history read takes on a month of 10,000 nodes (run by hand).

    .venv/bin/python tests/bench/bench_risk_history.py              # this tree
    PYTHONPATH=/path/to/other/checkout .venv/bin/python tests/bench/bench_risk_history.py

Writes two stores once (kept in --dir): tests/support/fleetgen.py at 10,000 nodes x 30 days
(the replay benchmark's history) and tests/support/fleetgen_blind.py at 10,000 nodes x 60
days (degraded results with the details real checks write: 8 GPUs' ECC counters, IB
rises), then times ``load_history`` as the risk score reads it (``healthy=False``, a 30-day
lookback) and as replay reads it (``healthy=True``), ``--repeat`` times each, and prints the
medians, wall and CPU (on a shared machine, CPU time is the fairer comparison). Run it with the checkout to compare on the PYTHONPATH (the loader is the only thing
that differs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DAY = 86400.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/sg-risk-history")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import slurmguard
    from slurmguard.store import Store
    from slurmguard.store.fleet import load_history

    print(f"slurmguard from {Path(slurmguard.__file__).parent}")
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    for name, days in (("fleetgen", 30), ("blind", 60)):
        path = d / f"{name}.db"
        if not path.exists():
            t0 = time.monotonic()
            if name == "blind":
                from support.fleetgen_blind import generate
            else:
                from support.fleetgen import generate
            generate(str(path), nodes=10_000, days=days, seed=1)
            print(f"{name}: written in {time.monotonic() - t0:.1f} s")
        store = Store.open(url=f"sqlite:///{path}")
        try:
            with store.engine.connect() as c:
                from sqlalchemy import text
                until = float(c.execute(text("SELECT max(started) FROM runs")).scalar())
            for healthy in (False, True):
                times, cpu = [], []
                for _ in range(a.repeat):
                    t0, c0 = time.monotonic(), time.process_time()
                    h = load_history(store.engine, since=until - 30 * DAY, until=until,
                                     lookback=30 * DAY, healthy=healthy)
                    times.append(time.monotonic() - t0)
                    cpu.append(time.process_time() - c0)
                runs = sum(len(v) for v in h.runs.values())
                print(f"{name} healthy={healthy}: {runs} non-healthy runs, median "
                      f"{statistics.median(times):.2f} s wall ({', '.join(f'{t:.2f}' for t in times)}), "
                      f"{statistics.median(cpu):.2f} s CPU (SQLite runs in the process)",
                      flush=True)
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
