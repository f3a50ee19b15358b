"""Fleet gauges of serve's /metrics, read from the store at scrape time (cached by
:class:`slurmguard.metrics.registry.ServeMetrics`, 15 s by default)."""

from __future__ import annotations

import threading
import time
from typing import Any

from slurmguard.health import Health

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
                cache["value"], cache["at"] = store.state_counts(), time.monotonic()
            return cache["value"]

    metrics.add_gauge("slurmguard_nodes",
                      "Nodes known to the store, by the health of their newest run (unknown: none yet).",
                      ["health"], lambda: {(h,): counts()["health"].get(h, 0) for h in HEALTHS})
    metrics.add_gauge("slurmguard_nodes_flagged",
                      "Nodes flagged by fleet policy or an admin: lemon, burnin_required, probation.",
                      ["flag"], lambda: {(f,): counts()["flags"].get(f, 0) for f in FLAGS})
    metrics.add_gauge("slurmguard_fleet_alerts_open", "Open fleet alerts (blast-radius guard).",
                      [], lambda: {(): counts()["alerts"]["open"]})
