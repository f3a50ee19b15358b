"""Fleet gauges of serve's /metrics, read from the store at scrape time (cached by
:class:`slurmguard.metrics.registry.ServeMetrics`, 15 s by default)."""

from __future__ import annotations

import threading
import time
from typing import Any

from slurmguard.contract import Health

HEALTHS = tuple(h.value for h in Health) + ("unknown",)
FLAGS = ("lemon", "burnin_required", "probation")


def add_store_gauges(metrics: Any, store: Any) -> None:
    """slurmguard_nodes{health}, slurmguard_nodes_flagged{flag}, slurmguard_fleet_alerts_open."""
    cache: dict[str, Any] = {"at": float("-inf"), "value": None}
    lock = threading.Lock()

    def counts() -> dict[str, dict[str, int]]:
        # One store query for the three gauges of one scrape.
        with lock:
            if time.monotonic() - cache["at"] > 1.0 or cache["value"] is None:
                cache["value"], cache["at"] = store.nodes.state_counts(), time.monotonic()
            return cache["value"]

    metrics.add_gauge("slurmguard_nodes",
                      "Nodes known to the store, by the health of their newest run (unknown: none yet).",
                      ["health"], lambda: {(h,): counts()["health"].get(h, 0) for h in HEALTHS})
    metrics.add_gauge("slurmguard_nodes_flagged",
                      "Nodes flagged by fleet policy or an admin: lemon, burnin_required, probation.",
                      ["flag"], lambda: {(f,): counts()["flags"].get(f, 0) for f in FLAGS})
    metrics.add_gauge("slurmguard_fleet_alerts_open", "Open fleet alerts (blast-radius guard).",
                      [], lambda: {(): counts()["alerts"]["open"]})


def add_goodput_gauges(metrics: Any, store: Any, window: float = 86400.0) -> None:
    """Goodput of the jobs that ended in the last ``window`` seconds, per partition (from the
    ``goodput_jobs`` table that `slurmguard goodput` fills; docs/goodput.md)."""
    from slurmguard.goodput.account import PARTS

    cache: dict[str, Any] = {"at": float("-inf"), "value": None}
    lock = threading.Lock()

    def groups() -> list[tuple[str, dict[str, Any]]]:
        with lock:  # one store query for the gauges of one scrape
            if time.monotonic() - cache["at"] > 1.0 or cache["value"] is None:
                cache["value"] = store.goodput.totals(since=time.time() - window, by="partition")
                cache["at"] = time.monotonic()
            return cache["value"]

    def per_part(key: str, scale: float) -> dict[tuple[str, ...], float]:
        return {(g, p): t[key][p] * scale for g, t in groups() for p in PARTS}

    metrics.add_gauge("slurmguard_goodput_ettr",
                      "Effective training time ratio (productive / allocated, GPU-weighted) of "
                      "jobs that ended in goodput.metrics_window, by partition.",
                      ["partition"], lambda: {(g,): t["ettr"] for g, t in groups()
                                              if t["ettr"] is not None})
    metrics.add_gauge("slurmguard_goodput_seconds",
                      "Job wall seconds of jobs that ended in goodput.metrics_window, by "
                      "partition and part (productive or a badput cause).",
                      ["partition", "part"], lambda: per_part("parts", 1.0))
    metrics.add_gauge("slurmguard_goodput_gpu_seconds",
                      "GPU-seconds of jobs that ended in goodput.metrics_window, by partition "
                      "and part (productive or a badput cause).",
                      ["partition", "part"], lambda: per_part("gpu_hours", 3600.0))
    metrics.add_gauge("slurmguard_goodput_jobs",
                      "Jobs accounted that ended in goodput.metrics_window, by partition.",
                      ["partition"], lambda: {(g,): t["jobs"] for g, t in groups()})
    metrics.add_gauge("slurmguard_goodput_jobs_unknown",
                      "Of those, jobs with parts no source could explain (docs/goodput.md).",
                      ["partition"], lambda: {(g,): t["jobs_with_unknown"] for g, t in groups()})


def add_fleet_gauges(metrics: Any, store: Any, *, risk: Any = None, window_days: float = 30.0,
                     blast_window: float = 3600.0, refresh: float = 300.0) -> None:
    """The fleet report's figures over the last ``window_days`` and every node's risk score
    (docs/fleet.md). Recomputed at most every ``refresh`` seconds: they read a month of
    history and move slowly."""
    from slurmguard.fleet import episodes, figures
    from slurmguard.fleet.params import RiskParams
    from slurmguard.fleet.risk import DAY, current
    from slurmguard.store.fleet import load_history

    rp = risk or RiskParams()
    cache: dict[str, Any] = {"at": float("-inf"), "value": None}
    lock = threading.Lock()

    def data() -> dict[str, Any]:
        with lock:
            if time.monotonic() - cache["at"] > refresh or cache["value"] is None:
                now = time.time()
                since = now - window_days * DAY
                h = load_history(store.engine, since=since, until=now,
                                 lookback=max(rp.lookback_days * DAY, episodes.LOOKBACK),
                                 healthy=False)
                eps = episodes.build(h, blast_window=blast_window)
                rep = figures.report(eps, h.alerts, h.first_seen, since, now)
                cache["value"] = {"report": rep, "risk": current(h, rp, now)}
                cache["at"] = time.monotonic()
            return cache["value"]

    def rates() -> dict[tuple[str, ...], float]:
        rep = data()["report"]
        out = {("all",): rep["per_1000_node_days"] or 0.0}
        out.update({(c,): v["per_1000_node_days"] or 0.0 for c, v in rep["by_cause"].items()})
        return out

    metrics.add_gauge("slurmguard_fleet_failure_rate",
                      "Failure episodes per 1,000 node-days over fleet.metrics_window_days, by "
                      "cause (all: every cause; shared causes left out).",
                      ["cause"], rates)
    metrics.add_gauge("slurmguard_fleet_mttr_hours",
                      "Median hours from drain to return of the episodes returned in the window, "
                      "by cause.", ["cause"],
                      lambda: {(c,): v["median_h"] for c, v in data()["report"]["mttr_by_cause"].items()
                               if v["median_h"] is not None})
    metrics.add_gauge("slurmguard_fleet_out_of_service_ratio",
                      "Share of node-time out of service (in a drain episode) over the window.",
                      [], lambda: {(): data()["report"]["out_of_service"]["mean"]})
    metrics.add_gauge("slurmguard_node_risk",
                      "Node risk score, 0-100 (docs/fleet.md: its factors are shown by "
                      "`slurmguard node show`).", ["node"],
                      lambda: {(n,): r.score for n, r in data()["risk"].items()})
