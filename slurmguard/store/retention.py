"""Retention (``store.retention``): how many days the store keeps each kind of history, and
the expiry that deletes what is older, in small batches (docs/store.md, "Retention").

What is kept is what the readers read (slurmguard/store/fleet.py, incidents.py):

- fleet report, node risk and incidents read failing runs (health other than ``healthy``),
  their ``unhealthy``/``degraded`` results, the ledger, fleet alerts, burn-in verdicts and
  goodput's job rows: all kept ``events`` days (one horizon, so an episode never loses its
  drain or its failing runs);
- policy replay also reads healthy runs (as times: its lemon and flapping rules, probation's
  passing epilogs): kept ``runs`` days, so replay answers the same over the last ``runs``
  days less its window's lookback;
- everything else of a record, the verdicts of checks that passed (or were unsupported or
  errored), is read only by `node show`'s timeline: kept ``results`` days;
- burn-in's raw measurements (``burnin_results``) are kept ``burnin`` days; what
  `burnin report` reads is the series and packs (one row per node and metric, rewritten in
  place) and the runs with their verdicts, which are not expired.

Every delete is one transaction of at most ``batch`` rows over a few nodes' rows (by the
``(node_id, started)`` / ``(node_id, at)`` indexes: already-expired history is never read
again), with ``pause`` seconds between transactions, so that serve's writer (SQLite has one
writer at a time) waits at most one batch. 0 days keeps a kind for ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import Engine, delete, select

from slurmguard.store.engine import guard
from slurmguard.store.models import (
    BurninResult,
    Event,
    FleetAlert,
    GoodputJob,
    GoodputJobNode,
    Node,
    Result,
    Run,
)

DAY = 86400.0
KEPT_RESULTS = ("unhealthy", "degraded")  # results the fleet readers read (store/fleet.py)
NODES_PER_STEP = 64  # node ids per statement: an index range each, far below parameter limits


def _default(key: str) -> Any:
    from slurmguard.config import SCHEMA

    return SCHEMA["store"]["retention"][key].default  # declared once, in config.py


@dataclass(frozen=True)
class RetentionPolicy:
    """Days kept per kind (0: for ever) and how expiry paces itself (store.retention)."""

    results: float = _default("results")
    runs: float = _default("runs")
    events: float = _default("events")
    burnin: float = _default("burnin")
    batch: int = _default("batch")
    pause: float = _default("pause")
    interval: float = _default("interval")

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> RetentionPolicy:
        """From the ``[store.retention]`` section (validated by config.py)."""
        return cls(**{f.name: section[f.name] for f in fields(cls) if f.name in section})

    def cutoffs(self, now: float) -> dict[str, float | None]:
        """Each kind's cut: rows older than it go (None: kept for ever)."""
        def cut(days: float) -> float | None:
            return now - days * DAY if days > 0 else None
        # A run outlives its passing results, a failing run its healthy neighbours: the
        # longer horizon wins where a shorter one is configured above a longer one.
        runs = cut(max(self.runs, self.results)) if self.runs and self.results else None
        events = cut(max(self.events, self.runs, self.results)) if (
            self.events and self.runs and self.results) else None
        return {"results": cut(self.results), "runs": runs, "events": events,
                "burnin": cut(self.burnin)}


@dataclass
class ExpiryStats:
    """What one expiry pass deleted, per table, and how it went."""

    deleted: dict[str, int] = field(default_factory=dict)
    transactions: int = 0
    largest: int = 0  # rows of the largest transaction
    seconds: float = 0.0
    longest_s: float = 0.0  # the longest transaction
    stopped: bool = False  # interrupted (serve stopping or leadership lost)

    def add(self, table: str, n: int, took: float) -> None:
        self.deleted[table] = self.deleted.get(table, 0) + n
        self.transactions += 1
        self.largest = max(self.largest, n)
        self.longest_s = max(self.longest_s, took)

    def as_dict(self) -> dict[str, Any]:
        return {"deleted": dict(sorted(self.deleted.items())), "transactions": self.transactions,
                "largest_transaction": self.largest, "seconds": round(self.seconds, 3),
                "longest_transaction_s": round(self.longest_s, 4), "stopped": self.stopped}


