"""An admin's reads over a month of a large fleet's history: `slurmguard nodes`, `incident
list --since 30d`, `fleet report --since 30d` and `goodput --since 30d`, each the real CLI
process (median of ``--n`` runs), on SQLite and PostgreSQL (docs/scale.md, "Goals at 10,000
nodes", is rendered from the JSON this writes).

    python tests/bench/bench_fleet_reads.py [--nodes 10000] [--days 30] [--compress 96]
        [--no-pg] [--n 3] [--json docs/fleet_reads.json]

`incident list` runs twice: as configured by default (checks.gpu.expected_count unset: a
node's GPUs are the most any job of the window had on it, which reads every job's runs), and
with expected_count set.

The month, written through the store API: bench_store_retention.write_month (every node's
health checks with their 6 results, one every 300 x ``--compress`` s instead of 300 s; the
jobs' prolog and epilog runs at 1,200 an hour / ``--compress``; failures at 0.0035 per
node-day, not compressed, each with its drain and its return), and goodput's job rows at the
real rate, not compressed (864,000 one-month jobs at 1,200 an hour: `goodput` reads every job
of its window): the compressed month's own, and 2,000 more breakdowns from the real
accounting function (bench_goodput.breakdowns) repeated under new job ids, nodes and end
times to the month's count. What compression leaves out: passing runs between a node's checks (the reads below
take failing runs, the ledger, the node table and goodput's jobs; `nodes` a node's last
check). Slurm is not asked (`nodes` shows the store's view, as when Slurm is down).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "bench")]
from bench_store_retention import (  # noqa: E402
    DAY,
    JOBS_PER_HOUR,
    counts,
    fresh_store,
    write_month,
)

COMMANDS = {
    "nodes": ("nodes", "--json"),
    "incident list": ("incident", "list", "--since", "30d", "--json"),
    # the same with checks.gpu.expected_count set: no GPUs per node from every job's runs
    "incident list, GPUs per node set": ("incident", "list", "--since", "30d", "--json"),
    "fleet report": ("fleet", "report", "--since", "30d", "--json"),
    "goodput": ("goodput", "--since", "30d", "--json"),
}


GPUS = 8  # checks.gpu.expected_count where a command's config sets it


def goodput_month(store: Any, nodes: int, days: int, have: int, now: float) -> int:
    """Goodput rows to the month's real count: 2,000 breakdowns of the real accounting
    function, repeated with a new job id, nodes shifted and an end time within the month.
    Returns the rows added."""
    from bench_goodput import breakdowns

    want = JOBS_PER_HOUR * 24 * days
    base = breakdowns(2000, nodes)  # the real accounting function's breakdowns, repeated
    rng = random.Random(13)
    added, batch = 0, []
    for k in range(max(0, want - have)):
        b = dict(base[k % len(base)])
        shift = rng.randrange(nodes)
        width = len(b["nodes"])
        b["job_id"] = str(5_000_000 + k)
        b["nodes"] = [f"gpu{(shift + i) % nodes + 1:05d}" for i in range(width)]
        end = now - rng.uniform(0, days * DAY)
        b["start"], b["end"] = end - b["wall_s"], end
        batch.append(b)
        if len(batch) == 2000:
            store.goodput.record(batch)
            added, batch = added + len(batch), []
    if batch:
        store.goodput.record(batch)
        added += len(batch)
    return added


def timed(cfg: Path, argv: tuple[str, ...], n: int) -> dict[str, Any]:
    env = {**os.environ, "SLURMGUARD_CONFIG": str(cfg)}
    walls, out = [], ""
    for _ in range(n):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "slurmguard", *argv], env=env,
                           capture_output=True, text=True, timeout=1800, check=False)
        walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: rc {p.returncode}: {p.stderr.strip()[:300]}")
        out = p.stdout
    return {"median_s": round(statistics.median(walls), 2), "runs_s": [round(w, 2) for w in walls],
            "bytes": len(out)}


def measure(url: str, args: argparse.Namespace, d: Path) -> dict[str, Any]:
    store, now, names = fresh_store(url, args.nodes)
    t = time.monotonic()
    try:
        made = write_month(store, names, args.days, args.compress, now)
        made["goodput_repeated"] = goodput_month(store, args.nodes, args.days,
                                                 made["goodput_jobs"], now)
        rows = counts(store)
    finally:
        store.close()
    write_s = time.monotonic() - t
    print(f"  written in {write_s:.0f} s: {rows}", flush=True)
    cfg = d / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n[slurm]\nscontrol = "/bin/false"\n'
                   'sinfo = "/bin/false"\nsqueue = "/bin/false"\n')
    load0 = round(os.getloadavg()[0], 1)
    set_gpus = d / "sg-gpus.toml"
    set_gpus.write_text(cfg.read_text() + f"[checks.gpu]\nexpected_count = {GPUS}\n")
    cmds = {}
    for name, argv in COMMANDS.items():
        cmds[name] = timed(set_gpus if "GPUs per node set" in name else cfg, argv, args.n)
        print(f"  {name}: {cmds[name]}", flush=True)
    return {"made": made, "rows": rows, "write_s": round(write_s, 1), "commands": cmds,
            "load": [load0, round(os.getloadavg()[0], 1)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--compress", type=int, default=96)
    ap.add_argument("--n", type=int, default=3, help="runs of each command (median)")
    ap.add_argument("--no-pg", action="store_true", help="SQLite only")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    out: dict[str, Any] = {"nodes": args.nodes, "days": args.days, "compress": args.compress,
                           "jobs_per_hour": JOBS_PER_HOUR, "date": time.strftime("%Y-%m-%d"),
                           "n": args.n, "engines": {}}
    with tempfile.TemporaryDirectory() as d:
        out["engines"]["sqlite"] = measure(f"sqlite:///{d}/s.db", args, Path(d))
    if not args.no_pg:
        from support.pgserver import PgServer, _pg_bin

        server = PgServer(_pg_bin() or "")
        server.start()
        try:
            with tempfile.TemporaryDirectory() as d:
                out["engines"]["postgresql"] = measure(server.url(server.create_db()), args,
                                                       Path(d))
        finally:
            server.stop()
    print(json.dumps({k: {c: v["median_s"] for c, v in e["commands"].items()}
                      for k, e in out["engines"].items()}))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
