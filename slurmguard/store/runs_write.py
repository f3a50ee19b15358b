"""The batch write of result records (serve's writer thread: ``store.nodes.record_many``).

One transaction per batch on both engines: the new runs, their check results, the nodes'
current view, probation passes. What differs is how many statements it takes.

**PostgreSQL: four statements whatever the batch size.** Each table's rows go in ONE
statement: the rows travel as one JSON document, unrolled on the server by
``json_to_recordset()`` (``INSERT ... SELECT * FROM json_to_recordset(%(rows)s::json) AS
v(...)``). The statement text never changes, so psycopg prepares it once per connection and
the server neither parses nor plans it again. Measured before (tests/bench/bench_ingest_batch.py,
200 records of 2 results): psycopg's ``executemany`` sent one INSERT per row in pipeline mode
and its per-row Python work cost more than the database's (runs 7-8 ms, results 14-15 ms,
the nodes' UPDATE 6.5 ms per batch); the existing-id SELECT and the run-id SELECT were two
more round trips that ``ON CONFLICT (record_id) DO NOTHING RETURNING record_id, id``
replaces. Columns bound as arrays and unrolled by ``unnest()`` (the step before) still cost
9.3 ms of serve's CPU per batch, most of it psycopg's array dumper in Python, element by
element; one ``json.dumps`` (C) makes it 6.0 ms (docs/store.md). A record another replica stored a moment
ago is skipped by the database (it was an IntegrityError that failed the batch). Text
reaches PostgreSQL exactly: validation refuses NUL and lone surrogates, which neither text
nor JSON can carry (tests/test_store.py round-trips any other text).

**SQLite: executemany**, in process and already cheap (the database work of a 200-record
batch is about 3 ms); kept as it was, one prebuilt statement per table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from slurmguard.policy.types import UNHEALTHY, worst_health
from slurmguard.store.models import Node, Result, Run
from slurmguard.store.noderows import chunks, node_ids

# A join, not "name = ANY(%s)": psycopg prepares a statement from its fifth run on, and the
# generic plan of = ANY($1) cannot hash the array: a sequential scan comparing each row with
# every name (measured 10.9 ms for 200 names among 2,000 nodes, 0.8 ms as this join).
_PG_NODES = """
SELECT n.name, n.id FROM unnest(%(names)s::varchar[]) AS u(name) JOIN nodes n ON n.name = u.name"""
_PG_NEW_NODES = """
INSERT INTO nodes (name, first_seen, lemon, burnin_required, probation, probation_passes)
SELECT n, %(now)s, false, false, false, 0 FROM unnest(%(names)s::varchar[]) AS n
ON CONFLICT (name) DO NOTHING RETURNING name, id"""
_PG_RUNS = """
INSERT INTO runs (record_id, node_id, hook, job_id, started, duration, health, action, reason,
                  version, received)
SELECT v.*, %(received)s FROM json_to_recordset(%(rows)s::json) AS v(record_id varchar,
    node_id int, hook varchar, job_id varchar, started float8, duration float8, health varchar,
    action varchar, reason text, version varchar)
ON CONFLICT (record_id) DO NOTHING RETURNING record_id, id"""
_PG_RESULTS = """
INSERT INTO results (run_id, node_id, started, name, health, reason, details, duration)
SELECT * FROM json_to_recordset(%(rows)s::json) AS v(run_id int, node_id int, started float8,
    name varchar, health varchar, reason text, details text, duration float8)"""
# The node's current view follows its newest run only: a replayed old record is history,
# not news (the WHERE also guards against a newer run already stored).
_PG_VIEW = """
UPDATE nodes SET last_seen = v.started, last_health = v.health, last_hook = v.hook,
    last_reason = v.reason, last_run_id = v.run_id
FROM json_to_recordset(%(rows)s::json) AS v(id int, started float8, health varchar,
    hook varchar, reason text, run_id int)