class Retention:
    """Expiry on the store's engine (``store.retention``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def expire(self, policy: RetentionPolicy, *, now: float | None = None,
               stop: threading.Event | None = None, go_on: Any = None) -> ExpiryStats:
        """Delete what ``policy`` no longer keeps, ``policy.batch`` rows a transaction.
        ``stop`` (set) or ``go_on()`` (False) ends the pass early between transactions."""
        now = time.time() if now is None else now
        cuts = policy.cutoffs(now)
        st = ExpiryStats()
        t0 = time.monotonic()
        self._stop, self._go_on, self._policy = stop, go_on, policy
        self._ok = True
        try:
            with guard(self.engine, "retention"):
                with self.engine.connect() as conn:
                    ids = [r[0] for r in conn.execute(select(Node.id).order_by(Node.id))]
                for i in range(0, len(ids), NODES_PER_STEP):
                    chunk = ids[i:i + NODES_PER_STEP]
                    if not self._per_nodes(chunk, cuts, st):
                        st.stopped = True
                        break
                else:
                    if not self._fleet_wide(cuts, st):
                        st.stopped = True
        finally:
            st.seconds = time.monotonic() - t0
        return st

    # ------------------------------------------------------------------ passes

    def _per_nodes(self, nids: list[int], cuts: dict[str, float | None], st: ExpiryStats) -> bool:
        mine = Result.node_id.in_(nids)
        if cuts["results"] is not None:
            if not self._drain(st, "results", Result, select(Result.id).where(
                    mine, Result.started < cuts["results"],
                    Result.health.not_in(KEPT_RESULTS))):
                return False
        for cut, healthy in ((cuts["runs"], True), (cuts["events"], False)):
            if cut is None:
                continue
            which = Run.health == "healthy" if healthy else Run.health != "healthy"
            if not self._runs(st, select(Run.id).where(Run.node_id.in_(nids), Run.started < cut,
                                                       which)):
                return False
        if cuts["events"] is not None:
            if not self._drain(st, "events", Event, select(Event.id).where(
                    Event.node_id.in_(nids), Event.at < cuts["events"])):
                return False
        if cuts["burnin"] is not None:
            if not self._drain(st, "burnin_results", BurninResult, select(BurninResult.id).where(
                    BurninResult.node_id.in_(nids), BurninResult.at < cuts["burnin"])):
                return False
        return True

    def _fleet_wide(self, cuts: dict[str, float | None], st: ExpiryStats) -> bool:
        cut = cuts["events"]
        if cut is None:
            return True
        # Open alerts are never expired; goodput's jobs go with the ledger they are read with.
        if not self._drain(st, "fleet_alerts", FleetAlert, select(FleetAlert.id).where(
                FleetAlert.closed.is_not(None), FleetAlert.closed < cut)):
            return False
        while True:
            t = time.monotonic()
            with self._tx() as conn:
                rows = [r[0] for r in conn.execute(select(GoodputJob.id).where(
                    GoodputJob.ended < cut).limit(self._policy.batch))]
                if rows:
                    n = conn.execute(delete(GoodputJobNode).where(
                        GoodputJobNode.job_row.in_(rows))).rowcount
                    n += conn.execute(delete(GoodputJob).where(GoodputJob.id.in_(rows))).rowcount
                    st.add("goodput_jobs", n, time.monotonic() - t)
            if not self._next(rows, time.monotonic() - t, st):
                return not rows or self._ok

    def _runs(self, st: ExpiryStats, ids_stmt: Any) -> bool:
        """Runs and, first, their remaining results, ``batch`` runs a transaction."""
        while True:
            t = time.monotonic()
            with self._tx() as conn:
                rows = [r[0] for r in conn.execute(ids_stmt.limit(self._policy.batch))]
                if rows:
                    n = conn.execute(delete(Result).where(Result.run_id.in_(rows))).rowcount
                    st.deleted["results"] = st.deleted.get("results", 0) + n
                    n += conn.execute(delete(Run).where(Run.id.in_(rows))).rowcount
                    st.add("runs", len(rows), time.monotonic() - t)
                    st.largest = max(st.largest, n)
            if not self._next(rows, time.monotonic() - t, st):
                return not rows or self._ok

    def _drain(self, st: ExpiryStats, table: str, model: Any, ids_stmt: Any) -> bool:
        """Delete the rows ``ids_stmt`` selects, ``batch`` a transaction."""
        while True:
            t = time.monotonic()
            with self._tx() as conn:
                rows = [r[0] for r in conn.execute(ids_stmt.limit(self._policy.batch))]
                n = conn.execute(delete(model).where(model.id.in_(rows))).rowcount if rows else 0
                if rows:
                    st.add(table, n, time.monotonic() - t)
            if not self._next(rows, time.monotonic() - t, st):
                return not rows or self._ok

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """One expiry transaction. SQLite: BEGIN IMMEDIATE, the write lock from the start
        (waiting up to busy_timeout for serve's writer): a read that later turned into a
        write would fail, not wait, if serve committed in between (WAL's stale snapshot)."""
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            yield conn

    def _next(self, rows: list[Any], took: float, st: ExpiryStats) -> bool:
        """After a transaction (``took`` s, commit included): whether to run another of the
        same kind. After one that deleted rows, pause at least as long as it took (and
        ``pause``; none when ``pause`` is 0): expiry holds the store at most half the time,
        so serve's writer gets its turn and a loaded machine its CPU. ``_ok`` notes whether
        the pass may go on (``stop`` set or ``go_on()`` False end it)."""
        if not rows:
            return False
        st.longest_s = max(st.longest_s, took)
        wait = max(self._policy.pause, took) if self._policy.pause > 0 else 0.0
        if self._stop is not None:
            self._ok = not self._stop.wait(wait)
        else:
            if wait > 0:
                time.sleep(wait)
            self._ok = True
        if self._ok and self._go_on is not None:
            self._ok = bool(self._go_on())
        return self._ok and len(rows) >= self._policy.batch
