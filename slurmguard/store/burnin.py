"""The store's burn-in area, ``store.burnin`` (docs/burnin.md).

    run_id = store.burnin.submitted("n1", job_id="42", level="quick", night="2026-12-02")
    run_id = store.burnin.started("n1", job_id="42", group_key="8x NVIDIA H100 80GB HBM3")
    store.burnin.record(run_id, [BurninValue(...), ...])
    store.burnin.finish(run_id, "complete")          # also updates burnin_series
    store.burnin.latest_runs(since)                  # [BurninRunRow], one per node
    store.burnin.series(since)                       # [SeriesRow], one per node and metric
    store.burnin.packs()                             # the same rows, one packed row per node

A run is ``submitted`` (by `burnin submit`), ``running`` (the worker started), then
``complete``, ``failed`` (a health check failed or a measurement found a hard fault) or
``partial`` (cancelled, preempted, killed, timed out: never a failure).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.orm import aliased

from slurmguard.errors import InputError
from slurmguard.sources.burnin import BurninValue
from slurmguard.store.burnin_read import (
    BurninRunRow,
    SeriesRow,
    latest_runs,
    of_nodes,
    pack_recent,
    pack_series,
    packs_covering,
    series_rows,
)
from slurmguard.store.engine import guard
from slurmguard.store.models import (
    BURNIN_STATUSES,
    BurninPack,
    BurninResult,
    BurninRun,
    BurninSeries,
    Node,
)
from slurmguard.store.noderows import node_ids
from slurmguard.store.records import validate_node

_R = BurninRun.__table__
_CHUNK = 500
OPEN = ("submitted", "running")
RESULT_STATUSES = ("ok", "unsupported", "error", "failed")


@dataclass(frozen=True)
class BurninResultRow:
    run_id: int
    node: str
    at: float
    measurement: str
    metric: str
    value: float | None
    unit: str
    status: str
    reason: str
    details: dict[str, Any]


def _raw_rows(conn: Any, stmt: Any) -> list[tuple[Any, ...]]:
    """Fetch ``stmt`` as plain DB-API tuples, bypassing SQLAlchemy's Row objects: for the
    100,000 summary rows of a report that is most of the time spent (docs/burnin.md). Only
    for columns whose driver types are already what we use (floats, ints, text)."""
    compiled = stmt.compile(dialect=conn.dialect)
    params = compiled.construct_params()
    args: Any = (tuple(params[k] for k in compiled.positiontup) if compiled.positional
                 else params)
    cur = conn.connection.driver_connection.cursor()
    try:
        cur.execute(str(compiled), args)
        return cur.fetchall()
    finally:
        cur.close()


def _run_cols() -> list[Any]:
    """The columns of a :class:`BurninRunRow`, in its field order (rows built positionally:
    attribute access on 10,000 rows costs more than the query)."""
    R = BurninRun
    return [R.id, Node.name, R.job_id, R.level, R.night, R.group_key, R.submitted, R.started,
            R.finished, R.status, R.reason, R.reservation, R.verdict]


def _series_cols(node: Any) -> list[Any]:
    """The columns of a raw burnin_series row (SeriesRow order, then ``recent_f8``), the node
    as ``node`` (its name for readers, its id for the pack writer)."""
    S = BurninSeries
    return [node, S.metric, S.unit, S.higher_is_better, S.group_key, S.last_run_id, S.last_at,
            S.last_value, S.last_night, S.recent, S.recent_f8]


@dataclass(frozen=True)
class _Recent:
    recent: str
    last_night: str


RECENT_NIGHTS = 8  # values kept in burnin_series.recent (trend_nights is at most 7)


def night_of(ts: float, boundary_hour: int = 12) -> str:
    """The burn-in night a time belongs to: the UTC date of ``ts - boundary_hour`` hours, so
    a run at 01:30 UTC belongs to the night that began the evening before."""
    return time.strftime("%Y-%m-%d", time.gmtime(ts - boundary_hour * 3600))


def night_number(night: str) -> int:
    """Days since 0001-01-01 of a night label ("2027-01-14"); InputError for anything else."""
    from datetime import date

    try:
        return date.fromisoformat(night).toordinal()
    except (TypeError, ValueError):
        raise InputError(f"burn-in night: expected YYYY-MM-DD, got {night!r}") from None


def _extend(recent: str, last_night: str | None, night: str, value: float, keep: int) -> str | None:
    """``recent`` with ``value`` as ``night``'s, gaps as nan, at most ``keep`` values."""
    vals = recent.split() if recent else []
    if last_night is not None and vals:
        gap = night_number(night) - night_number(last_night)
        if gap < 0:
            return None
        if gap == 0:
            vals = vals[:-1]
        else:
            vals += ["nan"] * (min(gap, keep) - 1)
    vals.append(repr(value))
    return " ".join(vals[-keep:])