WHERE nodes.id = v.id AND (nodes.last_seen IS NULL OR nodes.last_seen <= v.started)"""
_PG_PASSES = """
UPDATE nodes SET probation_passes = nodes.probation_passes + v.inc
FROM unnest(%(id)s::int[], %(inc)s::int[]) AS v(id, inc)
WHERE nodes.id = v.id AND nodes.probation"""


_RUN_KEYS = ("record_id", "node_id", "hook", "job_id", "started", "duration", "health",
             "action", "reason", "version")
_RESULT_KEYS = ("run_id", "node_id", "started", "name", "health", "reason", "details",
                "duration")
_VIEW_KEYS = ("id", "started", "health", "hook", "reason", "run_id")


def _rows(keys: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    """``rows`` as one JSON array of objects for json_to_recordset(): one C-speed dumps, where
    psycopg's array dumper spent Python time on every element."""
    return json.dumps([dict(zip(keys, row, strict=True)) for row in rows], ensure_ascii=False,
                      allow_nan=False)


def write_batch(conn: Any, recs: Sequence[dict[str, Any]], received: float) -> list[str]:
    """Store validated records ``recs`` on ``conn`` (in its transaction); the ids newly
    stored, in the order of ``recs``. Duplicates within ``recs`` and ids already stored are
    skipped."""
    seen: set[str] = set()
    unique = []
    for r in recs:
        if r["id"] not in seen:
            seen.add(r["id"])
            unique.append(r)
    if not unique:
        return []
    if conn.dialect.name == "postgresql":
        return _write_pg(conn, unique, received)
    return _write_sqlite(conn, unique, received)


def _run_row(r: dict[str, Any]) -> tuple[str, str]:
    """(health, reason) of a record's run: the worst result, the decision's reason or the
    first failing check's."""
    health = worst_health([x["health"] for x in r["results"]]) if r["results"] else "healthy"
    reason = r["decision"]["reason"]
    if not reason:
        failing = next((x for x in r["results"] if x["health"] == UNHEALTHY), None)
        reason = f"{failing['name']}: {failing['reason']}" if failing else ""
    return health, reason


def _passes(r: dict[str, Any], health: str) -> bool:
    # Probation counts passing jobs: an epilog of a job that found nothing wrong.
    return r["hook"] == "epilog" and bool(r["job_id"]) and health not in (UNHEALTHY, "error")


def _details(x: dict[str, Any]) -> str:
    return json.dumps(x["details"], sort_keys=True, default=str)


# ---------------------------------------------------------------------------- PostgreSQL

def _pg_node_ids(cur: Any, names: list[str], now: float) -> dict[str, int]:
    cur.execute(_PG_NODES, {"names": names})
    out: dict[str, int] = dict(cur.fetchall())
    missing = [n for n in names if n not in out]
    if missing:
        cur.execute(_PG_NEW_NODES, {"names": missing, "now": now})
        out.update(cur.fetchall())
        if len(out) < len(names):  # created by another replica since our SELECT
            cur.execute(_PG_NODES, {"names": [n for n in names if n not in out]})
            out.update(cur.fetchall())
    return out


def _write_pg(conn: Any, recs: list[dict[str, Any]], received: float) -> list[str]:
    # The DBAPI cursor of the SQLAlchemy connection: the same transaction, without
    # SQLAlchemy compiling or rebuilding parameters for thousands of values.
    cur = conn.connection.driver_connection.cursor()
    # One lock order for every writer: a record another replica is inserting right now
    # holds its unique-index entry until that transaction ends, so two batches that share
    # records in different orders would wait on each other (a deadlock, seen in the
    # overlapping-replicas test). In record-id order they queue instead.
    given = [r["id"] for r in recs]
    recs = sorted(recs, key=lambda r: r["id"])
    try:
        ids = _pg_node_ids(cur, sorted({r["node"] for r in recs}), received)
        runs = [_run_row(r) for r in recs]
        cur.execute(_PG_RUNS, {"received": received, "rows": _rows(_RUN_KEYS, [
            (r["id"], ids[r["node"]], r["hook"], r["job_id"], r["started"], r["duration"], h,
             r["decision"]["action"], why, r["slurmguard_version"])
            for r, (h, why) in zip(recs, runs, strict=True)])})
        run_ids: dict[str, int] = dict(cur.fetchall())
        fresh = [(r, h, why) for r, (h, why) in zip(recs, runs, strict=True) if r["id"] in run_ids]
        if not fresh:
            return []
        rows = [(run_ids[r["id"]], ids[r["node"]], r["started"], x["name"], x["health"],
                 x["reason"], _details(x), x["duration"])
                for r, _, _ in fresh for x in r["results"]]
        if rows:
            cur.execute(_PG_RESULTS, {"rows": _rows(_RESULT_KEYS, rows)})
        newest: dict[int, tuple[dict[str, Any], str, str]] = {}
        passes: dict[int, int] = {}
        for r, h, why in fresh:
            nid = ids[r["node"]]
            if nid not in newest or r["started"] >= newest[nid][0]["started"]:
                newest[nid] = (r, h, why)
            if _passes(r, h):
                passes[nid] = passes.get(nid, 0) + 1
        order = sorted(newest)  # one lock order for every writer: replicas never deadlock here
        cur.execute(_PG_VIEW, {"rows": _rows(_VIEW_KEYS, [
            (n, newest[n][0]["started"], newest[n][1], newest[n][0]["hook"], newest[n][2],
             run_ids[newest[n][0]["id"]]) for n in order])})
        if passes:
            cur.execute(_PG_PASSES, {"id": sorted(passes), "inc": [passes[n] for n in sorted(passes)]})
        stored = {r["id"] for r, _, _ in fresh}
        return [i for i in given if i in stored]  # in the caller's order
    finally:
        cur.close()


