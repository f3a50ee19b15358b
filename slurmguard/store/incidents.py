"""Store reads for incidents (slurmguard/fleet/incidents.py): the fleet's history (episodes,
the ledger, burn-in verdicts) and goodput's stored job breakdowns (Slurm accounting and the
wrapper's reports, as `slurmguard goodput` accounted them), put through the pure model.

Reads only; a few range queries (store/fleet.py's ``load_history`` and one over
``goodput_jobs``), never one per node or job.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
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
    jobs: list[Job]  # every job read (near an episode: hit or not)
    window_jobs: set[str]  # of those, the jobs that ended in [since, until]: goodput's window


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


def xid_signals(engine: Any, nodes: Iterable[str], *, since: float,
                until: float) -> dict[str, list[Signal]]:
    """The kernel time of each drain-class Xid line that failed a ``gpu-xid`` result of
    ``nodes`` (the check keeps it in the result's details): often seconds to minutes before
    the hook run that read it. One range query (results by name, health, time)."""
    from sqlalchemy import select

    from slurmguard.store.engine import guard
    from slurmguard.store.models import Node, Result

    out: dict[str, list[Signal]] = {}
    names = sorted(set(nodes))
    with guard(engine, "incident signals"), engine.connect() as conn:
        for i in range(0, len(names), 500):
            stmt = (select(Node.name, Result.details).join(Node, Node.id == Result.node_id)
                    .where(Result.name == "gpu-xid", Result.health == "unhealthy",
                           Result.started >= since, Result.started <= until,
                           Node.name.in_(names[i:i + 500])))
            for node, details in conn.execute(stmt):
                out.setdefault(node, []).extend(_xid_lines(details))
    return out


def _xid_lines(details: str) -> list[Signal]:
    try:
        events = json.loads(details or "{}").get("events") or []
    except (ValueError, AttributeError):
        return []  # details are advisory: a malformed one names no signal
    out = []
    for e in events:
        at = e.get("at") if isinstance(e, dict) else None
        if e.get("class") == "drain" and isinstance(at, (int, float)) and math.isfinite(at):
            what = f"Xid {e.get('xid')} in the kernel log: {str(e.get('message') or '')[:100]}"
            out.append(Signal(float(at), what, "kernel log (gpu-xid result)"))
    return out


def _repairs(store: Any, nodes: set[str], since: float) -> dict[str, list[Any]]:
    """Per node: its repair episodes since ``since``, by the repair ledger's one reader."""
    from slurmguard.repair.ledger import KINDS, episodes

    if not nodes:
        return {}
    out: dict[str, list[Any]] = {}
    rows = [e for e in store.nodes.events(since=since, kinds=list(KINDS), limit=1_000_000)
            if e.node in nodes]
    for r in episodes(rows):
        out.setdefault(r.node, []).append(r)
    return out


def load(store: Any, *, since: float, until: float, drain_window: float = 3600.0,
         blast_window: float = 3600.0, gpus_per_node: int | None = None,
         every_job: bool = False) -> Loaded:
    """The incidents of [since, until] with their jobs, from ``store`` (a :class:`Store`).
    ``gpus_per_node``: each node's GPUs (``checks.gpu.expected_count``); None: the most GPUs
    per node a stored job had on it. ``every_job``: read every job of the episodes' nodes,
    not only those near an episode (the reference the near read must answer as)."""
    h = load_history(store.engine, since=since, until=until, lookback=LOOKBACK, healthy=False)
    eps = episodes_mod.build(h, blast_window=blast_window)
    # Only the jobs near an episode can be hit or on a timeline (incidents.job_spans): over
    # a month of 1,000 nodes (bench_fleet_reads's month), 1 in 20 of the jobs on the episodes' nodes.
    spans = incidents.job_spans(eps, drain_window=drain_window)
    window_of = {"ended_since": since - LOOKBACK, "started_until": until + drain_window,
                 "nodes": set(spans)}
    rows = store.goodput.jobs(**window_of, keep=None if every_job else
                              lambda n, s, e: incidents.touches(n, s, e, spans))
    jobs = [incidents.job_from_breakdown(b) for b in rows]
    window = {str(b["job_id"]) for b in rows if since <= float(b["end"]) <= until}
    if gpus_per_node:
        node_gpus = dict.fromkeys(spans, gpus_per_node)
    elif not every_job:  # the most per node any job of the whole window had, near or not
        node_gpus = store.goodput.gpus_seen(**window_of)
    else:
        node_gpus = None  # build's own, over every job it is given
    sig = signals(h)
    xids = xid_signals(store.engine, {e.node for e in eps if e.cause.startswith("gpu-xid")},
                       since=since - LOOKBACK, until=until)
    for node, got in xids.items():
        sig.setdefault(node, []).extend(got)
    incs = incidents.build(eps, jobs, until=until, node_gpus=node_gpus, signals=sig,
                           events=h.events, drain_window=drain_window, runs=h.runs,
                           repairs=_repairs(store, {e.node for e in eps}, since - LOOKBACK))
    return Loaded([i for i in incs if since <= i.first_signal.at <= until], jobs, window)
