"""`burnin report` benchmark: 10,000 nodes x 10 metrics x 30 nights in a SQLite store.

    python tests/bench/bench_burnin.py [--nodes 10000] [--metrics 10] [--nights 30] [-n 7]

Builds the store once (in a temp dir, schema from sql/schema-sqlite.sql): one complete run per
node and night (300,000 burnin_runs), every metric's value per run (3,000,000
burnin_results), and the per-(node, metric) summary rows the worker maintains
(burnin_series: the last 8 nights as text and as float64 bytes; burnin_packs: one row per
node with its series packed; both as burnin_finish writes them), in 4 GPU groups, with 1 % slow nodes and 0.5 % degrading ones. Then prints the median of
  * the in-process report (store reads, verdicts for every node, the table),
  * the whole `python -m slurmguard burnin report` process (the table an admin reads), and
  * the whole `python -m slurmguard burnin report --json` process (every node, every metric),
for the default --since 7d. Target (issue 9): median <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

NOW = time.time()
GROUPS = ["8x NVIDIA H100 80GB HBM3", "8x NVIDIA A100-SXM4-80GB", "4x NVIDIA L40S",
          "8x NVIDIA H200"]


def build(path: Path, nodes: int, metrics: int, nights: int) -> None:
    rnd = random.Random(9)
    conn = sqlite3.connect(path)
    conn.executescript((REPO / "sql" / "schema-sqlite.sql").read_text())
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    names = [f"gpu{i:05d}" for i in range(nodes)]
    conn.executemany("INSERT INTO nodes (id, name, first_seen, lemon, burnin_required, probation,"
                     " probation_passes) VALUES (?, ?, ?, 0, 0, 0, 0)",
                     [(i + 1, n, NOW - 90 * 86400) for i, n in enumerate(names)])
    mnames = [f"metric_{m:02d}" for m in range(metrics)]
    base = {m: rnd.uniform(10, 1000) for m in mnames}
    slow = set(rnd.sample(range(nodes), nodes // 100))
    falling = set(rnd.sample(range(nodes), nodes // 200))
    run_id = 0
    series: dict[tuple[int, str], list] = {}
    last: dict[tuple[int, str], tuple[int, float, float]] = {}
    for night in range(nights):
        day = NOW - (nights - night) * 86400
        label = time.strftime("%Y-%m-%d", time.gmtime(day))
        runs, results = [], []
        for i in range(nodes):
            run_id += 1
            runs.append((run_id, i + 1, str(run_id), "quick", label, GROUPS[i % len(GROUPS)],
                         day, day + 10, day + 600, "complete", "", "", "pass", day + 700))
            for m in mnames:
                v = base[m] * rnd.gauss(1.0, 0.02)
                if i in slow and night == nights - 1:
                    v *= 0.7
                if i in falling:
                    v *= 1.0 - 0.01 * max(0, night - nights + 5)
                results.append((run_id, i + 1, day + 500, "load", m, v, "u", "ok", "",
                                '{"higher_is_better": true}'))
                series.setdefault((i + 1, m), []).append([label, v])
                last[(i + 1, m)] = (run_id, day + 500, v)
        conn.executemany("INSERT INTO burnin_runs (id, node_id, job_id, level, night, group_key, "
                         "submitted, started, finished, status, reason, reservation, verdict, "
                         "verdict_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", runs)
        conn.executemany("INSERT INTO burnin_results (run_id, node_id, at, measurement, metric, "
                         "value, unit, status, reason, details) VALUES (?,?,?,?,?,?,?,?,?,?)",
                         results)
    rows = [(nid, m, "u", 1, GROUPS[(nid - 1) % len(GROUPS)], last[(nid, m)][0],
             last[(nid, m)][1], last[(nid, m)][2], pts[-1][0], " ".join(repr(v) for _, v in pts[-8:]),
             struct.pack(f"<{len(pts[-8:])}d", *(v for _, v in pts[-8:])))
            for (nid, m), pts in series.items()]
    conn.executemany("INSERT INTO burnin_series (node_id, metric, unit, higher_is_better, "
                     "group_key, last_run_id, last_at, last_value, last_night, recent, "
                     "recent_f8) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    from itertools import groupby

    from slurmguard.store.burnin_read import pack_series

    conn.executemany("INSERT INTO burnin_packs (node_id, meta, nums, recent) VALUES (?,?,?,?)",
                     [(nid, *pack_series(list(g))) for nid, g in groupby(rows, key=lambda r: r[0])])
    conn.commit()
    conn.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--metrics", type=int, default=10)
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("-n", "--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-burnin-") as tmp:
        db = Path(tmp) / "store.db"
        t0 = time.monotonic()
        build(db, args.nodes, args.metrics, args.nights)
        print(f"built {args.nodes} nodes x {args.metrics} metrics x {args.nights} nights in "
              f"{time.monotonic() - t0:.0f} s ({db.stat().st_size / 2**20:.0f} MiB)")
        cfg_path = Path(tmp) / "sg.toml"
        cfg_path.write_text(f'[store]\npath = "{db}"\n[slurm]\nscontrol = "/nonexistent/x"\n')
        os.environ["SLURMGUARD_CONFIG"] = str(cfg_path)
        from click.testing import CliRunner

        from slurmguard.cli import cli

        runner = CliRunner()
        inproc = []
        for _ in range(args.repeat):
            t = time.monotonic()
            r = runner.invoke(cli, ["burnin", "report"], catch_exceptions=False)
            inproc.append(time.monotonic() - t)
            assert r.exit_code == 0, r.output
        flagged = r.output.count(" flagged ")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
        cmd = [sys.executable, "-m", "slurmguard", "burnin", "report"]
        tables, whole = [], []
        for _ in range(args.repeat):
            t = time.monotonic()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            tables.append(time.monotonic() - t)
            assert p.returncode == 0, p.stderr
            t = time.monotonic()
            p = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True,
                               timeout=300)
            whole.append(time.monotonic() - t)
            assert p.returncode == 0, p.stderr
        counts = json.loads(p.stdout)["counts"]
        print(f"verdicts: {counts} (table rows flagged: {flagged})")
        print(f"in-process report:  median {statistics.median(inproc):.3f} s "
              f"(min {min(inproc):.3f}, max {max(inproc):.3f}, n={args.repeat})")
        print(f"`burnin report` process (table): median {statistics.median(tables):.3f} s "
              f"(min {min(tables):.3f}, max {max(tables):.3f}, n={args.repeat})")
        print(f"`burnin report --json` process: median {statistics.median(whole):.3f} s "
              f"(min {min(whole):.3f}, max {max(whole):.3f}, n={args.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
