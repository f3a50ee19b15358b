"""The store's steady size with the default retention (store.retention), and ingest while
expiry runs: a compressed month at 1,024 nodes, written through the store API, expired with
the defaults, measured per table; the arithmetic to 10,000 nodes and a year from per-node
rates (docs/store.md, "Retention", is rendered from the JSON this writes).

    python tests/bench/bench_store_retention.py [--nodes 1024] [--days 30] [--compress 48]
        [--no-pg] [--json docs/store_retention.json]

"Compressed": the month's 30 days of timestamps hold every kind of row in its real mix
(healthchecks with their 6 results, prologs and epilogs with 4, failures with their drain and
return, goodput's job rows), but a node's healthcheck comes every 300 x ``--compress`` s
instead of 300 s, so the month writes in minutes. Bytes per row are measured after expiry
(VACUUM first: SQLite's file and PostgreSQL's tables as packed as a steady store's reused
space); the steady size is those bytes times the rows the defaults keep at the real rates.
Ingest during expiry: serve's batch write (200 records) timed back to back before the
expiry and while it runs, same process, same store.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "bench"))

DAY = 86400.0
HC_INTERVAL = 300  # s between a node's healthchecks (the hooks' default cadence)
JOBS_PER_HOUR = 1200  # the site's job rate (issue goal), one-node jobs: a prolog and an epilog
FAIL_RATE = 0.0035  # failures per node-day (docs/fleet.md's published range: 2.3-6.5 per 1,000)
HC = ("gpu-count", "gpu-lost", "gpu-ecc", "gpu-xid", "fs-mount", "host-cpus")
JOB = ("gpu-count", "gpu-lost", "gpu-xid", "fs-mount")
TABLES = ("runs", "results", "events", "goodput_jobs", "goodput_job_nodes", "nodes")


def _rec(node: str, hook: str, at: float, job: str | None = None, bad: str = "") -> dict:
    from slurmguard.contract import CheckResult, Health
    from slurmguard.node.record import make_record

    names = JOB if hook != "healthcheck" else HC
    res = [CheckResult(n, Health.UNHEALTHY if n == bad else Health.HEALTHY,
                       "Xid 79: GPU has fallen off the bus" if n == bad else "") for n in names]
    return make_record(node, hook, res, "drain" if bad else "pass",
                       f"slurmguard: {bad}: Xid 79" if bad else "", job_id=job, started=at,
                       duration=0.1)


def write_month(store: Any, nodes: list[str], days: int, compress: int, now: float) -> dict:
    """The compressed month, day by day in batches of 2,000 (serve's writer's largest)."""
    from bench_goodput import breakdowns

    rng = random.Random(5)
    t0 = now - days * DAY
    step = HC_INTERVAL * compress
    per_day = len(nodes) * int(DAY // step)
    jobs_day = JOBS_PER_HOUR * 24 // compress
    made = {"healthcheck": 0, "job": 0, "failures": 0}
    for d in range(days):
        day0 = t0 + d * DAY
        recs = [_rec(nodes[i % len(nodes)], "healthcheck", day0 + i * DAY / per_day)
                for i in range(per_day)]
        for j in range(jobs_day):
            at, node, job = day0 + j * DAY / jobs_day, rng.choice(nodes), f"{d}{j:06d}"
            recs += [_rec(node, "prolog", at, job), _rec(node, "epilog", at + 600, job)]
        expect = FAIL_RATE * len(nodes)  # not compressed: failures per node-day as they are
        fails = [(rng.choice(nodes), day0 + rng.uniform(0, DAY))
                 for _ in range(int(expect) + (rng.random() < expect % 1))]
        recs += [_rec(n, "healthcheck", at, bad="gpu-xid") for n, at in fails]
        recs.sort(key=lambda r: r["started"])
        for i in range(0, len(recs), 2000):
            store.nodes.record_many(recs[i:i + 2000])
        for n, at in fails:
            store.nodes.record_event(n, "drain", "slurmguard", "slurmguard: gpu-xid: Xid 79",
                                     source="gpu-xid", at=at + 5)
            store.nodes.record_event(n, "clear", "admin:ops", "returned", source="admin",
                                     at=at + 6 * 3600)
        made["healthcheck"] += per_day
        made["job"] += 2 * jobs_day
        made["failures"] += len(fails)
    t = time.monotonic()
    gp = breakdowns(JOBS_PER_HOUR * 24 * days // compress, len(nodes))
    print(f"  {len(gp)} goodput breakdowns in {time.monotonic() - t:.0f} s", flush=True)
    for i in range(0, len(gp), 2000):
        store.goodput.record(gp[i:i + 2000])
    made["goodput_jobs"] = len(gp)
    return made


def table_bytes(store: Any) -> dict[str, int]:
    """Bytes of each table with its indexes, after VACUUM."""
    from sqlalchemy import text

    eng = store.engine
    if eng.dialect.name == "sqlite":
        with eng.connect() as c:
            c.exec_driver_sql("VACUUM")
            rows = c.execute(text(
                "SELECT m.tbl_name, sum(s.pgsize) FROM dbstat s JOIN sqlite_master m "
                "ON s.name = m.name GROUP BY m.tbl_name")).all()
        return {t: int(b) for t, b in rows if t in TABLES}
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.exec_driver_sql("VACUUM FULL ANALYZE")
        return {t: int(c.execute(text(f"SELECT pg_total_relation_size('{t}')")).scalar_one())
                for t in TABLES}


def counts(store: Any) -> dict[str, int]:
    from sqlalchemy import func, select

    from slurmguard.store.models import GoodputJobNode

    out = store.counts()
    with store.engine.connect() as c:
        out["goodput_job_nodes"] = int(c.execute(
            select(func.count()).select_from(GoodputJobNode)).scalar_one())
    return out


def _ingest(store: Any, k: int) -> float:
    recs = [_rec(f"live{(k * 200 + i) % 5000:05d}", "healthcheck", time.time())
            for i in range(200)]
    t = time.perf_counter()
    store.nodes.record_many(recs)
    return time.perf_counter() - t


def ingest_during_expiry(store: Any, policy: Any, now: float) -> dict:
    quiet = [_ingest(store, k) for k in range(30)]
    box: dict[str, Any] = {}
    th = threading.Thread(target=lambda: box.update(st=store.retention.expire(policy, now=now)))
    busy: list[float] = []
    th.start()
    k = 1000
    while th.is_alive():
        busy.append(_ingest(store, k))
        k += 1
    th.join()
    st = box["st"]

    def q(xs: list[float], p: float) -> float:
        return round(1000 * sorted(xs)[min(len(xs) - 1, int(p * len(xs)))], 1)

    return {"expiry": st.as_dict(), "quiet_ms": {"p50": q(quiet, 0.5), "p99": q(quiet, 0.99),
                                                 "max": q(quiet, 1.0), "batches": len(quiet)},
            "during_ms": {"p50": q(busy, 0.5), "p99": q(busy, 0.99), "max": q(busy, 1.0),
                          "batches": len(busy)}}


def fresh_store(url: str, n: int) -> tuple[Any, float, list[str]]:
    """A new store at ``url`` (schema made), now, and the fleet's ``n`` node names."""
    from slurmguard.store.api import Store

    Store.upgrade({"url": url})
    return Store.open(url=url), time.time(), [f"gpu{i:05d}" for i in range(1, n + 1)]


