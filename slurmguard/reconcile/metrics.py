"""Counters of reconcile actions, written as a Prometheus text file (node_exporter textfile
collector format) after every round, through the shared metrics library
(:class:`slurmguard.metrics.registry.ReconcileMetrics`). Counts continue from the file left
by the previous run, so `slurmguard reconcile --once` from cron still yields monotonic
counters."""

from __future__ import annotations

import os
import time

ACTIONS = "slurmguard_reconcile_actions_total"
ROUNDS = "slurmguard_reconcile_rounds_total"
LAST = "slurmguard_reconcile_last_round_timestamp_seconds"


class Metrics:
    """The reconciler's counters; :meth:`write` saves them atomically to ``path`` (if any)."""

    def __init__(self, path: str = "") -> None:
        from slurmguard.metrics.registry import ReconcileMetrics

        self.path = path
        self.m = ReconcileMetrics()
        if path and os.path.exists(path):
            self._load(path)

    def _load(self, path: str) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError:
            return  # a damaged file: start from zero rather than refuse to run
        for fam in families:
            for s in fam.samples:
                if s.name == ACTIONS and {"action", "result"} <= set(s.labels):
                    self.m.actions.labels(action=s.labels["action"], result=s.labels["result"]).inc(s.value)
                elif s.name == ROUNDS and "result" in s.labels:
                    self.m.rounds.labels(result=s.labels["result"]).inc(s.value)

    def action(self, kind: str, result: str) -> None:
        self.m.actions.labels(action=kind, result=result).inc()

    def round(self, result: str) -> None:
        self.m.rounds.labels(result=result).inc()
        self.m.last_round.set(time.time())

    def get(self, name: str, **labels: str) -> int:
        for fam in self.m.registry.collect():
            for s in fam.samples:
                if s.name == name and s.labels == labels:
                    return int(s.value)
        return 0

    def text(self) -> str:
        return self.m.exposition().decode()

    def write(self) -> None:
        self.m.write(self.path)
