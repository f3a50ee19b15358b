"""Incidents: one failure explained from its first bad signal to the node's return, with its
cost in GPU-hours. Pure: a function of the store's history (episodes, events) and of goodput's
per-job breakdowns (Slurm accounting + the wrapper's reports); docs/incidents.md.

One incident is one node episode (:mod:`slurmguard.fleet.episodes`, the counting rule of
docs/fleet.md), or one shared-cause incident (a fleet alert of the blast-radius guard) with
all its episodes. A job run is *hit* by an incident when one of its nodes was drained by it
from the run's start to ``drain_window`` after its end (goodput's own rule for a faulty node,
``goodput.drain_window``), unless it is the job's last run and the job completed; a run hit
by several incidents belongs to the earliest drain only, so no cost is counted twice.

The cost, in GPU-seconds (shown as GPU-hours), four parts that never overlap:

* ``redone``: work computed since the last complete checkpoint of each hit run, redone by
  the next run: goodput's ``lost_work`` of the run (steps x median step time) x its GPUs;
* ``detect``: each hit run's time on the failing node after its last step until it ended
  there (goodput's ``drained_node``: hung on the fault, or stopping on the drain notice)
  x its GPUs: the part of "first signal to drain" that a job paid for;
* ``waiting``: from a hit run's end to the job's next allocation (goodput's ``requeue_wait``)
  plus that allocation's start-up until its first step (goodput's ``restart``) x its GPUs;
* ``out_of_service``: the node's GPUs x drain to return (or to the window's end), whether
  or not the queue had work for them: capacity lost, not job badput.

``redone + detect + waiting`` is job badput and equals the same parts of goodput's breakdown
for the same runs (the rest of goodput's badput has no incident: first start-ups, saves,
stalls, stragglers, a job's own crash); :func:`badput` gives both sides.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurmguard.fleet.episodes import Episode
from slurmguard.fleet.history import Run
from slurmguard.fleet.incident_timeline import Step, timeline

COSTS = ("redone", "detect", "waiting", "out_of_service")
JOB_COSTS = ("redone", "detect", "waiting")
# goodput's parts (slurmguard.goodput.account.CAUSES) that an incident explains, per cost
GOODPUT_PARTS = {"redone": ("lost_work",), "detect": ("drained_node",),
                 "waiting": ("requeue_wait", "restart")}
COMPLETED = ("COMPLETED", "SUCCESS")
SIGNAL_LOOKBACK = 86400.0  # an earlier signal counts this long before its drain (build)


@dataclass(frozen=True)
class JobRun:
    """One allocation of a job: a run of goodput's breakdown (``runs`` of ``goodput --json``)."""

    start: float
    end: float
    nodes: tuple[str, ...]
    gpus: int
    state: str = ""
    parts: Mapping[str, float] = field(default_factory=dict)  # seconds per goodput part
    steps_lost: int = 0
    step_time_s: float | None = None
    resume_step: int | None = None
    last_step: int | None = None
    infra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str
    runs: tuple[JobRun, ...]  # oldest first
    user: str = ""
    partition: str = ""


@dataclass(frozen=True)
class Signal:
    """A sign that a node was bad: a failing run, a burn-in verdict, a job's slow report."""

    at: float
    what: str
    source: str


@dataclass(frozen=True)
class Hit:
    """One run of a job that an incident ended, and what it cost."""

    job_id: str
    run: int  # index in the job's runs
    node: str
    start: float
    end: float
    gpus: int
    state: str
    steps_redone: int
    step_time_s: float | None
    next_start: float | None
    next_nodes: tuple[str, ...]
    cost: Mapping[str, float]  # GPU-seconds per JOB_COSTS part
    seconds: Mapping[str, float] = field(default_factory=dict)  # the same in seconds

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "run": self.run, "node": self.node, "start": self.start,
                "end": self.end, "gpus": self.gpus, "state": self.state,
                "steps_redone": self.steps_redone, "step_time_s": self.step_time_s,
                "next_start": self.next_start, "next_nodes": list(self.next_nodes),
                "gpu_hours": {k: round(v / 3600, 4) for k, v in self.cost.items()},
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


