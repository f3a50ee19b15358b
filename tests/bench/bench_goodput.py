"""Goodput report benchmark: 100,000 jobs and 1,000,000 results in a SQLite store.

    python tests/bench/bench_goodput.py [--jobs 100000] [--results 1000000] [--n 7] [--pg]

Builds the store once (cached under /tmp/sg-bench-goodput; schema from sql/schema-sqlite.sql;
1,000,000 results in 200,000 hook runs over 2,000 nodes; 100,000 accounted jobs over 40 days,
1-8 nodes each, 4 partitions, 200 users, breakdowns from the real accounting function), then
prints the median of n runs of the whole `python -m slurmguard goodput --since 30d --json`
process, and of the same with `--by partition|user|node`, and of the store query alone.
Target (issue 11): `goodput --since 30d` median <= 2 s. ``--pg`` also times a real PostgreSQL
store (tests/support/pgserver.py) filled with the same jobs.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from slurmguard.goodput.account import (  # noqa: E402
    Allocation,
    Fault,
    JobInputs,
    RunRecord,
    account,
)

NOW = time.time()
PARTITIONS = ("gpu", "gpu-large", "debug", "cpu")


def breakdowns(n: int, nodes: int) -> list[dict]:
    """Realistic job breakdowns: 0-3 node losses, some stalls, checkpoints, a few unknowns."""
    rng = random.Random(11)
    out = []
    for j in range(n):
        end = NOW - rng.uniform(0, 40 * 86400)
        width = rng.choice((1, 1, 2, 4, 8))
        first = rng.randrange(1, nodes - width)
        names = tuple(f"gpu{i:05d}" for i in range(first, first + width))
        losses = rng.choice((0, 0, 0, 1, 1, 2, 3))
        step = rng.uniform(0.5, 5.0)
        t = end - rng.uniform(600, 86400)
        allocs, runs, faults = [], [], []
        resume = 0
        for r in range(losses + 1):
            dur = rng.uniform(300, 7200)
            steps = int(dur / step * 0.9)
            allocs.append(Allocation(t, t + dur, names, 8 * width,
                                     "COMPLETED" if r == losses else "NODE_FAIL"))
            if rng.random() > 0.03:  # a few runs without the wrapper: unknown
                runs.append(RunRecord(r, t + 1, t + dur, resume if r else None,
                                      "success" if r == losses else "cancelled",
                                      (t + 30 + step, resume + 1), (t + 30 + steps * step, resume + steps),
                                      step, steps, ((t + 30 + steps * step * 0.5, resume + steps // 2, 3.0),),
                                      ((t + 60, t + 90),) if rng.random() < 0.1 else ()))
            if r < losses:
                faults.append(Fault(names[-1], t + dur + 5))
            resume += steps // 2
            t += dur + rng.uniform(5, 300)
        b = account(JobInputs(str(1_000_000 + j), tuple(allocs), tuple(runs), tuple(faults),
                              user=f"user{rng.randrange(200):03d}",
                              partition=rng.choice(PARTITIONS), state="COMPLETED"))
        out.append(b.to_dict())
    return out


def build(path: Path, jobs: int, results: int, nodes: int = 2000) -> None:
    from slurmguard.store import Store

    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    conn.executescript((REPO / "sql" / "schema-sqlite.sql").read_text())
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    rng = random.Random(7)
    conn.executemany(
        "INSERT INTO nodes (id, name, first_seen, lemon, burnin_required, probation, probation_passes)"
        " VALUES (?, ?, ?, 0, 0, 0, 0)",
        [(i, f"gpu{i:05d}", NOW - 40 * 86400) for i in range(1, nodes + 1)])
    checks = ["gpu-count", "gpu-xid", "gpu-ecc", "fs-mount", "ib-link"]
    run_rows, res_rows = [], []
    for rid in range(1, results // len(checks) + 1):
        node_id = rng.randrange(1, nodes + 1)
        started = NOW - rng.uniform(0, 40 * 86400)
        run_rows.append((rid, uuid.uuid4().hex, node_id, "prolog", str(rid), started, 0.5,
                         "healthy", "pass", "", started + 1, "0.1.0"))
        res_rows += [(rid, node_id, started, c, "healthy", "", "{}", 0.01) for c in checks]
        if len(res_rows) >= 200_000:
            _flush(conn, run_rows, res_rows)
    _flush(conn, run_rows, res_rows)
    conn.commit()
    conn.close()
    store = Store.open(url=f"sqlite:///{tmp}")
    rows = breakdowns(jobs, nodes)
    for i in range(0, len(rows), 5000):
        store.goodput.record(rows[i:i + 5000])
    store.close()
    tmp.rename(path)


def _flush(conn: sqlite3.Connection, runs: list, res: list) -> None:
    conn.executemany("INSERT INTO runs (id, record_id, node_id, hook, job_id, started, duration, "
                     "health, action, reason, received, version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", runs)
    conn.executemany("INSERT INTO results (run_id, node_id, started, name, health, reason, details, "
                     "duration) VALUES (?,?,?,?,?,?,?,?)", res)
    runs.clear()
    res.clear()


def time_cli(cfg: Path, args: list[str], n: int) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), SLURMGUARD_CONFIG=str(cfg))
    times, out = [], ""
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "slurmguard", "goodput", *args], env=env,
                           capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise SystemExit(f"goodput {args}: exit {r.returncode}: {r.stderr}")
        out = r.stdout
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--results", type=int, default=1_000_000)
    ap.add_argument("--n", type=int, default=7)
    ap.add_argument("--pg", action="store_true")
    args = ap.parse_args()
    d = Path("/tmp/sg-bench-goodput")
    d.mkdir(exist_ok=True)
    from slurmguard.store.version import HEAD

    db = d / f"store-{HEAD}-{args.jobs}-{args.results}.db"
    if not db.exists():
        t = time.perf_counter()
        build(db, args.jobs, args.results)
        print(f"built {db} in {time.perf_counter() - t:.0f} s")
    conn = sqlite3.connect(db)
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("nodes", "runs", "results", "goodput_jobs", "goodput_job_nodes")}
    in30 = conn.execute("SELECT count(*) FROM goodput_jobs WHERE ended >= ?", (NOW - 30 * 86400,)).fetchone()[0]
    conn.close()
    print(f"store: {counts}; {in30} jobs ended in the last 30 days")
    cfg = d / "sg.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n')
    stores = [("SQLite", cfg)]
    pg = None
    if args.pg:
        pg_cfg, pg = pg_config(d, db)
        stores.append(("PostgreSQL", pg_cfg))
    for name, c in stores:
        for extra in ([], ["--by", "partition"], ["--by", "user"], ["--by", "node"]):
            med, out = time_cli(c, ["--since", "30d", "--json", *extra], args.n)
            label = " ".join(["goodput --since 30d --json", *extra])
            print(f"{name}: `{label}` (whole process): median {med:.3f} s over {args.n}")
        from slurmguard import config
        from slurmguard.store import Store

        store = Store.open(config.load(str(c), env={}))
        q = []
        for _ in range(args.n):
            t = time.perf_counter()
            (fleet,) = store.goodput.totals(since=time.time() - 30 * 86400)
            q.append(time.perf_counter() - t)
        store.close()
        print(f"{name}: the fleet query alone: median {statistics.median(q) * 1e3:.1f} ms "
              f"({fleet[1]['jobs']} jobs, ETTR {fleet[1]['ettr']})")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"])
    print(f"bare `python -c pass`: {(time.perf_counter() - t) * 1e3:.0f} ms")
    if pg is not None:
        pg.stop()  # type: ignore[attr-defined]
    return 0


def pg_config(d: Path, db: Path) -> tuple[Path, object]:
    """A real PostgreSQL store (tests/support/pgserver.py) with the same goodput jobs (the results
    are not copied: the report reads goodput_jobs and goodput_job_nodes only)."""
    from sqlalchemy import insert
    from support import pgserver

    from slurmguard.store import Store
    from slurmguard.store.models import GoodputJob, GoodputJobNode

    srv = pgserver.PgServer(pgserver._pg_bin())  # type: ignore[arg-type]
    srv.start()
    url = srv.url(srv.create_db())
    Store.upgrade({"url": url})
    src = sqlite3.connect(db)
    st = Store.open(url=url)
    with st.engine.begin() as conn:
        for model in (GoodputJob, GoodputJobNode):
            table = model.__tablename__
            cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
            rows = [dict(zip(cols, r, strict=True)) for r in src.execute(f"SELECT * FROM {table}")]
            for i in range(0, len(rows), 5000):
                conn.execute(insert(model), rows[i:i + 5000])
        conn.exec_driver_sql("ANALYZE")
    st.close()
    cfg = d / "sg-pg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n')
    return cfg, srv


if __name__ == "__main__":
    sys.exit(main())
