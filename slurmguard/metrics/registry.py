"""The controller side: every controller metric of slurmguard, declared once, with
prometheus_client (the ``server`` extra; never imported on the hook path).

One class per process kind, each with its own ``CollectorRegistry`` (so tests can run several
in one interpreter, and a process exposes only what it does):

- :class:`ServeMetrics`: ``slurmguard serve``, exposed on ``GET /metrics``;
- :class:`RequeueMetrics`: ``slurmguard requeue watch``, written to ``requeue.metrics_file``;
- :class:`ReconcileMetrics`: ``slurmguard reconcile``, written to ``reconcile.metrics_file``.

Adding a metric (docs/metrics.md must list it: tests/test_metrics_serve.py compares the doc
with a real scrape):

- an event counted where it happens: declare it in the class's ``__init__``::

      self.things = Counter("slurmguard_things_total", "What it counts.", ["cause"],
                            registry=self.registry)

  and call ``metrics.things.labels(cause=...).inc()`` at the place it happens;
- a value read from the store at scrape time (fleet state, goodput)::

      metrics.add_gauge("slurmguard_goodput_ratio", "Productive / allocated GPU time.",
                        ["partition"], lambda: {("gpu",): 0.93})

  The function returns {label values tuple: value}; it runs at most once per
  ``cache_seconds`` (default 15 s) whatever the scrape rate, and a function that raises
  is counted in ``slurmguard_metrics_collect_errors_total{gauge}`` and its gauge left out
  of that scrape (a store outage never fails a scrape).

Names follow Prometheus conventions: ``slurmguard_`` prefix, base units (seconds, bytes),
``_total`` for counters, ``_seconds`` for durations.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    write_to_textfile,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

try:  # what generate_latest() writes: the classic text format, which every Prometheus reads
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE
except ImportError:  # prometheus_client < 0.21: "latest" was 0.0.4
    from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE

log = logging.getLogger("slurmguard.metrics")

# No `*_created` series: Prometheus' text format does not need them, and they double the
# series count of every counter and histogram.
disable_created_metrics()

__all__ = ["CONTENT_TYPE", "ServeMetrics", "RequeueMetrics", "ReconcileMetrics",
           "Counter", "Gauge", "Histogram"]

# Seconds: an ingest request (wait for the batch commit included), one store write.
_FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Seconds from a hook run's end to its record being stored (spooled records arrive late).
_LAG_BUCKETS = (0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 86400.0)
# Seconds from Slurm's requeue to the job running again (without the watcher: ~150 s).
RECOVERY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


NODE_LABEL = "node"  # a series with this label is one node's state (docs/security.md)


class _ScrapeGauges(Collector):
    """Gauges whose values come from a function at scrape time, cached."""

    def __init__(self, errors: Counter, cache_seconds: float) -> None:
        self.errors = errors
        self.cache_seconds = cache_seconds
        self.gauges: list[tuple[str, str, tuple[str, ...], Callable[[], Mapping[tuple[str, ...], float]]]] = []
        self._cache: dict[str, tuple[float, Mapping[tuple[str, ...], float]]] = {}
        self._lock = threading.Lock()
        # Set on the thread of an anonymous scrape: gauges with a node label are not even
        # computed for it.
        self.anonymous = threading.local()

    def describe(self) -> Iterable[Any]:
        return []  # values come from the store: never read them at registration

    def collect(self) -> Iterable[Any]:
        now = time.monotonic()
        skip = getattr(self.anonymous, "on", False)
        for name, doc, labels, fn in self.gauges:
            if skip and NODE_LABEL in labels:
                continue
            with self._lock:
                at, values = self._cache.get(name, (float("-inf"), {}))
                if now - at >= self.cache_seconds:
                    try:
                        values = dict(fn())
                    except Exception as exc:  # a store outage must not fail the scrape
                        log.warning("metrics: %s: %s: %s", name, type(exc).__name__, exc)
                        self.errors.labels(gauge=name).inc()
                        self._cache.pop(name, None)
                        continue
                    self._cache[name] = (now, values)
            fam = GaugeMetricFamily(name, doc, labels=list(labels))
            for key, value in sorted(values.items()):
                fam.add_metric(list(key), float(value))
            yield fam


class _Base:
    def __init__(self, cache_seconds: float = 15.0) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collect_errors = Counter(
            "slurmguard_metrics_collect_errors_total",
            "Scrape-time gauges that could not be computed (store unreachable, ...), by gauge.",
            ["gauge"], registry=None)
        self._scrape = _ScrapeGauges(self.collect_errors, cache_seconds)
        # Collected in this order: a failure counts in the same scrape that misses the gauge.
        self.registry.register(self._scrape)
        self.registry.register(self.collect_errors)

    def add_gauge(self, name: str, doc: str, labels: Sequence[str],
                  fn: Callable[[], Mapping[tuple[str, ...], float]]) -> None:
        """A gauge computed by ``fn`` at scrape time (see the module docstring)."""
        if any(g[0] == name for g in self._scrape.gauges):
            raise ValueError(f"metric {name} registered twice")
        self._scrape.gauges.append((name, doc, tuple(labels), fn))

    def exposition(self, *, per_node: bool = True) -> bytes:
        """The text exposition format, as served on /metrics. ``per_node=False`` (a scrape
        without the serve token) leaves out every family with a ``node`` label: node state
        (a node's risk score) is shown only to a credential (docs/security.md)."""
        if per_node:
            return generate_latest(self.registry)
        return generate_latest(_Anonymous(self))

    def write(self, path: str) -> None:
        """Write the text exposition atomically to ``path`` (node_exporter textfile)."""
        if path:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            write_to_textfile(path, self.registry)
            try:
                os.chmod(path, 0o644)
            except OSError:
                pass


class _Anonymous:
    """A registry's families without the per-node ones, for :meth:`_Base.exposition`."""

    def __init__(self, base: _Base) -> None:
        self.base = base

    def collect(self) -> Iterable[Any]:
        flag = self.base._scrape.anonymous
        flag.on = True
        try:
            for fam in self.base.registry.collect():
                if not any(NODE_LABEL in s.labels for s in fam.samples):
                    yield fam
        finally:
            flag.on = False


class ServeMetrics(_Base):
    """What ``slurmguard serve`` counts: ingest, drains, policy, permits, fleet state."""

    def __init__(self, cache_seconds: float = 15.0) -> None:
        super().__init__(cache_seconds)
        r = self.registry
        self.http_requests = Counter(
            "slurmguard_http_requests_total", "HTTP requests served, by path and status code.",
            ["path", "code"], registry=r)
        self.leader = Gauge(
            "slurmguard_serve_leader",
            "1 on the serve replica that runs the periodic work (the leader), else 0.",
            registry=r)
        self.ingest_records = Counter(
            "slurmguard_ingest_records_total",
            "Result records received on /ingest, by result (stored, duplicate, rejected, failed).",
            ["result"], registry=r)
        self.ingest_duration = Histogram(
            "slurmguard_ingest_request_duration_seconds",
            "Seconds to answer one POST /ingest, waiting for the batch commit included.",
            buckets=_FAST_BUCKETS, registry=r)
        self.ingest_lag = Histogram(
            "slurmguard_ingest_lag_seconds",
            "Seconds from the end of a hook run to its record being stored.",
            buckets=_LAG_BUCKETS, registry=r)
        self.batch_duration = Histogram(
            "slurmguard_store_write_duration_seconds",
            "Seconds one batch write to the store took.", buckets=_FAST_BUCKETS, registry=r)
        self.write_errors = Counter(
            "slurmguard_store_write_errors_total",
            "Batch writes the store refused (records stay spooled on the nodes).", registry=r)
        self.replays = Counter(
            "slurmguard_spool_replayed_records_total",
            "Records stored that a node had spooled while serve was unreachable.", registry=r)
        self.drains = Counter(
            "slurmguard_drains_total",
            "Nodes drained by slurmguard, by cause (the check, or lemon/flapping) and by who drained "
            "(prolog, epilog, healthcheck: the node itself; policy: serve).",
            ["cause", "source"], registry=r)
        self.undrains = Counter(
            "slurmguard_undrains_total",
            "slurmguard drains cleared by a passing health check, by the cause of the drain.",
            ["cause"], registry=r)
        self.blast_trips = Counter(
            "slurmguard_blast_radius_trips_total",
            "Fleet alerts opened by the blast-radius guard, by cause and scope.",
            ["cause", "scope"], registry=r)
        self.drains_refused = Counter(
            "slurmguard_drains_refused_total",
            "Drains the blast-radius guard refused, by cause and path (permit: a node asked; "
            "policy: serve's own drain).", ["cause", "via"], registry=r)
        self.permits = Counter(
            "slurmguard_permits_total", "Answers to POST /permit, by cause and result (allowed, refused).",
            ["cause", "result"], registry=r)
        self.auth_refusals = _auth_refusals(r)
        self.lemons = Counter(
            "slurmguard_lemons_total", "Nodes marked lemon by fleet policy, by cause.", ["cause"],
            registry=r)
        self.policy_passes = Counter(
            "slurmguard_policy_passes_total", "Fleet policy passes, by result (ok, failed).",
            ["result"], registry=r)
        self.policy_pass_duration = Histogram(
            "slurmguard_policy_pass_duration_seconds",
            "Seconds one policy pass took on the leader, by kind (full: every active node; "
            "incremental: the nodes with new records).", ["kind"], buckets=_LAG_BUCKETS,
            registry=r)
        self.http_connection_events = Counter(
            "slurmguard_http_connection_events_total",
            "What serve's HTTP front did to connections (docs/serve.md): accepted, evicted_idle, "
            "refused_over_cap, idle_closed, request_timeouts, early_answers.", ["event"], registry=r)
        self.node_views = Counter(
            "slurmguard_serve_node_views_total",
            "Views of Slurm's node table this replica took, by source: slurm (read it itself: "
            "the leader, or a follower past serve.slurm_view_max_age), store (the leader's "
            "published view, when it changed).", ["source"], registry=r)
        self.slurm_nodes = Gauge(
            "slurmguard_slurm_nodes",
            "Nodes per Slurm state as the last policy pass saw them (up, drained_slurmguard, "
            "drained_other, down).", ["state"], registry=r)
        self._periodic_work(r)

    def _periodic_work(self, r: CollectorRegistry) -> None:
        """What the leader's periodic work counts: repair, and the incidents' lost GPU-hours
        (serve/incident_metrics.py; declared on every replica so each scrape names them)."""
        self.repair_steps = Counter(
            "slurmguard_repair_steps_total",
            "Autonomous repair steps (docs/repair.md), by cause, rung and result (started, "
            "proven, transient, permanent, verified, returned, ticketed, observed).",
            ["cause", "rung", "result"], registry=r)
        self.repair_nodes = Gauge(
            "slurmguard_repair_nodes", "Nodes in repair (an episode started, not yet returned "
            "or ticketed) at the last repair pass.", registry=r)
        self.repair_drain_to_return = Histogram(
            "slurmguard_repair_drain_to_return_seconds",
            "Seconds from a drain to the node's return by repair.", buckets=_LAG_BUCKETS,
            registry=r)
        self.incident_lost_gpu_hours = Counter(
            "slurmguard_incident_lost_gpu_hours_total",
            "GPU-hours lost to closed incidents, counted by this replica while it led, by cause "
            "and part (redone, detect, waiting, out_of_service); sum over replicas "
            "(docs/incidents.md).", ["cause", "part"], registry=r)


class RequeueMetrics(_Base):
    """What ``slurmguard requeue watch`` counts."""

    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.requeues = Counter(
            "slurmguard_requeues_total",
            "Jobs requeued after a node fault or a gate risk refusal, by what the watcher did (expedite, cap, unknown, failed).",
            ["action"], registry=r)
        self.recovery = Histogram(
            "slurmguard_requeue_recovery_seconds",
            "Seconds from a job's requeue after a node fault to it running again.",
            buckets=RECOVERY_BUCKETS, registry=r)
        self.polls = Counter(
            "slurmguard_requeue_polls_total", "Polls of the Slurm queue, by result (ok, failed).",
            ["result"], registry=r)
        self.last_poll = Gauge(
            "slurmguard_requeue_last_poll_timestamp_seconds", "Unix time of the last successful poll.",
            registry=r)


class ReconcileMetrics(_Base):
    """What ``slurmguard reconcile`` counts (continued across ``--once`` runs, see
    slurmguard.reconcile.metrics)."""

    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.actions = Counter(
            "slurmguard_reconcile_actions_total",
            "Reconcile actions by kind (k8s-mark, slurm-drain, ...) and result (ok, failed, refused).",
            ["action", "result"], registry=r)
        self.rounds = Counter(
            "slurmguard_reconcile_rounds_total", "Reconcile rounds by result (ok, errors, failed_closed).",
            ["result"], registry=r)
        self.last_round = Gauge(
            "slurmguard_reconcile_last_round_timestamp_seconds", "Unix time of the last reconcile round.",
            registry=r)


def _auth_refusals(r: CollectorRegistry) -> Counter:
    return Counter(
        "slurmguard_auth_refusals_total", "Writes refused for who sent them (docs/security.md), "
        "by reason (other-node, replayed, body-mismatch, wrong-uid, ...) and path.",
        ["reason", "path"], registry=r)