@dataclass
class Incident:
    id: str
    cause: str
    nodes: tuple[str, ...]
    episodes: list[Episode]
    first_signal: Signal
    drained_at: float
    drained_by: str
    returned_at: float | None
    outcome: str  # returned, ticket, out
    hits: list[Hit] = field(default_factory=list)
    timeline: list[Step] = field(default_factory=list)
    cost: dict[str, float] = field(default_factory=dict)  # GPU-seconds per COSTS part
    shared: bool = False

    @property
    def total(self) -> float:
        return sum(self.cost.values())

    def to_dict(self, *, timeline: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id, "cause": self.cause, "nodes": list(self.nodes), "shared": self.shared,
            "first_signal": {"at": self.first_signal.at, "what": self.first_signal.what,
                             "source": self.first_signal.source},
            "drained_at": self.drained_at, "drained_by": self.drained_by,
            "returned_at": self.returned_at, "outcome": self.outcome,
            "detect_s": round(self.drained_at - self.first_signal.at, 3),
            "jobs": sorted({h.job_id for h in self.hits}),
            "gpu_hours": {k: round(self.cost.get(k, 0.0) / 3600, 4) for k in COSTS},
            "total_gpu_hours": round(self.total / 3600, 4)}
        if timeline:
            d["hits"] = [h.to_dict() for h in self.hits]
            d["timeline"] = [s.to_dict() for s in self.timeline]
        return d


def job_from_breakdown(b: Mapping[str, Any]) -> Job:
    """A :class:`Job` from goodput's breakdown dict (``Breakdown.to_dict`` or the stored one)."""
    runs = []
    for r in b.get("runs") or []:
        if r.get("start") is None or r.get("end") is None:
            continue
        runs.append(JobRun(float(r["start"]), float(r["end"]), tuple(r.get("nodes") or ()),
                           int(r.get("gpus") or 0), str(r.get("state") or ""),
                           {k: float(v) for k, v in (r.get("parts") or {}).items()},
                           int(r.get("steps_lost") or 0), r.get("step_time_s"),
                           r.get("resume_step"), r.get("last_step"), r.get("infra") or {}))
    runs.sort(key=lambda r: r.start)
    return Job(str(b["job_id"]), str(b.get("state") or ""), tuple(runs),
               str(b.get("user") or ""), str(b.get("partition") or ""))


def _hit_cost(job: Job, i: int) -> tuple[dict[str, float], dict[str, float]]:
    """GPU-seconds and seconds per job cost of run ``i`` (seconds: for clusters without GPUs)."""
    r = job.runs[i]
    secs = {"redone": r.parts.get("lost_work", 0.0), "detect": r.parts.get("drained_node", 0.0),
            "waiting": 0.0}
    cost = {"redone": secs["redone"] * r.gpus, "detect": secs["detect"] * r.gpus, "waiting": 0.0}
    if i + 1 < len(job.runs):
        nxt = job.runs[i + 1]
        secs["waiting"] = max(0.0, nxt.start - r.end) + nxt.parts.get("restart", 0.0)
        cost["waiting"] = secs["waiting"] * nxt.gpus
    return cost, secs


def _is_hit(job: Job, i: int, node: str, drained_at: float, drain_window: float) -> bool:
    r = job.runs[i]
    if node not in r.nodes or not r.start <= drained_at <= r.end + drain_window:
        return False
    return not (i == len(job.runs) - 1 and job.state.upper() in COMPLETED)


def runs_by_node(jobs: Iterable[Job]) -> dict[str, list[tuple[Job, int]]]:
    """(job, run index) per node: each episode then looks at its node's runs only."""
    out: dict[str, list[tuple[Job, int]]] = {}
    for job in jobs:
        for i, r in enumerate(job.runs):
            for n in r.nodes:
                out.setdefault(n, []).append((job, i))
    return out


def job_spans(episodes: Sequence[Episode], *, drain_window: float = 3600.0,
              lookback: float = SIGNAL_LOOKBACK) -> dict[str, list[tuple[float, float]]]:
    """Per node: the times (merged, oldest first) a job's run on it must touch to matter to
    :func:`build` over ``episodes``; a job none of whose runs touches them is neither hit
    nor on a timeline, so a store need read only these jobs. An episode's span ends at its
    drain and begins at the earliest of: ``drain_window`` before the drain (a hit run ended
    no earlier), and its incident's earliest possible first signal (a run on the timeline
    ended no earlier): each of the incident's episodes' first failing run, and ``lookback``
    before each drain (a shared incident's first signal may be another node's)."""
    low: dict[Any, float] = {}
    for k, ep in enumerate(episodes):
        key = ("shared", ep.shared) if ep.shared is not None else ("node", k)
        low[key] = min(low.get(key, ep.start), ep.start, ep.drained_at - lookback)
    spans: dict[str, list[tuple[float, float]]] = {}
    for k, ep in enumerate(episodes):
        key = ("shared", ep.shared) if ep.shared is not None else ("node", k)
        spans.setdefault(ep.node, []).append(
            (min(low[key], ep.drained_at - drain_window), ep.drained_at))
    out = {}
    for node, got in spans.items():
        merged: list[tuple[float, float]] = []
        for lo, hi in sorted(got):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        out[node] = merged
    return out


