"""`policy replay` and `fleet report` benchmark: 10,000 nodes x 30 days (issue: replay < 60 s).

    python tests/bench/bench_fleet_replay.py [--nodes 10000] [--days 30] [-n 3]

Writes the history once with tests/support/fleetgen.py (a healthcheck every 6 h and two job epilogs a
day per node, failures at about 5 per 1,000 node-days, planted lemons and degrading nodes, a
shared-cause incident), then prints the median of
  * the whole `python -m slurmguard policy replay --since 30d --config candidate.toml --json`
    process (the current and a candidate config: two replays over one history read),
  * the whole `python -m slurmguard fleet report --json` process.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("-n", type=int, default=3)
    a = ap.parse_args()
    from support.fleetgen import generate

    from slurmguard.cli._common import iso

    with tempfile.TemporaryDirectory() as d:
        start = (time.time() // DAY) * DAY - a.days * DAY
        t0 = time.perf_counter()
        truth = generate(f"{d}/fleet.db", nodes=a.nodes, days=a.days, start=start)
        print(f"history: {a.nodes} nodes x {a.days} days, {len(truth.failures)} failures, "
              f"written in {time.perf_counter() - t0:.1f} s")
        cur = Path(d, "current.toml")
        cur.write_text(f'[store]\npath = "{d}/fleet.db"\n')
        cand = Path(d, "candidate.toml")
        cand.write_text(cur.read_text() + "[policy]\nwindow = 1209600\nflap_transitions = 100\n")
        window = ["--since", iso(truth.since), "--until", iso(truth.until)]
        for label, args in (("policy replay (current + candidate)",
                             ["policy", "replay", *window, "--config", str(cand), "--json"]),
                            ("fleet report", ["fleet", "report", *window, "--json"])):
            times = []
            for _ in range(a.n):
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "slurmguard", "-c", str(cur), *args],
                                   capture_output=True, text=True, cwd=REPO)
                times.append(time.perf_counter() - t0)
                assert p.returncode == 0, p.stderr[-2000:]
            print(f"{label}: median {statistics.median(times):.2f} s "
                  f"(runs: {', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
