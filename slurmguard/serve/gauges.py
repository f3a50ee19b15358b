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