def touches(node: str, start: float, end: float,
            spans: Mapping[str, Sequence[tuple[float, float]]]) -> bool:
    """Whether a job on ``node`` from ``start`` to ``end`` meets one of its :func:`job_spans`
    (a job's runs lie within its start and end, so one that does not can touch none)."""
    got = spans.get(node, ())
    k = bisect_right(got, (end, math.inf))  # the spans that begin by the job's end
    return k > 0 and got[k - 1][1] >= start  # merged: the last of them ends latest


def gpus_seen(jobs: Iterable[Job]) -> dict[str, int]:
    """A node's GPUs where not known otherwise: the most GPUs per node any run on it had."""
    out: dict[str, int] = {}
    for job in jobs:
        for r in job.runs:
            for n in r.nodes:
                out[n] = max(out.get(n, 0), r.gpus // len(r.nodes))
    return out


def assign_hits(episodes: Sequence[Episode], jobs: Iterable[Job],
                drain_window: float = 3600.0,
                by_node: Mapping[str, list[tuple[Job, int]]] | None = None) -> dict[int, list[Hit]]:
    """Hit runs per episode (by index in ``episodes``): each run to its earliest drain."""
    order = sorted(range(len(episodes)), key=lambda k: (episodes[k].drained_at, episodes[k].node))
    if by_node is None:
        by_node = runs_by_node(jobs)
    out: dict[int, list[Hit]] = {}
    taken: set[tuple[str, int]] = set()
    for k in order:
        ep = episodes[k]
        for job, i in by_node.get(ep.node, ()):
            if (job.job_id, i) in taken or not _is_hit(job, i, ep.node, ep.drained_at, drain_window):
                continue
            taken.add((job.job_id, i))
            r = job.runs[i]
            nxt = job.runs[i + 1] if i + 1 < len(job.runs) else None
            out.setdefault(k, []).append(Hit(
                job.job_id, i, ep.node, r.start, r.end, r.gpus, r.state,
                int(r.infra.get("steps_redone") or r.steps_lost), r.step_time_s,
                nxt.start if nxt else None, nxt.nodes if nxt else (), *_hit_cost(job, i)))
    return out


def out_of_service(ep: Episode, gpus: int, until: float) -> float:
    """Node GPU-seconds from the drain to the return (or ``until``), within the history."""
    return max(0.0, min(ep.out_until(until), until) - ep.drained_at) * gpus


def build(episodes: Sequence[Episode], jobs: Sequence[Job], *, until: float,
          node_gpus: Mapping[str, int] | None = None, signals: Mapping[str, Sequence[Signal]] | None = None,
          events: Mapping[str, Sequence[Any]] | None = None, drain_window: float = 3600.0,
          lookback: float = SIGNAL_LOOKBACK, runs: Mapping[str, Sequence[Run]] | None = None,
          repairs: Mapping[str, Sequence[Any]] | None = None) -> list[Incident]:
    """Every incident of ``episodes`` (oldest first), with its hit runs and cost. ``runs``: the
    nodes' failing runs (History.runs), to name the one an episode starts at; ``repairs``: per
    node, its repair episodes (slurmguard.repair.ledger), for the outcome; the timeline and
    outcome come from :func:`slurmguard.fleet.incident_timeline.timeline`."""
    by_node = runs_by_node(jobs)
    hits = assign_hits(episodes, jobs, drain_window, by_node)
    gpus = {**gpus_seen(jobs), **(node_gpus or {})}
    # A signal before the node's previous return belongs to the previous episode.
    floor: dict[int, float] = {}
    last: dict[str, float] = {}
    for k in sorted(range(len(episodes)), key=lambda k: episodes[k].drained_at):
        ep = episodes[k]
        floor[k] = last.get(ep.node, float("-inf"))
        last[ep.node] = ep.out_until(float("inf"))
    groups: dict[Any, list[int]] = {}
    for k, ep in enumerate(episodes):
        groups.setdefault(("shared", ep.shared) if ep.shared is not None else ("node", k), []).append(k)
    out = []
    by_job = {j.job_id: j for j in jobs}
    for key, ks in groups.items():
        eps = [episodes[k] for k in ks]
        inc = _incident(eps, [h for k in ks for h in hits.get(k, [])], key[0] == "shared",
                        signals or {}, lookback, runs or {}, [floor[k] for k in ks])
        inc.cost["out_of_service"] = sum(out_of_service(e, gpus.get(e.node, 0), until) for e in eps)
        out.append(inc)
    out.sort(key=lambda i: (i.first_signal.at, i.id))
    for inc in out:  # each timeline ends where its node's next incident begins
        timeline(inc, by_job, events or {}, until, by_node, _next_begins(inc, out), repairs or {})
    return out


def _next_begins(inc: Incident, incidents: Sequence[Incident]) -> dict[str, float]:
    """Per node of ``inc``: when the node's next incident begins (its first signal)."""
    out: dict[str, float] = {}
    for other in incidents:
        if other is inc or other.first_signal.at <= inc.first_signal.at:
            continue
        for n in set(other.nodes) & set(inc.nodes):
            out[n] = min(out.get(n, other.first_signal.at), other.first_signal.at)
    return out


def _first_signal(eps: Sequence[Episode], signals: Mapping[str, Sequence[Signal]],
                  lookback: float, runs: Mapping[str, Sequence[Run]],
                  floors: Sequence[float]) -> Signal:
    """The earliest sign: the episodes' first failing run (the drain itself where none), or
    an earlier signal (an Xid line's kernel time, a burn-in verdict, a job's slow-node
    report) within ``lookback`` before the drain and after the node's previous return
    (``floors``, one per episode)."""
    ep = min(eps, key=lambda e: (e.start, e.node))
    run = next((r for r in runs.get(ep.node, ()) if r.at == ep.start and r.checks), None)
    if run is not None:
        job = f" of job {run.job_id}" if run.job_id else ""
        best = Signal(ep.start, f"first failing run on {ep.node}: {run.hook}{job} "
                                f"({', '.join(run.checks)})", "store: runs")
    else:
        best = Signal(ep.start, f"drain of {ep.node}, no failing run before it", "store: ledger")
    for e, lo in zip(eps, floors, strict=True):
        for s in signals.get(e.node, ()):
            if max(e.drained_at - lookback, lo) < s.at < best.at:
                best = s
    return best


def _incident(eps: list[Episode], hits: list[Hit], shared: bool,
              signals: Mapping[str, Sequence[Signal]], lookback: float,
              runs: Mapping[str, Sequence[Run]], floors: Sequence[float]) -> Incident:
    first = min(eps, key=lambda e: (e.drained_at, e.node))
    nodes = tuple(sorted({e.node for e in eps}))
    iid = (f"shared-{first.cause}-{int(first.drained_at)}" if shared
           else f"{first.node}-{int(first.drained_at)}")
    returned = [e.returned_at for e in eps]
    back = None if any(r is None for r in returned) else max(r for r in returned if r is not None)
    cost = dict.fromkeys(COSTS, 0.0)
    for h in hits:
        for k, v in h.cost.items():
            cost[k] += v
    return Incident(iid, first.cause, nodes, eps, _first_signal(eps, signals, lookback, runs, floors),
                    first.drained_at, first.drained_by, back, "returned" if back else "out",
                    sorted(hits, key=lambda h: (h.start, h.job_id)), [], cost, shared)


def badput(jobs: Iterable[Job], incidents: Iterable[Incident]) -> dict[str, float]:
    """GPU-seconds of goodput's badput of ``jobs`` (every part but productive, each run's
    seconds x its GPUs, a requeue wait x the GPUs waited for, as goodput weighs them), the
    part the incidents explain (their job costs), and the rest: no incident explains it."""
    total = 0.0
    for job in jobs:
        prev_end = None
        for r in job.runs:
            total += sum(v for k, v in r.parts.items() if k != "productive") * r.gpus
            if prev_end is not None:
                total += max(0.0, r.start - prev_end) * r.gpus
            prev_end = r.end
    explained = explained_by(incidents)
    return {"goodput_badput": total, "explained": explained, "no_incident": total - explained}


def explained_by(incidents: Iterable[Incident], job_ids: set[str] | None = None) -> float:
    """GPU-seconds of job badput the incidents explain (of ``job_ids`` only, when given)."""
    return sum(v for i in incidents for h in i.hits if job_ids is None or h.job_id in job_ids
               for k, v in h.cost.items() if k in JOB_COSTS)


def week(at: float) -> str:
    """The ISO week of ``at`` (UTC), as ``2026-W49``."""
    y, w, _ = datetime.fromtimestamp(at, UTC).isocalendar()
    return f"{y}-W{w:02d}"


def sums(incidents: Iterable[Incident], key: str) -> dict[str, dict[str, float]]:
    """GPU-seconds per cost part and in total, per cause (``key="cause"``) or ISO week of the
    first signal (``key="week"``)."""
    out: dict[str, dict[str, float]] = {}
    for i in incidents:
        g = i.cause if key == "cause" else week(i.first_signal.at)
        row = out.setdefault(g, {**dict.fromkeys(COSTS, 0.0), "incidents": 0.0})
        row["incidents"] += 1
        for k in COSTS:
            row[k] += i.cost.get(k, 0.0)
    return dict(sorted(out.items()))