class Burnin:
    """Burn-in runs, results and series: one per store, on its engine (``store.burnin``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # ------------------------------------------------------------------ writes
    def submitted(self, node: str, *, job_id: str | None, level: str, night: str,
                  group_key: str = "", reservation: str = "",
                  at: float | None = None) -> int:
        """Record a submitted burn-in job; returns the run id."""
        at = time.time() if at is None else at
        night_number(night)
        with guard(self.engine, "burn-in submit"), self.engine.begin() as conn:
            nid = node_ids(conn, [validate_node(node)], at)[node]
            return int(conn.execute(insert(BurninRun).values(
                node_id=nid, job_id=job_id, level=level[:16], night=night[:16],
                group_key=group_key[:128], submitted=at, started=None, finished=None,
                status="submitted", reason="", reservation=reservation[:128], verdict=None,
                verdict_at=None).returning(BurninRun.id)).scalar_one())

    def started(self, node: str, *, job_id: str | None, group_key: str, level: str = "quick",
                night: str = "", at: float | None = None) -> int:
        """The worker started: the submitted run of (node, job) becomes ``running`` (a run is
        created when none was submitted, e.g. a worker started by hand). Returns its id."""
        at = time.time() if at is None else at
        night = night or night_of(at)
        night_number(night)
        with guard(self.engine, "burn-in start"), self.engine.begin() as conn:
            nid = node_ids(conn, [validate_node(node)], at)[node]
            rid = None
            if job_id:
                rid = conn.execute(select(BurninRun.id).where(
                    BurninRun.node_id == nid, BurninRun.job_id == job_id)
                    .order_by(BurninRun.id.desc()).limit(1)).scalar()
            if rid is None:
                rid = conn.execute(insert(BurninRun).values(
                    node_id=nid, job_id=job_id, level=level[:16], night=night[:16],
                    group_key=group_key[:128], submitted=at, started=at, finished=None,
                    status="running", reason="", reservation="", verdict=None,
                    verdict_at=None).returning(BurninRun.id)).scalar_one()
            else:
                # An empty group_key keeps the one submit chose (group_by = feature).
                values: dict[str, Any] = {"started": at, "status": "running"}
                if group_key:
                    values["group_key"] = group_key[:128]
                conn.execute(update(BurninRun).where(BurninRun.id == rid).values(**values))
            return int(rid)

    def record(self, run_id: int, values: Sequence[BurninValue], *,
               at: float | None = None) -> None:
        """Store measured values of a run (as each measurement ends: a killed job keeps them)."""
        at = time.time() if at is None else at
        rows = []
        for v in values:
            if v.status not in RESULT_STATUSES:
                raise InputError(f"burn-in result status: expected one of "
                                 f"{', '.join(RESULT_STATUSES)}, got {v.status!r}")
            rows.append({"run_id": run_id, "at": at, "measurement": v.measurement[:64],
                         "metric": v.metric[:64], "value": v.value, "unit": v.unit[:16],
                         "status": v.status, "reason": v.reason[:1000],
                         "details": json.dumps({**dict(v.details),
                                                "higher_is_better": v.higher_is_better},
                                               sort_keys=True, default=str)})
        if not rows:
            return
        with guard(self.engine, "burn-in results"), self.engine.begin() as conn:
            nid = conn.execute(select(BurninRun.node_id).where(BurninRun.id == run_id)).scalar()
            if nid is None:
                raise InputError(f"burn-in run: no run {run_id}")
            conn.execute(insert(BurninResult), [{**r, "node_id": nid} for r in rows])

    def finish(self, run_id: int, status: str, reason: str = "", *,
               at: float | None = None, keep_nights: int = RECENT_NIGHTS) -> None:
        """End a run. A ``complete`` run's values become the node's latest in burnin_series.

        Only an open run (submitted/running) changes: a run already marked partial by
        `burnin report` (its job vanished) is not revived by a late worker.
        """
        if status not in BURNIN_STATUSES or status in OPEN:
            raise InputError(f"burn-in status: expected complete, partial or failed, got {status!r}")
        at = time.time() if at is None else at
        with guard(self.engine, "burn-in finish"), self.engine.begin() as conn:
            run = conn.execute(select(_R).where(BurninRun.id == run_id)).first()
            if run is None:
                raise InputError(f"burn-in run: no run {run_id}")
            done = conn.execute(update(BurninRun).where(
                BurninRun.id == run_id, BurninRun.status.in_(OPEN)).values(
                status=status, reason=reason[:1000], finished=at)).rowcount
            if done and status == "complete":
                self._update_series(conn, run, keep_nights)

    def _update_series(self, conn: Any, run: Any, keep: int) -> None:
        vals = conn.execute(select(BurninResult.metric, BurninResult.value, BurninResult.unit,
                                   BurninResult.details, BurninResult.at).where(
            BurninResult.run_id == run.id, BurninResult.status == "ok",
            BurninResult.metric != "", BurninResult.value.is_not(None))).all()
        have = {s.metric: s for s in conn.execute(select(BurninSeries.__table__).where(
            BurninSeries.node_id == run.node_id))}
        night = run.night or night_of(run.started or run.submitted)
        for metric, value, unit, details, at in vals:
            higher = bool(json.loads(details or "{}").get("higher_is_better", True))
            old = have.get(metric)
            recent = _extend(old.recent if old else "", old.last_night if old else None,
                             night, float(value), keep)
            if recent is None:  # an older night finishing late: history only
                continue
            row = {"unit": unit, "higher_is_better": higher, "group_key": run.group_key,
                   "last_run_id": run.id, "last_at": at, "last_value": float(value),
                   "last_night": night, "recent": recent, "recent_f8": pack_recent(recent)}
            if old is None:
                conn.execute(insert(BurninSeries).values(node_id=run.node_id, metric=metric, **row))
            else:
                conn.execute(update(BurninSeries).where(
                    BurninSeries.node_id == run.node_id, BurninSeries.metric == metric).values(**row))
            have[metric] = _Recent(recent, night)  # the same metric again in this run
        if vals:
            self._update_pack(conn, run.node_id)

    @staticmethod
    def _update_pack(conn: Any, node_id: int) -> None:
        """Rewrite the node's burnin_packs row from its burnin_series rows (same transaction)."""
        rows = conn.execute(select(*_series_cols(BurninSeries.node_id))
                            .where(BurninSeries.node_id == node_id)).all()
        conn.execute(delete(BurninPack).where(BurninPack.node_id == node_id))
        packed = pack_series(rows)
        if packed is not None:
            meta, nums, recent = packed
            conn.execute(insert(BurninPack).values(node_id=node_id, meta=meta, nums=nums,
                                                   recent=recent))

    def mark(self, run_ids: Sequence[int], *, status: str | None = None,
             reason: str | None = None, verdict: str | None = None,
             at: float | None = None) -> None:
        """Set status (partial, for vanished jobs), reason and/or verdict of runs."""
        at = time.time() if at is None else at
        values: dict[str, Any] = {}
        if status is not None:
            values.update(status=status, finished=at)
        if reason is not None:
            values["reason"] = reason[:1000]
        if verdict is not None:
            values.update(verdict=verdict, verdict_at=at)
        if not values or not run_ids:
            return
        with guard(self.engine, "burn-in mark"), self.engine.begin() as conn:
            for i in range(0, len(run_ids), _CHUNK):
                stmt = update(BurninRun).where(BurninRun.id.in_(list(run_ids[i:i + _CHUNK])))
                if status is not None:
                    stmt = stmt.where(BurninRun.status.in_(OPEN))
                conn.execute(stmt.values(**values))

    # ------------------------------------------------------------------ reads
    def latest_runs(self, since: float, nodes: Iterable[str] | None = None
                    ) -> list[BurninRunRow]:
        """Each node's newest burn-in run submitted since ``since``, sorted by node."""
        # Per node, its newest run since then: one index range per node on (node_id,
        # submitted), not a scan of every run of every night (as burnin_read's SQL).
        b, m = aliased(BurninRun), aliased(Node)
        newest = (select(func.max(b.id)).where(b.node_id == m.id, b.submitted >= since)
                  .correlate(m).scalar_subquery())
        stmt = (select(*_run_cols()).join(Node, Node.id == BurninRun.node_id)
                .where(BurninRun.id.in_(select(newest).select_from(m))))
        with guard(self.engine, "burn-in runs"), self.engine.connect() as conn:
            return latest_runs(conn.execute(stmt).all(), nodes)

    def open_runs(self) -> list[BurninRunRow]:
        """Runs still submitted or running (their jobs may have vanished)."""
        stmt = (select(*_run_cols()).join(Node, Node.id == BurninRun.node_id)
                .where(BurninRun.status.in_(OPEN)))
        with guard(self.engine, "burn-in open runs"), self.engine.connect() as conn:
            return [BurninRunRow(*r) for r in conn.execute(stmt.order_by(BurninRun.id)).all()]

    def packs(self, nodes: Iterable[str] | None = None) -> list[tuple[Any, ...]] | None:
        """Each node's burnin_packs row as (node, meta, nums, recent): burnin_series packed,
        what `burnin report` judges; None when the packs do not hold every burnin_series row
        (then read :meth:`series_raw`)."""
        P = BurninPack
        stmt = select(Node.name, P.meta, P.nums, P.recent).join(Node, Node.id == P.node_id)
        with guard(self.engine, "burn-in packs"), self.engine.connect() as conn:
            packs = [(n, m, bytes(b), bytes(r)) for n, m, b, r in conn.execute(stmt)]
            count = int(conn.execute(select(func.count()).select_from(BurninSeries)).scalar_one())
        return packs_covering(packs, count, nodes)

    def series_raw(self, since: float = float("-inf"),
                   nodes: Iterable[str] | None = None) -> list[tuple[Any, ...]]:
        """The summary rows since ``since`` as plain tuples in :class:`SeriesRow` field order,
        ``recent`` still the stored text, then ``recent_f8`` (its float64 bytes, or None):
        the report's numpy path reads those by column."""
        S = BurninSeries
        stmt = (select(*_series_cols(Node.name)).join(Node, Node.id == S.node_id)
                .where(S.last_at >= since))
        with guard(self.engine, "burn-in series"), self.engine.connect() as conn:
            rows = _raw_rows(conn, stmt)
        return of_nodes(rows, nodes)

    def series(self, since: float = float("-inf"), nodes: Iterable[str] | None = None,
               nights: int | None = None) -> list[SeriesRow]:
        """The summary row of every (node, metric) whose latest value is since ``since``.

        ``nights``: keep only the last that many values of ``recent`` (the report needs
        trend_nights + 1; parsing the 8 stored floats of 100,000 rows is most of this read)."""
        return series_rows(self.series_raw(since), nodes, nights)

    def results(self, run_ids: Sequence[int]) -> list[BurninResultRow]:
        """Every stored result of these runs."""
        out: list[BurninResultRow] = []
        with guard(self.engine, "burn-in results"), self.engine.connect() as conn:
            for i in range(0, len(run_ids), _CHUNK):
                stmt = (select(BurninResult.__table__, Node.name.label("node_name"))
                        .join(Node, Node.id == BurninResult.node_id)
                        .where(BurninResult.run_id.in_(list(run_ids[i:i + _CHUNK]))))
                for r in conn.execute(stmt.order_by(BurninResult.id)):
                    out.append(BurninResultRow(r.run_id, r.node_name, r.at, r.measurement, r.metric,
                                               r.value, r.unit, r.status, r.reason,
                                               json.loads(r.details or "{}")))
        return out

    def history(self, node: str, metric: str, since: float = float("-inf")
                ) -> list[tuple[float, float]]:
        """(time, value) of one node's metric over complete runs, oldest first."""
        stmt = (select(BurninResult.at, BurninResult.value)
                .join(BurninRun, BurninRun.id == BurninResult.run_id)
                .join(Node, Node.id == BurninResult.node_id)
                .where(Node.name == node, BurninResult.metric == metric,
                       BurninResult.status == "ok", BurninResult.at >= since,
                       BurninRun.status == "complete").order_by(BurninResult.at))
        with guard(self.engine, "burn-in history"), self.engine.connect() as conn:
            return [(float(a), float(v)) for a, v in conn.execute(stmt) if v is not None]
