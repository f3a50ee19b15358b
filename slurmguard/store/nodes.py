"""The store's nodes area: result records, node flags, the event ledger, fleet alerts, and
the views the fleet policy, triage and the admin commands read (``store.nodes``).

    store.nodes.record_results(record)           # one result record; False if already stored
    store.nodes.record_event("n1", "drain", "admin:alice", "bad fan")
    store.nodes.summary(["n1", "n2"])            # -> [NodeSummary]
    store.nodes.history("n1")                    # -> [TimelineItem], newest first

Every method raises :class:`~slurmguard.errors.StoreError` (one line) when the database
cannot be reached, and :class:`~slurmguard.errors.InputError` for a bad record or name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, and_, bindparam, func, insert, select, update

from slurmguard.contract import HEALTHS
from slurmguard.errors import InputError
from slurmguard.nodeset import expand, fold
from slurmguard.policy.params import PolicyParams
from slurmguard.policy.shared import SharedFault, covering, from_alert
from slurmguard.policy.types import DEGRADED, HEALTHY, UNHEALTHY, NodeView, Sample
from slurmguard.store.engine import guard
from slurmguard.store.models import EVENT_KINDS, Event, FleetAlert, Node, Result, Run
from slurmguard.store.noderows import chunks, node_ids
from slurmguard.store.records import validate_node, validate_record
from slurmguard.store.rows import (
    AlertRow,
    EventRow,
    NodeSummary,
    TimelineItem,
    _alert_row,
    _who,
    parse_actor,
)

_N = Node.__table__
_E = Event.__table__
_A = FleetAlert.__table__
def _node_name(node: str) -> str:
    return validate_node(node)


class Nodes:
    """Nodes and events: one per store, on its engine (``store.nodes``)."""

    def __init__(self, engine: Engine, conn: Any = None) -> None:
        self.engine = engine
        # Bound to one connection (store.serialized): the ledger's reads and writes below
        # run in that transaction instead of their own.
        self.conn = conn

    @contextmanager
    def _begin(self) -> Iterator[Any]:
        if self.conn is not None:
            yield self.conn
        else:
            with self.engine.begin() as conn:
                yield conn

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        if self.conn is not None:
            yield self.conn
        else:
            with self.engine.connect() as conn:
                yield conn

    # ------------------------------------------------------------------ writes

    def record_results(self, record: Mapping[str, Any], *, received: float | None = None) -> bool:
        """Store one result record; False when its ``id`` is already stored (exactly-once)."""
        return bool(self.record_many([record], received=received))

    def record_many(self, records: Sequence[Mapping[str, Any]], *,
                    received: float | None = None, validated: bool = False) -> list[str]:
        """Store a batch of records in one transaction; returns the ids newly stored.

        Records already stored (same ``id``) and duplicates within the batch are skipped, so
        replaying a spool any number of times stores each record once. ``validated``: the
        records are :func:`validate_record`'s output already (serve's request threads did it).
        """
        from slurmguard.store.runs_write import write_batch

        recs = [dict(r) for r in records] if validated else [validate_record(r) for r in records]
        received = time.time() if received is None else received
        with guard(self.engine, "record results"), self.engine.begin() as conn:
            return write_batch(conn, recs, received)

    def record_event(self, node: str, kind: str, actor: str, reason: str = "", *,
                     source: str = "", at: float | None = None,
                     details: Mapping[str, Any] | None = None) -> int:
        """Append one event to the drain ledger; returns its id.

        ``actor`` is ``slurmguard``, ``kubernetes``, ``slurm`` or ``admin:NAME``.
        """
        if kind not in EVENT_KINDS:
            raise InputError(f"event kind: expected one of {', '.join(EVENT_KINDS)}, got {kind!r}")
        actor_kind, actor_name = parse_actor(actor)
        at = time.time() if at is None else at
        with guard(self.engine, "record event"), self._begin() as conn:
            node_id = node_ids(conn, [_node_name(node)], at)[node]
            return int(conn.execute(insert(Event).values(
                node_id=node_id, at=at, kind=kind, actor_kind=actor_kind, actor=actor_name,
                source=source[:64], reason=reason[:1000],
                details=json.dumps(dict(details or {}), sort_keys=True, default=str),
            ).returning(Event.id)).scalar_one())

    def set_flags(self, node: str, **flags: Any) -> None:
        """Set node flags: lemon, lemon_reason, lemon_since, burnin_required, probation,
        probation_since, probation_passes. Creates the node row if needed."""
        allowed = {"lemon", "lemon_reason", "lemon_since", "burnin_required", "probation",
                   "probation_since", "probation_passes"}
        bad = set(flags) - allowed
        if bad:
            raise InputError(f"node flags: unknown {', '.join(sorted(bad))}")
        with guard(self.engine, "set node flags"), self.engine.begin() as conn:
            node_id = node_ids(conn, [_node_name(node)], time.time())[node]
            conn.execute(update(Node).where(Node.id == node_id).values(**flags))

    def return_node(self, node: str, actor: str, reason: str = "returned", *,
                    probation: bool = True, at: float | None = None) -> None:
        """An admin (or burn-in) returns a node: clear lemon/burn-in, start probation."""
        at = time.time() if at is None else at
        summary = self.summary([node])
        was_lemon = bool(summary and summary[0].lemon)
        self.set_flags(node, lemon=False, lemon_reason=None, lemon_since=None,
                       burnin_required=False, probation=probation,
                       probation_since=at if probation else None, probation_passes=0)
        if was_lemon:
            self.record_event(node, "lemon_cleared", actor, reason, source="lemon", at=at)
        if probation:
            self.record_event(node, "probation_start", actor, reason, source="probation", at=at)

    def open_alert(self, cause: str, scope: str, nodes: Sequence[str], message: str, *,
                   now: float | None = None, window: float = 3600.0) -> tuple[AlertRow, bool]:
        """Record one fleet alert per (cause, scope): reuse an open one updated within
        ``window``. Returns (alert, created)."""
        now = time.time() if now is None else now
        with guard(self.engine, "fleet alert"), self._begin() as conn:
            row = conn.execute(select(_A).where(
                FleetAlert.cause == cause, FleetAlert.scope == scope, FleetAlert.closed.is_(None),
                FleetAlert.updated >= now - window).order_by(FleetAlert.id.desc()).limit(1)).first()
            if row is not None:
                alert = row
                merged = fold(sorted(set(expand(alert.nodes, source="alert.nodes", allow_empty=True)) | set(nodes)))
                count = len(expand(merged, source="alert.nodes", allow_empty=True))
                conn.execute(update(FleetAlert).where(FleetAlert.id == alert.id).values(
                    updated=now, nodes=merged, count=count, message=message))
                created = False
                alert_id = alert.id
            else:
                ns = fold(sorted(set(nodes)))
                alert_id = conn.execute(insert(FleetAlert).values(
                    opened=now, updated=now, closed=None, cause=cause, scope=scope, nodes=ns,
                    count=len(set(nodes)), message=message).returning(FleetAlert.id)).scalar_one()
                created = True
            out = conn.execute(select(_A).where(FleetAlert.id == alert_id)).one()
            return _alert_row(out), created

    def close_alert(self, alert_id: int, *, now: float | None = None) -> None:
        with guard(self.engine, "close alert"), self.engine.begin() as conn:
            conn.execute(update(FleetAlert).where(FleetAlert.id == alert_id).values(
                closed=time.time() if now is None else now))

    # ------------------------------------------------------------------ reads

    def summary(self, nodes: Iterable[str] | None = None, *, now: float | None = None,
                window: float = 7 * 86400) -> list[NodeSummary]:
        """One summary per known node (all nodes, or those named), sorted by name."""
        now = time.time() if now is None else now
        names = None if nodes is None else sorted(set(nodes))
        with guard(self.engine, "node summary"), self.engine.connect() as conn:
            rows = []
            if names is None:
                rows = list(conn.execute(select(_N).order_by(_N.c.name)).all())
            else:
                for chunk in chunks(names):
                    rows.extend(conn.execute(select(_N).where(_N.c.name.in_(chunk))).all())
                rows.sort(key=lambda n: n.name)
            ids = [n.id for n in rows]
            failures: dict[int, int] = {}
            failing: dict[int, list[str]] = {}
            # Every node: one pass over the window's unhealthy runs (the (health, started)
            # index). Per chunk of 500 ids, each chunk read that same range again: 20 times
            # at 10,000 nodes, 1.1 s of 1.4 s (tests/bench/bench_store_explain.py).
            for chunk in ([None] if names is None else chunks(ids)):
                only = [] if chunk is None else [Run.node_id.in_(chunk)]
                failures.update(conn.execute(
                    select(Run.node_id, func.count()).where(
                        *only, Run.health == UNHEALTHY, Run.started >= now - window)
                    .group_by(Run.node_id)).all())
            last_runs = [n.last_run_id for n in rows if n.last_run_id is not None]
            for chunk in chunks(last_runs):
                for node_id, name in conn.execute(select(Result.node_id, Result.name).where(
                        Result.run_id.in_(chunk), Result.health == UNHEALTHY).order_by(Result.name)):
                    failing.setdefault(node_id, []).append(name)
        return [NodeSummary(
            name=n.name, last_seen=n.last_seen, last_health=n.last_health, last_hook=n.last_hook,
            last_reason=n.last_reason, failing_checks=tuple(failing.get(n.id, ())),
            failures=failures.get(n.id, 0), lemon=bool(n.lemon), lemon_reason=n.lemon_reason,
            burnin_required=bool(n.burnin_required), probation=bool(n.probation),
            probation_passes=n.probation_passes or 0) for n in rows]

    def history(self, node: str, *, since: float | None = None, limit: int = 200) -> list[TimelineItem]:
        """The node's results and events, newest first."""
        with guard(self.engine, "history"), self.engine.connect() as conn:
            node_id = conn.execute(select(Node.id).where(Node.name == node)).scalar()
            if node_id is None:
                return []
            cond_r = [Run.node_id == node_id] + ([Run.started >= since] if since else [])
            runs = conn.execute(select(Run.id, Run.started, Run.health, Run.hook, Run.reason)
                                .where(*cond_r).order_by(Run.started.desc()).limit(limit)).all()
            checks: dict[int, list[str]] = {}
            for chunk in chunks([r.id for r in runs]):
                for run_id, name in conn.execute(select(Result.run_id, Result.name).where(
                        Result.run_id.in_(chunk), Result.health == UNHEALTHY)):
                    checks.setdefault(run_id, []).append(name)
            cond_e = [Event.node_id == node_id] + ([Event.at >= since] if since else [])
            events = conn.execute(select(_E).where(*cond_e).order_by(Event.at.desc())
                                  .limit(limit)).all()
        items = [TimelineItem(r.started, node, "result", r.health, "", r.hook, r.reason,
                              tuple(sorted(checks.get(r.id, ())))) for r in runs]
        items += [TimelineItem(e.at, node, e.kind, "", _who(e.actor_kind, e.actor), e.source,
                               e.reason) for e in events]
        items.sort(key=lambda i: i.at, reverse=True)
        return items[:limit]

    def events(self, *, since: float | None = None, node: str | None = None,
               kinds: Sequence[str] | None = None, limit: int = 1000) -> list[EventRow]:
        """The event ledger across all actors, newest first."""
        stmt = select(_E, Node.name.label("node_name")).join(Node, Node.id == Event.node_id)
        if since is not None:
            stmt = stmt.where(Event.at >= since)
        if node is not None:
            stmt = stmt.where(Node.name == node)
        if kinds:
            stmt = stmt.where(Event.kind.in_(list(kinds)))
        with guard(self.engine, "events"), self._connect() as conn:
            rows = conn.execute(stmt.order_by(Event.at.desc(), Event.id.desc()).limit(limit)).all()
        return [EventRow(e.id, e.at, e.node_name, e.kind, e.actor_kind, e.actor, e.source,
                         e.reason, json.loads(e.details or "{}")) for e in rows]

    def alerts(self, *, open_only: bool = True, since: float | None = None) -> list[AlertRow]:
        stmt = select(_A)
        if open_only:
            stmt = stmt.where(FleetAlert.closed.is_(None))
        if since is not None:
            stmt = stmt.where(FleetAlert.updated >= since)
        with guard(self.engine, "alerts"), self.engine.connect() as conn:
            return [_alert_row(a) for a in conn.execute(stmt.order_by(FleetAlert.opened.desc()))]

    def lemon_candidates(self, params: PolicyParams | None = None, *,
                         now: float | None = None) -> list[tuple[str, str]]:
        """Nodes the fleet policy calls lemons (or flapping) now, not yet marked: [(node,
        reason)]. The one definition of a lemon is :func:`slurmguard.policy.lemon.lemon_verdict`
        with the thresholds of ``params`` (the ``[policy]`` section; PolicyParams() defaults),
        over the same views serve's policy pass reads."""
        from slurmguard.policy.lemon import lemon_verdict

        p = params or PolicyParams()
        now = time.time() if now is None else now
        views = self.policy_views(self.active(now - p.window), window=p.window, now=now,
                                  blast_window=p.blast_window)
        bad, judged = self.fleet_failure_rate(window=p.window, now=now)
        rate = bad / judged if judged else None
        out = []
        for name in sorted(views):
            verdict = None if views[name].lemon else lemon_verdict(views[name], now, p, rate)
            if verdict is not None:
                out.append((name, verdict.reason))
        return out

    def hook_speeds(self, *, since: float) -> dict[str, dict[str, float]]:
        """{hook: {node: mean duration of its runs since ``since``}} (checker errors left out)."""
        stmt = (select(Run.hook, Node.name, func.avg(Run.duration))
                .join(Node, Node.id == Run.node_id)
                .where(Run.started >= since, Run.health != "error")
                .group_by(Run.hook, Node.name))
        out: dict[str, dict[str, float]] = {}
        with guard(self.engine, "hook speeds"), self.engine.connect() as conn:
            for hook, node, mean in conn.execute(stmt):
                out.setdefault(hook, {})[node] = float(mean or 0.0)
        return out

    def fleet_failure_rate(self, *, window: float, now: float | None = None) -> tuple[int, int]:
        """(unhealthy runs, all judged runs) across the fleet within ``window``."""
        now = time.time() if now is None else now
        # health IN (every health), not no condition: one range of the (health, started)
        # index per health value. "started >= t" alone has no index to lead with, and
        # PostgreSQL scanned all of runs each policy pass (tests/bench/bench_store_explain.py:
        # 39 ms at 500,000 runs, growing with the fleet's history; the IN reads the window).
        with guard(self.engine, "failure rate"), self.engine.connect() as conn:
            rows = dict(conn.execute(select(Run.health, func.count()).where(
                Run.health.in_(HEALTHS), Run.started >= now - window)
                .group_by(Run.health)).all())
        judged = sum(v for k, v in rows.items() if k != "error")
        return int(rows.get(UNHEALTHY, 0)), int(judged)

    def shared_faults(self, *, since: float, blast_window: float) -> list[SharedFault]:
        """The fleet alerts that named a suspect shared cause (two nodes or more: the guard's
        own test, policy/blast.py) whose window reaches past ``since`` (policy/shared.py)."""
        stmt = select(_A).where(FleetAlert.count >= 2, FleetAlert.updated >= since - blast_window)
        with guard(self.engine, "shared faults"), self.engine.connect() as conn:
            faults = [from_alert(a.cause, a.scope, a.opened, a.updated, a.closed, blast_window,
                                 expand(a.nodes, source="fleet_alerts.nodes", allow_empty=True))
                      for a in conn.execute(stmt)]
        return [f for f in faults if f.end >= since]

    def policy_views(self, nodes: Iterable[str], *, window: float, now: float | None = None,
                     scopes: Mapping[str, frozenset[str]] | None = None,
                     blast_window: float = 3600.0) -> dict[str, NodeView]:
        """The policy's view of each named node: runs and foreign drains within ``window``,
        and the shared faults (fleet alerts) that cover it, by ``scopes`` (Slurm's partitions
        and config groups; without them, the fleet's alerts and those naming the node)."""
        now = time.time() if now is None else now
        since = now - window
        names = sorted(set(nodes))
        out: dict[str, NodeView] = {}
        faults = self.shared_faults(since=since, blast_window=blast_window) if names else []
        with guard(self.engine, "policy view"), self.engine.connect() as conn:
            for chunk in chunks(names):
                rows = conn.execute(select(_N).where(_N.c.name.in_(chunk))).all()
                by_id = {n.id: n for n in rows}
                if not by_id:
                    continue
                runs = conn.execute(select(Run.id, Run.node_id, Run.started, Run.health, Run.hook,
                                           Run.job_id).where(
                    Run.node_id.in_(list(by_id)), Run.started >= since)
                    .order_by(Run.started)).all()
                # Check names of every run of the nodes that failed in the window: the
                # failing ones open episodes, the passing ones close them (policy/lemon.py).
                checks: dict[int, list[str]] = {}
                passed: dict[int, list[str]] = {}
                failing = {r.node_id for r in runs if r.health == UNHEALTHY}
                for rchunk in chunks([r.id for r in runs if r.node_id in failing]):
                    for run_id, name, health in conn.execute(select(
                            Result.run_id, Result.name, Result.health).where(
                            Result.run_id.in_(rchunk))):
                        if health == UNHEALTHY:
                            checks.setdefault(run_id, []).append(name)
                        elif health in (HEALTHY, DEGRADED):
                            passed.setdefault(run_id, []).append(name)
                drains = conn.execute(select(Event.node_id, Event.at).where(and_(
                    Event.node_id.in_(list(by_id)), Event.at >= since, Event.kind == "drain",
                    Event.actor_kind != "slurmguard")).order_by(Event.at)).all()
                resets = dict(conn.execute(select(Event.node_id, func.max(Event.at)).where(
                    Event.node_id.in_(list(by_id)),
                    Event.kind.in_(["lemon_cleared", "probation_start"])).group_by(Event.node_id)).all())
                samples: dict[int, list[Sample]] = {}
                for r in runs:
                    samples.setdefault(r.node_id, []).append(Sample(
                        r.started, r.health, tuple(sorted(checks.get(r.id, ()))), r.hook, r.job_id,
                        tuple(sorted(passed.get(r.id, ()))) if r.node_id in failing else None))
                foreign: dict[int, list[float]] = {}
                for node_id, at in drains:
                    foreign.setdefault(node_id, []).append(at)
                for nid, n in by_id.items():
                    out[n.name] = NodeView(
                        name=n.name, samples=tuple(samples.get(nid, ())),
                        foreign_drains=tuple(foreign.get(nid, ())), lemon=bool(n.lemon),
                        lemon_reason=n.lemon_reason or "", burnin_required=bool(n.burnin_required),
                        probation=bool(n.probation), probation_passes=n.probation_passes or 0,
                        reset_at=resets.get(nid), shared=covering(n.name, faults, scopes))
        return out

    def columns(self, nodes: Sequence[str], columns: Sequence[str]) -> list[tuple[Any, ...]]:
        """``columns`` of the ``nodes`` rows of these names (unknown names: no row)."""
        cols = [_N.c[c] for c in columns]
        out: list[tuple[Any, ...]] = []
        with guard(self.engine, "node rows"), self.engine.connect() as conn:
            for chunk in chunks(list(nodes)):
                out += [tuple(r) for r in conn.execute(select(*cols).where(_N.c.name.in_(chunk)))]
        return out

    def set_risk(self, scores: Mapping[str, float], at: float) -> int:
        """Store each known node's risk score as of ``at`` (serve's policy pass, for the
        gate's risk.gate_max_nodes); nodes without a row are not created. Returns the rows."""
        if not scores:
            return 0
        stmt = (update(Node).where(Node.name == bindparam("b_name"))
                .values(risk_score=bindparam("b_score"), risk_at=bindparam("b_at")))
        with guard(self.engine, "set node risk"), self.engine.begin() as conn:
            res = conn.execute(stmt, [{"b_name": n, "b_score": float(s), "b_at": at}
                                      for n, s in sorted(scores.items())])
            return int(res.rowcount or 0)

    def risk_refusals(self, since: float) -> dict[str, dict[str, int]]:
        """job id -> {node: the gate's refusal round}: the nodes the gate refused each job for
        node risk (``risk_refused`` events since ``since``; job and round in the details)."""
        stmt = (select(Node.name, Event.details).join(Node, Node.id == Event.node_id)
                .where(Event.kind == "risk_refused", Event.at >= since))
        out: dict[str, dict[str, int]] = {}
        with guard(self.engine, "risk refusals"), self.engine.connect() as conn:
            for name, details in conn.execute(stmt):
                try:
                    d = json.loads(details or "{}")
                    job, round_ = str(d.get("job") or ""), int(d.get("round") or 1)
                except (ValueError, TypeError, AttributeError):
                    continue
                if job:
                    seen = out.setdefault(job, {})
                    seen[name] = max(seen.get(name, 0), round_)
        return out

    def active(self, since: float) -> list[str]:
        """Nodes with a run since ``since``, or flagged lemon, burn-in or probation."""
        stmt = select(Node.name).where((Node.last_seen >= since) | Node.lemon.is_(True)
                                       | Node.probation.is_(True) | Node.burnin_required.is_(True))
        with guard(self.engine, "active nodes"), self.engine.connect() as conn:
            return sorted(conn.execute(stmt).scalars())

    def seen_since(self, since: float) -> dict[str, float]:
        """{node: last_seen} of nodes whose newest run started at or after ``since`` (the
        leader's look at what other serve replicas stored)."""
        stmt = select(Node.name, Node.last_seen).where(Node.last_seen >= since)
        with guard(self.engine, "nodes seen"), self.engine.connect() as conn:
            return {name: float(at) for name, at in conn.execute(stmt)}

    def drained_by_us_since(self, since: float) -> dict[str, list[tuple[float, str]]]:
        """Nodes slurmguard drained since ``since``: name -> [(time, source)]."""
        stmt = (select(Node.name, Event.at, Event.source).join(Node, Node.id == Event.node_id)
                .where(Event.kind == "drain", Event.actor_kind == "slurmguard", Event.at >= since))
        out: dict[str, list[tuple[float, str]]] = {}
        with guard(self.engine, "recent drains"), self.engine.connect() as conn:
            for name, at, source in conn.execute(stmt):
                out.setdefault(name, []).append((at, source))
        return out

    def state_counts(self) -> dict[str, dict[str, int]]:
        """Known nodes per last health (``unknown``: never reported), per flag (lemon,
        burnin_required, probation), and open fleet alerts: the fleet gauges of /metrics."""
        with guard(self.engine, "state counts"), self.engine.connect() as conn:
            health: dict[str, int] = {}
            for h, n in conn.execute(select(Node.last_health, func.count()).group_by(Node.last_health)):
                health[h or "unknown"] = health.get(h or "unknown", 0) + int(n)
            flags = {name: int(conn.execute(select(func.count()).select_from(Node).where(
                col.is_(True))).scalar_one()) for name, col in (
                ("lemon", Node.lemon), ("burnin_required", Node.burnin_required),
                ("probation", Node.probation))}
            alerts = int(conn.execute(select(func.count()).select_from(FleetAlert).where(
                FleetAlert.closed.is_(None))).scalar_one())
        return {"health": health, "flags": flags, "alerts": {"open": alerts}}
