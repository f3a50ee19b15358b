"""Store reads for incidents (slurmguard/fleet/incidents.py): the fleet's history (episodes,
the ledger, burn-in verdicts) and goodput's stored job breakdowns (Slurm accounting and the
wrapper's reports, as `slurmguard goodput` accounted them), put through the pure model.

Reads only; a few range queries (store/fleet.py's ``load_history`` and one over
``goodput_jobs``), never one per node or job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurmguard.fleet import episodes as episodes_mod
from slurmguard.fleet import incidents
from slurmguard.fleet.history import History
from slurmguard.fleet.incidents import Incident, Job, Signal
from slurmguard.store.fleet import load_history

LOOKBACK = 30 * 86400.0  # drains before the window still out, and jobs they hit
BAD_VERDICTS = ("failed", "flagged")


@dataclass
class Loaded:
    incidents: list[Incident]  # those whose first signal is in [since, until]
    jobs: list[Job]  # every job read (hit or not)
    window_jobs: list[Job]  # the jobs that ended in [since, until]: goodput's window


def signals(h: History) -> dict[str, list[Signal]]:
    """Signs of a bad node beside its failing runs: burn-in verdicts that failed or flagged
    it, and jobs that named it slow (``suspect`` events)."""
    out: dict[str, list[Signal]] = {}
    for node, verdicts in h.burnin.items():
        for at, v in verdicts:
            if v in BAD_VERDICTS:
                out.setdefault(node, []).append(Signal(at, f"burn-in verdict: {v}", "store: burn-in"))
    for node, evs in h.events.items():
        for e in evs:
            if e.kind == "suspect":
                out.setdefault(node, []).append(Signal(e.at, f"a job named it slow: {e.reason}",
                                                       "store: ledger (suspect)"))
    return out


def load(store: Any, *, since: float, until: float, drain_window: float = 3600.0,
         blast_window: float = 3600.0, gpus_per_node: int | None = None) -> Loaded:
    """The incidents of [since, until] with their jobs, from ``store`` (a :class:`Store`).
    ``gpus_per_node``: each node's GPUs (``checks.gpu.expected_count``); None: the most GPUs
    per node a stored job had on it."""
    h = load_history(store.engine, since=since, until=until, lookback=LOOKBACK, healthy=False)
    eps = episodes_mod.build(h, blast_window=blast_window)
    rows = store.goodput.jobs(ended_since=since - LOOKBACK, started_until=until + drain_window)
    jobs = [incidents.job_from_breakdown(b) for b in rows]
    window = [j for j, b in zip(jobs, rows, strict=True) if since <= float(b["end"]) <= until]
    node_gpus = {e.node: gpus_per_node for e in eps} if gpus_per_node else None
    incs = incidents.build(eps, jobs, until=until, node_gpus=node_gpus, signals=signals(h),
                           events=h.events, drain_window=drain_window)
    return Loaded([i for i in incs if since <= i.first_signal.at <= until], jobs, window)
