"""EXPLAIN (ANALYZE) of the store's hot queries on a fleet-sized PostgreSQL: 10,000 nodes,
10,000,000 check results (5,000,000 runs) over 30 days, filled inside PostgreSQL with
generate_series. Run by hand:

    python tests/bench/bench_store_explain.py [--nodes 10000] [--results 10000000]
        [--url postgresql+psycopg://...]   # an existing EMPTY database instead of a test server
        [--plans]                           # print every plan, not only the summary

The queries are the real ones: the store methods below run against the filled store while a
SQLAlchemy listener records each statement and its parameters, and each is then run again
under ``EXPLAIN (ANALYZE, BUFFERS)`` on the same connection. A ``Seq Scan`` on runs, results
or events (the tables that grow with the fleet's history) is flagged: a hot path must read
them by an index.

| what | store call |
|---|---|
| the gate (8-node job) | ``nodes.columns`` |
| serve's policy pass | ``nodes.active``, ``nodes.policy_views``, ``nodes.fleet_failure_rate``, ``nodes.seen_since``, ``nodes.drained_by_us_since`` |
| serve's /metrics | ``nodes.state_counts``, the fleet gauges' ``load_history`` (30 days) |
| ``slurmguard nodes`` | ``nodes.summary()`` (every node) |
| ``slurmguard node show N`` | ``nodes.summary([N])``, ``nodes.history(N)``, ``node_risks(nodes=[N])`` |

The fill: node i's runs every 30 days / (runs per node), 2 results each; one run in 97
unhealthy, one in 211 degraded; hooks prolog, epilog, healthcheck in turn; 5 events per node
(drains by slurmguard and by admins, clears, a lemon_cleared). Foreign keys are not checked
during the fill (``session_replication_role = replica``, the data is consistent by
construction) and the history tables' indexes are built after it, as a restore would.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

DAY = 86400.0
BIG = ("runs", "results", "events")


def fill(engine, nodes: int, results: int, now: float) -> None:  # noqa: ANN001
    from sqlalchemy import text

    from slurmguard.store.models import Event, Result, Run

    runs = results // 2
    span = 30 * DAY
    t0 = now - span
    tables = [Run.__table__, Result.__table__, Event.__table__]
    with engine.begin() as conn:
        conn.execute(text("SET session_replication_role = replica"))
        for t in tables:
            for ix in t.indexes:
                ix.drop(conn)
        conn.execute(text(
            "INSERT INTO nodes (id, name, first_seen, lemon, burnin_required, probation, "
            "probation_passes) SELECT g, 'gpu' || lpad(g::text, 5, '0'), :t0, false, false, "
            "false, 0 FROM generate_series(1, :n) g"), {"t0": t0, "n": nodes})
        step = time.monotonic()
        conn.execute(text("""
            INSERT INTO runs (id, record_id, node_id, hook, job_id, started, duration, health,
                              action, reason, received, version)
            SELECT g, 'r' || g, 1 + g % :n, (ARRAY['prolog','epilog','healthcheck'])[1 + g % 3],
                   CASE WHEN g % 3 = 2 THEN NULL ELSE (g / :n)::text END,
                   :t0 + g * (:span / :runs), 0.5,
                   CASE WHEN g % 97 = 0 THEN 'unhealthy' WHEN g % 211 = 0 THEN 'degraded'
                        ELSE 'healthy' END,
                   CASE WHEN g % 97 = 0 THEN 'drain' ELSE 'pass' END,
                   CASE WHEN g % 97 = 0 THEN 'slurmguard: gpu-xid: Xid 79' ELSE '' END,
                   :t0 + g * (:span / :runs), '0.9.0'
            FROM generate_series(1, :runs) g"""),
            {"n": nodes, "t0": t0, "span": span, "runs": runs})
        print(f"  runs: {runs:,} in {time.monotonic() - step:.0f} s", flush=True)
        step = time.monotonic()
        conn.execute(text("""
            INSERT INTO results (run_id, node_id, started, name, health, reason, details, duration)
            SELECT r.id, r.node_id, r.started, c.name,
                   CASE WHEN c.k = 1 THEN r.health ELSE 'healthy' END,
                   CASE WHEN c.k = 1 AND r.health = 'unhealthy' THEN 'Xid 79' ELSE '' END,
                   '{}', 0.1
            FROM runs r CROSS JOIN (VALUES (1, 'gpu-xid'), (2, 'ib-link')) AS c(k, name)"""))
        print(f"  results: {runs * 2:,} in {time.monotonic() - step:.0f} s", flush=True)
        conn.execute(text("""
            INSERT INTO events (node_id, at, kind, actor_kind, actor, source, reason, details)
            SELECT 1 + g % :n, :t0 + g * (:span / (:n * 5)),
                   (ARRAY['drain','clear','drain','permit','lemon_cleared'])[1 + g % 5],
                   CASE WHEN g % 10 = 2 THEN 'admin' ELSE 'slurmguard' END,
                   CASE WHEN g % 10 = 2 THEN 'alice' ELSE 'slurmguard' END,
                   'gpu-xid', 'slurmguard: gpu-xid: Xid 79', '{}'
            FROM generate_series(0, :n * 5 - 1) g"""), {"n": nodes, "t0": t0, "span": span})
        conn.execute(text("""
            UPDATE nodes SET last_seen = r.started, last_health = r.health, last_hook = r.hook,
                   last_reason = r.reason, last_run_id = r.id
            FROM (SELECT DISTINCT ON (node_id) node_id, id, started, health, hook, reason
                  FROM runs ORDER BY node_id, started DESC) r WHERE nodes.id = r.node_id"""))
        step = time.monotonic()
        for t in tables:
            for ix in t.indexes:
                ix.create(conn)
        print(f"  indexes: {time.monotonic() - step:.0f} s", flush=True)
        for seq, table in (("nodes_id_seq", "nodes"), ("runs_id_seq", "runs"),
                           ("results_id_seq", "results"), ("events_id_seq", "events")):
            conn.execute(text(f"SELECT setval('{seq}', (SELECT max(id) FROM {table}))"))
        conn.execute(text("SET session_replication_role = DEFAULT"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))


def hot_calls(store, now: float) -> list[tuple[str, object]]:  # noqa: ANN001
    from slurmguard.fleet.params import RiskParams
    from slurmguard.store.fleet import load_history, node_risks

    window = 3600.0  # policy.window, policy.blast_window
    job = [f"gpu{i:05d}" for i in range(1001, 1009)]
    return [
        ("gate: nodes.columns (8 nodes)", lambda: store.nodes.columns(job, [
            "name", "last_seen", "last_health", "last_reason", "lemon", "lemon_reason",
            "burnin_required", "risk_score", "risk_at"])),
        ("policy: nodes.active", lambda: store.nodes.active(now - window)),
        ("policy: nodes.policy_views (500 nodes)", lambda: store.nodes.policy_views(
            [f"gpu{i:05d}" for i in range(1, 501)], window=window, now=now)),
        ("policy: nodes.fleet_failure_rate", lambda: store.nodes.fleet_failure_rate(
            window=window, now=now)),
        ("policy: nodes.seen_since (2 min)", lambda: store.nodes.seen_since(now - 120)),
        ("policy: nodes.drained_by_us_since", lambda: store.nodes.drained_by_us_since(
            now - window)),
        ("metrics: nodes.state_counts", lambda: store.nodes.state_counts()),
        ("metrics: load_history (30 days, fleet)", lambda: load_history(
            store.engine, since=now - 30 * DAY, until=now, healthy=False)),
        ("nodes: nodes.summary() (every node)", lambda: store.nodes.summary(now=now)),
        ("node show: nodes.summary([N])", lambda: store.nodes.summary(["gpu01234"], now=now)),
        ("node show: nodes.history(N)", lambda: store.nodes.history("gpu01234")),
        ("node show: node_risks([N])", lambda: node_risks(
            store.engine, RiskParams(), now=now, nodes=["gpu01234"])),
    ]


def explain(store, now: float, show_plans: bool) -> list[str]:  # noqa: ANN001
    from sqlalchemy import event

    captured: list[tuple[str, object]] = []

    def listen(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if not executemany and statement.lstrip().upper().startswith("SELECT"):
            captured.append((statement, parameters))

    flagged = []
    print(f"\n{'query':<44} {'call ms':>9} {'stmts':>5} {'db ms':>8}  big tables read by")
    for label, call in hot_calls(store, now):
        captured.clear()
        event.listen(store.engine, "before_cursor_execute", listen)
        t0 = time.perf_counter()
        try:
            call()
        finally:
            event.remove(store.engine, "before_cursor_execute", listen)
        call_ms = (time.perf_counter() - t0) * 1000
        stmts = list(captured)
        db_ms = 0.0
        reads: set[str] = set()
        plans = []
        with store.engine.connect() as conn:
            for sql, params in stmts:
                rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).all()
                plan = "\n".join(r[0] for r in rows)
                m = re.search(r"Execution Time: ([\d.]+) ms", plan)
                db_ms += float(m.group(1)) if m else 0.0
                for kind, table in re.findall(
                        r"((?:Parallel )?Seq Scan|Index Only Scan|Index Scan|Bitmap Heap Scan)"
                        r"(?: Backward)?(?: using \S+)? on (\w+)", plan):
                    if table in BIG:
                        reads.add(f"{table}: {kind}")
                        if "Seq Scan" in kind:
                            flagged.append(f"{label}: {kind} on {table}")
                plans.append((sql, plan))
        print(f"{label:<44} {call_ms:9.1f} {len(stmts):5d} {db_ms:8.1f}  "
              f"{', '.join(sorted(reads)) or '-'}", flush=True)
        if show_plans:
            for sql, plan in plans:
                print("\n    " + " ".join(sql.split())[:300])
                print("    " + plan.replace("\n", "\n    "))
            print()
    return flagged


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--results", type=int, default=10_000_000)
    ap.add_argument("--url", help="an existing, empty PostgreSQL database (default: a test server)")
    ap.add_argument("--plans", action="store_true", help="print every plan")
    a = ap.parse_args()
    from slurmguard.store.api import Store
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    server = None
    url = a.url
    if url is None:
        from support.pgserver import PgServer, _pg_bin

        server = PgServer(_pg_bin() or "")
        server.start()
        url = server.url(server.create_db())
    try:
        engine = make_engine({"url": url})
        upgrade(engine)
        now = time.time()
        print(f"filling {a.nodes:,} nodes, {a.results:,} results ({a.results // 2:,} runs) "
              "over 30 days", flush=True)
        t0 = time.monotonic()
        fill(engine, a.nodes, a.results, now)
        print(f"filled in {time.monotonic() - t0:.0f} s", flush=True)
        engine.dispose()
        store = Store.open(url=url)
        try:
            explain(store, now, False)  # warm the cache once, as a running serve has it
            flagged = explain(store, now, a.plans)
        finally:
            store.close()
        print("\nsequential scans of a history table on a hot path:",
              "none" if not flagged else "")
        for f in sorted(set(flagged)):
            print("  " + f)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