# ---------------------------------------------------------------------------- SQLite

def _write_sqlite(conn: Any, recs: list[dict[str, Any]], received: float) -> list[str]:
    seen: set[str] = set()
    for chunk in chunks([r["id"] for r in recs]):
        seen.update(conn.execute(select(Run.record_id).where(Run.record_id.in_(chunk))).scalars())
    fresh = [r for r in recs if r["id"] not in seen]
    if not fresh:
        return []
    ids = node_ids(conn, {r["node"] for r in fresh}, received)
    # executemany with prebuilt statements: building one statement per row costs more
    # than the database work (measured: 4 ms vs 0.5 ms per record on SQLite).
    runs = []
    for r in fresh:
        health, reason = _run_row(r)
        runs.append({"record_id": r["id"], "node_id": ids[r["node"]], "hook": r["hook"],
                     "job_id": r["job_id"], "started": r["started"], "duration": r["duration"],
                     "health": health, "action": r["decision"]["action"], "reason": reason,
                     "received": received, "version": r["slurmguard_version"], "_rec": r})
    conn.execute(insert(Run), [{k: v for k, v in run.items() if k != "_rec"} for run in runs])
    run_ids: dict[str, int] = {}
    for chunk in chunks([r["id"] for r in fresh]):
        run_ids.update(conn.execute(select(Run.record_id, Run.id).where(
            Run.record_id.in_(chunk))).all())
    results = [{"run_id": run_ids[r["id"]], "node_id": ids[r["node"]], "started": r["started"],
                "name": x["name"], "health": x["health"], "reason": x["reason"],
                "details": _details(x), "duration": x["duration"]}
               for r in fresh for x in r["results"]]
    if results:
        conn.execute(insert(Result), results)
    newest: dict[int, dict[str, Any]] = {}
    passes: dict[int, int] = {}
    for run in runs:
        nid = run["node_id"]
        if nid not in newest or run["started"] >= newest[nid]["started"]:
            newest[nid] = run
        if _passes(run["_rec"], run["health"]):
            passes[nid] = passes.get(nid, 0) + 1
    conn.execute(
        update(Node).where(Node.id == bindparam("b_id"),
                           Node.last_seen.is_(None) | (Node.last_seen <= bindparam("b_started")))
        .values(last_seen=bindparam("b_started"), last_health=bindparam("b_health"),
                last_hook=bindparam("b_hook"), last_reason=bindparam("b_reason"),
                last_run_id=bindparam("b_run")),
        [{"b_id": nid, "b_started": run["started"], "b_health": run["health"],
          "b_hook": run["hook"], "b_reason": run["reason"], "b_run": run_ids[run["record_id"]]}
         for nid, run in newest.items()])
    if passes:
        conn.execute(
            update(Node).where(Node.id == bindparam("b_id"), Node.probation.is_(True))
            .values(probation_passes=Node.probation_passes + bindparam("b_inc")),
            [{"b_id": nid, "b_inc": n} for nid, n in passes.items()])
    return [r["id"] for r in fresh]