def measure(url: str, args: argparse.Namespace) -> dict:
    from slurmguard.store.retention import RetentionPolicy

    store, now, nodes = fresh_store(url, args.nodes)
    t = time.monotonic()
    try:
        made = write_month(store, nodes, args.days, args.compress, now)
        write_s = time.monotonic() - t
        before = counts(store)
        print(f"  written in {write_s:.0f} s: {before}", flush=True)
        size_before = table_bytes(store)
        ing = ingest_during_expiry(store, RetentionPolicy(), now)
        rows = counts(store)
        print(f"  expired: {ing['expiry']}", flush=True)
        size = table_bytes(store)
    finally:
        store.close()
    return {"made": made, "write_s": round(write_s, 1), "rows_before": before,
            "bytes_before": size_before, "rows": rows, "bytes": size, "ingest": ing}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--compress", type=int, default=48)
    ap.add_argument("--no-pg", action="store_true",
                    help="SQLite only; with --json, keep the file's other engines")
    ap.add_argument("--only-pg", action="store_true",
                    help="PostgreSQL only; with --json, keep the file's other engines")
    ap.add_argument("--json", metavar="PATH", help="Write the figures here (docs/store.md's).")
    args = ap.parse_args()
    import os

    from support.retention_doc import steady

    out: dict[str, Any] = {"nodes": args.nodes, "days": args.days, "compress": args.compress,
                           "hc_interval": HC_INTERVAL, "jobs_per_hour": JOBS_PER_HOUR,
                           "fail_rate": FAIL_RATE, "date": time.strftime("%Y-%m-%d"),
                           "load": [round(x, 1) for x in os.getloadavg()], "engines": {}}
    if (args.only_pg or args.no_pg) and args.json and Path(args.json).exists():
        # one engine measured again: the file's other engine stays as it was measured
        old = json.loads(Path(args.json).read_text())
        redo = "postgresql" if args.only_pg else "sqlite"
        out["engines"] = {k: v for k, v in old["engines"].items() if k != redo}
        out["load_by_engine"] = old.get("load_by_engine", {})
    out.setdefault("load_by_engine", {})
    if not args.only_pg:
        load0 = [round(x, 1) for x in os.getloadavg()]
        with tempfile.TemporaryDirectory() as d:
            out["engines"]["sqlite"] = measure(f"sqlite:///{d}/s.db", args)
        out["load_by_engine"]["sqlite"] = [load0[0], round(os.getloadavg()[0], 1)]
    if not args.no_pg:
        from support.pgserver import PgServer, _pg_bin

        server = PgServer(_pg_bin() or "")
        server.start()
        load0 = [round(x, 1) for x in os.getloadavg()]
        try:
            out["engines"]["postgresql"] = measure(server.url(server.create_db()), args)
        finally:
            server.stop()
        out["load_by_engine"]["postgresql"] = [load0[0], round(os.getloadavg()[0], 1)]
    out["load_after"] = [round(x, 1) for x in os.getloadavg()]
    for name, e in out["engines"].items():
        s = steady(out, name)
        print(f"{name}: month written in {e['write_s']} s; expiry {e['ingest']['expiry']}")
        print(f"  ingest ms quiet {e['ingest']['quiet_ms']}  during expiry {e['ingest']['during_ms']}")
        print(f"  bytes/row {s['bytes_per_row']}")
        for n in (1024, 10000):
            print(f"  {n} nodes: steady {s['steady_gb'][str(n)]:.1f} GB; a year without "
                  f"retention {s['year_unexpired_gb'][str(n)]:.0f} GB")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
