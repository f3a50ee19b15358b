"""Store reads for fleet figures, the node risk score and policy replay (slurmguard/fleet/).

Functions of an Engine (``store.engine``), like store/goodput.py, so that Store's own module
stays as it is. They return :class:`slurmguard.fleet.history.History`: plain data, read in a
few range queries (runs by time, non-healthy results, events, alerts, burn-in verdicts),
never one query per node: a 10,000-node month is read in seconds (tests/bench/).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, case, select

from slurmguard.fleet.history import Alert, Ev, History, Run
from slurmguard.fleet.params import RiskParams
from slurmguard.fleet.risk import Risk
from slurmguard.nodeset import expand
from slurmguard.store.engine import guard
from slurmguard.store.models import BurninRun, Event, FleetAlert, Node, Result
from slurmguard.store.models import Run as RunRow

_NOT_HEALTHY = ("unhealthy", "degraded")
_JUDGED_NOT_HEALTHY = ("unhealthy", "degraded", "error", "unsupported")
_CHUNK = 500  # node ids per IN (...): below SQLite's and PostgreSQL's parameter limits


def node_risks(engine: Engine, p: RiskParams | None = None, *, now: float | None = None,
               nodes: Sequence[str] | None = None) -> dict[str, Risk]:
    """The risk score of every known node (or of ``nodes``) now, from the store."""
    from slurmguard.fleet.risk import DAY, current

    p = p or RiskParams()
    now = time.time() if now is None else now
    few = nodes is not None and len(set(nodes)) <= _CHUNK
    h = load_history(engine, since=now - p.lookback_days * DAY, until=now, healthy=False,
                     nodes=nodes if few else None)
    risks = current(h, p, now)
    return risks if nodes is None else {n: r for n, r in risks.items() if n in set(nodes)}


def load_history(engine: Engine, *, since: float, until: float, lookback: float = 0.0,
                 healthy: bool = True, nodes: Sequence[str] | None = None) -> History:
    """The fleet's history over [since - lookback, until].

    Healthy runs are read (``healthy=True``) only for the nodes that need them: those with a
    failing run, a drain or a return in the window (replay's lemon and flapping rules, and
    probation, look at them; the figures and the risk score do not). A month of a 10,000-node
    fleet holds millions of healthy runs; most nodes never need theirs."""
    lo = since - lookback
    h = History(since=since, until=until)
    with guard(engine, "fleet history"), engine.connect() as conn:
        names: dict[int, str] = {}
        stmt = select(Node.id, Node.name, Node.first_seen)
        if nodes is not None:  # a few nodes (node show): their rows only
            stmt = stmt.where(Node.name.in_(sorted(set(nodes))[:_CHUNK]))
        for nid, name, first in conn.execute(stmt):
            names[nid] = name
            h.first_seen[name] = float(first)
        only = [RunRow.node_id.in_(sorted(names))] if nodes is not None else []
        cols = (RunRow.id, RunRow.node_id, RunRow.started, RunRow.health, RunRow.hook,
                RunRow.job_id)
        # health IN (...), not != "healthy": an index range per health value, not a scan.
        stmt = (select(*cols).where(RunRow.health.in_(_JUDGED_NOT_HEALTHY), RunRow.started >= lo,
                                    RunRow.started <= until, *only).order_by(RunRow.started))
        rows = conn.execute(stmt).fetchall()
        # The checks of those runs by run id (an index), never a scan of every result.
        checks: dict[int, tuple[list[str], list[str]]] = {}
        counts: dict[int, list[tuple[str, int]]] = {}
        ids_ = [r[0] for r in rows]
        # The details only of the checks whose counts the risk score reads (a CASE: the
        # other results' details are never sent).
        details = case((Result.name.in_(sorted(_COUNTED)), Result.details), else_=None)
        for i in range(0, len(ids_), _CHUNK):
            for run_id, name, health, det in conn.execute(
                    select(Result.run_id, Result.name, Result.health, details).where(
                        Result.run_id.in_(ids_[i:i + _CHUNK]), Result.health.in_(_NOT_HEALTHY))):
                bad, warn = checks.setdefault(run_id, ([], []))
                (bad if health == "unhealthy" else warn).append(name)
                n = _count(name, det)
                if n is not None:
                    counts.setdefault(run_id, []).append((name, n))
        _runs(h, rows, names, checks, counts)
        _events(h, conn, names, lo, until, nodes is not None)
        if healthy:
            ids = {v: k for k, v in names.items()}
            need = sorted(ids[n] for n in set(h.runs) | set(h.events))
            for i in range(0, len(need), _CHUNK):
                # No condition on health here: it would steer SQLite to the (health,
                # started) index, every healthy run of the fleet, instead of these nodes'.
                stmt = (select(*cols).where(RunRow.node_id.in_(need[i:i + _CHUNK]),
                                            RunRow.started >= lo, RunRow.started <= until)
                        .order_by(RunRow.started))
                _runs(h, [r for r in conn.execute(stmt).fetchall() if r[3] == "healthy"],
                      names, checks)
        for a in conn.execute(select(FleetAlert).where(FleetAlert.opened <= until)):
            end = a.closed if a.closed is not None else a.updated
            if end >= lo:
                h.alerts.append(Alert(a.opened, a.updated, a.closed, a.cause, a.scope, frozenset(
                    expand(a.nodes, source="fleet_alerts.nodes", allow_empty=True))))
        for nid, at, verdict in conn.execute(
                select(BurninRun.node_id, BurninRun.verdict_at, BurninRun.verdict).where(
                    BurninRun.verdict_at >= lo, BurninRun.verdict_at <= until)
                .order_by(BurninRun.verdict_at)):
            if nid in names:
                h.burnin.setdefault(names[nid], []).append((float(at), str(verdict)))
    return h


def _ecc_lifetime(details: str) -> int | None:
    """gpu-ecc: lifetime uncorrectable ECC errors, summed over the GPUs that report them."""
    gpus = json.loads(details).get("gpus") or []
    vals = [g.get("aggregate_uncorrected") for g in gpus if isinstance(g, dict)]
    vals = [v for v in vals if isinstance(v, int)]
    return sum(vals) if vals else None


def _remap_new(details: str) -> int | None:
    """gpu-remap: rows remapped since the check's previous reading, over the GPUs."""
    n = json.loads(details).get("new_rows")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


