"""``slurmguard_incident_lost_gpu_hours_total{cause, part}``: GPU-hours lost to incidents,
counted by the leader's periodic pass (docs/incidents.md, "Prometheus").

A counter must only go up, and each incident must count once across serve replicas:

* only **closed** incidents count (every node returned): an open one's out-of-service time
  still grows, so its cost is not final;
* only the **leader** counts (this runs in ``Fleet.periodic``, the leader's work), and it
  counts an incident once: the IDs it has counted are kept;
* a replica that becomes leader (``on_gain``; or a serve that restarts) first takes every incident
  already closed as counted without adding it (its *baseline*): another leader counted
  those, or they predate this process. So the replicas' counters count disjoint incidents
  and ``sum by (cause) (increase(...[1d]))`` over replicas is the fleet's loss; an
  incident that closes between the old leader's last pass and the new one's first is missed
  (at most one pass, ``serve.policy_interval`` x the full-pass interval).

Each pass reads the incidents whose first signal is in the last ``window`` (the fleet
metrics window) at most every ``refresh`` seconds.
"""

from __future__ import annotations

import time
from typing import Any

from slurmguard.fleet.incidents import COSTS


class LostGpuHours:
    """The pass that feeds ``counter`` (ServeMetrics.incident_lost_gpu_hours):
    ``fleet.periodic.append(LostGpuHours(metrics.incident_lost_gpu_hours, store, cfg))``."""

    def __init__(self, counter: Any, store: Any, cfg: Any, *, window: float | None = None,
                 refresh: float = 300.0) -> None:
        self.store, self.cfg, self.refresh = store, cfg, refresh
        self.window = window if window is not None else \
            float(cfg["fleet.metrics_window_days"]) * 86400.0
        self.counter = counter
        self.counted: set[str] | None = None  # None: no baseline yet
        self._at = float("-inf")
        self.__name__ = "incident_lost_gpu_hours"  # the periodic loop logs its work by name

    def __call__(self, now: float | None = None) -> int:
        """One pass; returns how many incidents it counted (the baseline counts none)."""
        now = time.time() if now is None else now
        if now - self._at < self.refresh:
            return 0
        self._at = now
        from slurmguard.store.incidents import load

        expected = int(self.cfg["checks.gpu.expected_count"])
        got = load(self.store, since=now - self.window, until=now,
                   drain_window=float(self.cfg["goodput.drain_window"]),
                   blast_window=float(self.cfg["policy.blast_window"]),
                   gpus_per_node=expected if expected > 0 else None)
        closed = [i for i in got.incidents if i.returned_at is not None]
        if self.counted is None:
            self.counted = {i.id for i in closed}
            return 0
        new = [i for i in closed if i.id not in self.counted]
        for i in new:
            for part in COSTS:
                self.counter.labels(cause=i.cause, part=part).inc(i.cost.get(part, 0.0) / 3600)
            self.counted.add(i.id)
        # Forget IDs that left the window: they cannot come back into it.
        self.counted &= {i.id for i in got.incidents} | {i.id for i in new}
        return len(new)

    def on_gain(self) -> None:
        """This replica became the leader (Fleet._on_gain): take a new baseline, since the
        incidents closed while another replica led were counted there."""
        self.counted = None
        self._at = float("-inf")