# check -> what reads its count from its details (Run.counts; slurmguard/fleet/risk.py)
_COUNTED: dict[str, Callable[[str], int | None]] = {"gpu-ecc": _ecc_lifetime,
                                                    "gpu-remap": _remap_new}


@lru_cache(maxsize=4096)
def _count(name: str, details: str | None) -> int | None:
    """The count of one result's details (cached: a node's runs repeat the same details)."""
    if not details:
        return None
    try:
        return _COUNTED[name](details)
    except (ValueError, AttributeError, TypeError):  # details that are not what the check writes
        return None


def _runs(h: History, rows: Iterable[Any], names: dict[int, str],
          checks: dict[int, tuple[list[str], list[str]]],
          counts: dict[int, list[tuple[str, int]]] | None = None) -> None:
    for run_id, nid, at, health, hook, job_id in rows:
        node = names.get(nid)
        if node is None:
            continue
        if health == "healthy":
            h.healthy.setdefault(node, []).append(at)
            if hook == "epilog" and job_id:
                h.passes.setdefault(node, []).append(at)
            continue
        bad, warn = checks.get(run_id, ((), ()))
        h.runs.setdefault(node, []).append(Run(at, health, hook, job_id, tuple(sorted(bad)),
                                               tuple(sorted(warn)),
                                               tuple(sorted((counts or {}).get(run_id, ())))))
        if hook == "epilog" and job_id and health == "degraded":
            h.passes.setdefault(node, []).append(at)


def _events(h: History, conn: Any, names: dict[int, str], lo: float, until: float,
            only: bool) -> None:
    stmt = (select(Event.node_id, Event.at, Event.kind, Event.actor_kind, Event.source,
                   Event.reason, Event.actor).where(Event.at >= lo, Event.at <= until)
            .order_by(Event.at, Event.id))
    if only:
        stmt = stmt.where(Event.node_id.in_(sorted(names)))
    for nid, at, kind, actor_kind, source, reason, actor in conn.execute(stmt):
        h.events.setdefault(names[nid], []).append(Ev(at, kind, actor_kind, source, reason,
                                                      actor))
    for evs in h.events.values():  # per node, in time order (the query sorts the fleet)
        evs.sort(key=lambda e: e.at)
