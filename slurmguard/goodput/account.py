"""Goodput accounting of one job: a pure function from what the sources saw to where the time went.

:func:`account` splits a job's wall time (first start to last end, requeue waits included)
into parts that always add up to it, none negative:

* ``productive``: step time whose result survived (on the chain of steps the job finished with);
* ``lost_work``: steps computed after the checkpoint a later run resumed from (redone or lost);
* ``requeue_wait``: between one allocation's end and the next one's start;
* ``restart``: an allocation's start until its first step began (launch, load, resume);
* ``stall``: no step for longer than the stall timeout (the wrapper's records), or steps
  slower than ``stall_factor`` x the run's median step;
* ``checkpoint_save``: checkpoint saves (``progress.saving`` / ``checkpoint_saved(seconds=)``);
* ``drained_node``: a run that ended on a node found faulty (drained by slurmguard, seen
  failed by the requeue watcher, Slurm's NODE_FAIL, or a drain notice that ended the run),
  from its last step to its end;
* ``straggler``: productive steps that ran slower than the job's best pace
  (``straggler_factor``), or than its non-slow nodes when the wrapper named slow nodes;
* ``other``: inside an allocation, explained by none of the above (the exit after the last
  step of a successful run, a failed run's exit without a known fault);
* ``unknown``: an allocation no source describes (not run under the wrapper, no progress
  reports): never counted as productive. :attr:`Breakdown.unknown` says why.

Beside the parts, each run carries its *infrastructure figures* (``infra``): drain notices and
how long each took to arrive, checkpoint-now saves and their durations, and the steps redone
because the run ended for the infrastructure; :func:`infra_summary` adds them up per job.

Each instant of an allocation gets exactly one label (saves over stalls over the run's
phases), so the parts add up by construction; tests/test_goodput_account.py checks it with
Hypothesis. Sources are gathered by :mod:`slurmguard.goodput.sources`; docs/goodput.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CAUSES = ("lost_work", "requeue_wait", "restart", "stall", "checkpoint_save", "drained_node",
          "straggler", "other", "unknown")
PARTS = ("productive", *CAUSES)
# Run end states that mean the run's nodes failed under it (sacct's State).
NODE_FAIL_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})


@dataclass(frozen=True)
class Allocation:
    """One run of the job on its nodes: an ``sacct -D`` record, or the wrapper's run."""

    start: float
    end: float
    nodes: tuple[str, ...] = ()
    gpus: int = 0
    state: str = ""


@dataclass(frozen=True)
class RunRecord:
    """What ``slurmguard run`` recorded for one run (runs.jsonl, slurmguard/job/wrapper.py)."""

    restart: int
    started: float
    ended: float | None = None
    resume_step: int | None = None
    verdict: str = ""
    first_step: tuple[float, int] | None = None  # (t, step) of the first step reported
    last_step: tuple[float, int] | None = None  # (t, step) of the highest step reported
    median_step_s: float | None = None
    step_samples: int = 0
    checkpoints: tuple[tuple[float, int, float | None], ...] = ()  # (t saved, step, seconds)
    stalls: tuple[tuple[float, float], ...] = ()  # (last step before, next step or end)
    node_median_step_s: Mapping[str, float] = field(default_factory=dict)
    slow_nodes: tuple[str, ...] = ()
    notice_latencies: tuple[float | None, ...] = ()  # per drain notice: drain -> wrapper told
    checkpoint_now_s: tuple[float | None, ...] = ()  # durations of the checkpoint-now saves
    ended_by_notice: bool = False


@dataclass(frozen=True)
class Fault:
    """A node found faulty at ``at``: a slurmguard drain, a watcher-seen failure, NODE_FAIL."""

    node: str
    at: float
    why: str = ""


@dataclass(frozen=True)
class JobInputs:
    job_id: str
    allocations: tuple[Allocation, ...] = ()
    runs: tuple[RunRecord, ...] = ()
    faults: tuple[Fault, ...] = ()
    user: str = ""
    partition: str = ""
    state: str = ""  # the job's final state (sacct), or the last run's verdict
    accounting: bool = True  # allocations come from Slurm accounting (else: the wrapper's)
    store: bool = True  # drains/faults were looked up in the store
    notes: tuple[str, ...] = ()  # extra "unknown" reasons from the gatherers


@dataclass(frozen=True)
class Params:
    drain_window: float = 3600.0  # a fault this long after a run's end still counts
    straggler_factor: float = 1.2  # a run slower than this x the job's best pace straggles
    stall_factor: float = 5.0  # steps slower than this x the median count as stalled
    min_samples: int = 3  # step intervals a run needs for its median to set the pace


@dataclass
class RunBreakdown:
    restart: int | None
    start: float
    end: float
    nodes: tuple[str, ...]
    gpus: int
    state: str
    resume_step: int | None
    last_step: int | None
    steps_lost: int
    step_time_s: float | None
    parts: dict[str, float]
    infra: dict[str, Any] = field(default_factory=dict)  # see _infra

    def to_dict(self) -> dict[str, Any]:
        return {"restart": self.restart, "start": self.start, "end": self.end, "infra": self.infra,
                "nodes": list(self.nodes), "gpus": self.gpus, "state": self.state,
                "resume_step": self.resume_step, "last_step": self.last_step,
                "steps_lost": self.steps_lost, "step_time_s": self.step_time_s,
                "parts": {k: round(v, 3) for k, v in self.parts.items()}}


@dataclass
class Breakdown:
    job_id: str
    user: str
    partition: str
    state: str
    nodes: tuple[str, ...]
    gpus: int
    start: float | None
    end: float | None
    wall_s: float  # first start to last end: the parts add up to this
    held_s: float  # time with nodes allocated (wall minus requeue waits)
    parts: dict[str, float]  # seconds per part
    gpu_seconds: dict[str, float]  # per part, x the job's GPUs (requeue waits: GPUs awaited)
    held_gpu_s: float
    unknown: list[str]
    runs: list[RunBreakdown]
    steps_lost: int
    step_time_s: float | None

    @property
    def ettr(self) -> float | None:
        """Effective training time ratio: productive / allocated wall time."""
        return self.parts["productive"] / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "user": self.user, "partition": self.partition,
            "state": self.state, "nodes": list(self.nodes), "gpus": self.gpus,
            "start": self.start, "end": self.end, "wall_s": round(self.wall_s, 3),
            "allocated_s": round(self.wall_s, 3), "held_s": round(self.held_s, 3),
            "ettr": None if self.ettr is None else round(self.ettr, 4),
            "parts": {k: round(v, 3) for k, v in self.parts.items()},
            "gpu_hours": {k: round(v / 3600, 4) for k, v in self.gpu_seconds.items()},
            "allocated_gpu_hours": round(sum(self.gpu_seconds.values()) / 3600, 4),
            "held_gpu_hours": round(self.held_gpu_s / 3600, 4),
            "productive_gpu_hours": round(self.gpu_seconds["productive"] / 3600, 4),
            "unknown": list(self.unknown), "steps_lost": self.steps_lost,
            "step_time_s": self.step_time_s, "runs": [r.to_dict() for r in self.runs],
            "infra": infra_summary([r.infra for r in self.runs]),
        }


def _infra(a: Allocation, r: RunRecord | None, lost_steps: int) -> dict[str, Any]:
    """One run's infrastructure figures: notices, checkpoint-now saves, steps redone."""
    infra_end = a.state.upper() in NODE_FAIL_STATES or (
        r is not None and (r.verdict == "infra" or r.ended_by_notice))
    return {"notice_latency_s": list(r.notice_latencies) if r else [],
            "checkpoint_now_s": list(r.checkpoint_now_s) if r else [],
            "ended_by_notice": bool(r and r.ended_by_notice),
            "steps_redone": lost_steps if infra_end else 0}


def infra_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A job's infrastructure figures from its runs' ``infra`` (stored breakdowns too)."""
    lat = [x for r in runs for x in r.get("notice_latency_s") or [] if _finite(x)]
    saves = [x for r in runs for x in r.get("checkpoint_now_s") or [] if _finite(x)]
    return {"steps_redone": sum(int(r.get("steps_redone") or 0) for r in runs),
            "notices": sum(len(r.get("notice_latency_s") or []) for r in runs),
            "notice_latency_median_s": round(statistics.median(lat), 3) if lat else None,
            "notice_latency_max_s": round(max(lat), 3) if lat else None,
            "checkpoint_now": sum(len(r.get("checkpoint_now_s") or []) for r in runs),
            "checkpoint_now_s": round(sum(saves), 3),
            "runs_ended_by_notice": sum(bool(r.get("ended_by_notice")) for r in runs)}


def _zero() -> dict[str, float]:
    return dict.fromkeys(PARTS, 0.0)


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def paint(start: float, end: float, spans: Sequence[tuple[float, float, str]]) -> dict[str, float]:
    """Seconds per label of [start, end): ``spans`` in priority order (first wins overlaps);
    what no span covers is left out (the caller's base spans should cover everything)."""
    free = [(start, end)] if end > start else []
    out: dict[str, float] = {}
    for s, e, label in spans:
        if e <= s or not free:
            continue
        rest = []
        got = 0.0
        for a, b in free:
            lo, hi = max(a, s), min(b, e)
            if lo >= hi:
                rest.append((a, b))
                continue
            got += hi - lo
            if a < lo:
                rest.append((a, lo))
            if hi < b:
                rest.append((hi, b))
        free = rest
        if got:
            out[label] = out.get(label, 0.0) + got
    return out


def match_runs(allocs: Sequence[Allocation], runs: Sequence[RunRecord]) -> list[RunRecord | None]:
    """The wrapper run of each allocation: the run that started inside it (sacct's times are
    whole seconds, so one second of slack), else none."""
    out: list[RunRecord | None] = []
    used: set[int] = set()
    for a in allocs:
        found = None
        for i, r in enumerate(runs):
            if i not in used and a.start - 1.0 <= r.started <= a.end + 1.0:
                found = i
                break
        if found is not None:
            used.add(found)
        out.append(runs[found] if found is not None else None)
    return out


def _resume(r: RunRecord) -> int:
    if r.resume_step is not None:
        return r.resume_step
    if r.first_step is not None:
        return max(0, r.first_step[1] - 1)  # throttled reports: a guess from above
    return 0


def _last_ckpt(r: RunRecord) -> int | None:
    steps = [s for _, s, _ in r.checkpoints if r.last_step is None or s <= r.last_step[1]]
    return max(steps) if steps else None


def account(job: JobInputs, params: Params = Params()) -> Breakdown:
    """Where the job's wall time went; see the module docstring for each part."""
    unknown: list[str] = list(job.notes)
    allocs = _allocations(job)
    runs = sorted(job.runs, key=lambda r: (r.started, r.restart))
    matched = match_runs(allocs, runs)
    parts, gpu_s = _zero(), _zero()
    all_nodes: list[str] = []
    for a in allocs:
        all_nodes.extend(n for n in a.nodes if n not in all_nodes)
    gpus = max((a.gpus for a in allocs), default=0)
    if not allocs:
        unknown.append("no allocation known for this job")
        return Breakdown(job.job_id, job.user, job.partition, job.state, (), 0, None, None,
                         0.0, 0.0, parts, gpu_s, 0.0, unknown, [], 0, None)
    if not job.accounting:
        unknown.append("no Slurm accounting: allocations are the wrapper's runs, so the time "
                       "before each run's wrapper started (scheduling, prolog, launch) is not "
                       "counted and requeue waits include it")
    if not job.store:
        unknown.append("no node-state store: drains unknown, so a failed run's end is 'unknown'")

    # The pace the job can run at: its best run's median step (enough samples), and within a
    # run that named slow nodes, the median of its other nodes.
    paces = [r.median_step_s for r in runs if _finite(r.median_step_s) and r.median_step_s > 0
             and r.step_samples >= params.min_samples]
    best = min(paces) if paces else None
    job_med = statistics.median(paces) if paces else None
    keep = _kept_steps(job, runs)
    out_runs: list[RunBreakdown] = []
    steps_lost = 0
    prev_end: float | None = None
    for a, r in zip(allocs, matched, strict=True):
        if prev_end is not None and a.start > prev_end:
            wait = a.start - prev_end
            parts["requeue_wait"] += wait
            gpu_s["requeue_wait"] += wait * a.gpus
        prev_end = a.end
        rp, lost_steps, med = _run_parts(a, r, job, params, keep, best, job_med, unknown)
        steps_lost += lost_steps
        for k, v in rp.items():
            parts[k] += v
            gpu_s[k] += v * a.gpus
        out_runs.append(RunBreakdown(
            r.restart if r else None, a.start, a.end, a.nodes, a.gpus, a.state,
            r.resume_step if r else None, r.last_step[1] if r and r.last_step else None,
            lost_steps, med, rp, _infra(a, r, lost_steps)))
    wall = allocs[-1].end - allocs[0].start
    held = sum(a.end - a.start for a in allocs)
    return Breakdown(job.job_id, job.user, job.partition, job.state, tuple(all_nodes), gpus,
                     allocs[0].start, allocs[-1].end, wall, held, parts, gpu_s,
                     sum((a.end - a.start) * a.gpus for a in allocs), unknown, out_runs,
                     steps_lost, job_med)


def _allocations(job: JobInputs) -> list[Allocation]:
    """The job's allocations in time order, overlaps cut (each second counted once)."""
    allocs: list[Allocation] = []
    horizon = -math.inf
    for a in sorted((a for a in job.allocations if _finite(a.start) and _finite(a.end)),
                    key=lambda a: a.start):
        start = max(a.start, horizon)  # overlapping records: count each second once
        if a.end <= start:
            continue
        allocs.append(Allocation(start, a.end, a.nodes, max(0, a.gpus), a.state))
        horizon = a.end
    return allocs


def _kept_steps(job: JobInputs, runs: Sequence[RunRecord]) -> dict[int, float]:
    """Which steps of each run survived (by ``id`` of the run): those at or below every later
    run's resume step; the last run's all when the job succeeded, else up to its last
    complete checkpoint."""
    keep: dict[int, float] = {}
    final_ok = job.state.upper() in ("COMPLETED", "SUCCESS") or (
        bool(runs) and runs[-1].verdict == "success")
    for i, r in enumerate(runs):
        later = [_resume(x) for x in runs[i + 1:]]
        if later:
            keep[id(r)] = float(min(later))
        elif final_ok:
            keep[id(r)] = math.inf
        else:
            ck = _last_ckpt(r)
            keep[id(r)] = float(ck if ck is not None else _resume(r))
    return keep


def _run_parts(a: Allocation, r: RunRecord | None, job: JobInputs, params: Params,
               keep: Mapping[int, float], best: float | None, job_med: float | None,
               unknown: list[str]) -> tuple[dict[str, float], int, float | None]:
    """Seconds per part of one allocation, the steps it lost, and its median step time."""
    A, E = a.start, a.end
    rp = _zero()
    why = _no_progress(a, r)
    if r is None or why:
        rp["unknown"] = E - A
        unknown.append(why)
        return rp, 0, None
    med = r.median_step_s if _finite(r.median_step_s) and r.median_step_s > 0 else job_med
    m = med or 0.0
    resume = _resume(r)
    t1, n1 = r.first_step
    tl, nl = r.last_step
    fss = min(max(t1 - m * max(0, n1 - resume), A), E)  # when the first step began
    tl = min(max(tl, fss), E)
    tail = _tail(a, r, job, params, m)
    spans: list[tuple[float, float, str]] = []
    for t, _, secs in r.checkpoints:
        if _finite(secs) and secs and secs > 0:
            spans.append((t - secs, t, "checkpoint_save"))
    if tail == "drained_node":  # the hang on a failing node is the fault's, not a stall
        spans.append((tl, E, tail))
    for f, to in r.stalls:  # before the first step it is the restart, by definition
        if to - f > m:
            spans.append((max(f, fss) + m, to, "stall"))
    spans += [(A, fss, "restart"), (fss, tl, "step"), (tl, E, tail)]
    got = paint(A, E, spans)
    step_s = got.pop("step", 0.0)
    for k, v in got.items():
        rp[k] += v
    lost_steps = _split_steps(rp, step_s, r, params, keep, best, m, resume, nl)
    return rp, lost_steps, med


def _no_progress(a: Allocation, r: RunRecord | None) -> str:
    """Why an allocation's time is all unknown ('' when its run reported progress)."""
    if r is None:
        return (f"allocation at {a.start:.0f} on {','.join(a.nodes) or '?'}: no wrapper record "
                "(not run under `slurmguard run`, or its records were not found)")
    if r.first_step is None or r.last_step is None:
        return (f"run {r.restart}: no progress reports (the program does not call "
                "slurmguard.progress)")
    return ""


def _tail(a: Allocation, r: RunRecord, job: JobInputs, params: Params, m: float) -> str:
    """Whose is the time after the last step: a faulty node's (a node fault, or the run
    ended on a drain notice), a stall's, or other."""
    faulty = a.state.upper() in NODE_FAIL_STATES or r.ended_by_notice or any(
        f.node in a.nodes and a.start <= f.at <= a.end + params.drain_window for f in job.faults)
    ended_stalled = any(to >= a.end - max(m, 1.0) for _, to in r.stalls)
    if r.verdict == "success":
        return "other"
    if faulty:
        return "drained_node"
    if ended_stalled:
        return "stall"
    return "unknown" if not job.store else "other"


def _split_steps(rp: dict[str, float], step_s: float, r: RunRecord, params: Params,
                 keep: Mapping[int, float], best: float | None, m: float, resume: int,
                 nl: int) -> int:
    """Share the step time out into rp: slow steps as stall, steps past the kept checkpoint
    as lost work, a straggler's excess, the rest productive. Returns the steps lost."""
    executed = max(0, nl - resume)
    # Steps far slower than the median (a stall the wrapper was not told to time out).
    if m > 0 and executed:
        slack = step_s - executed * m * params.stall_factor
        if slack > 0:
            rp["stall"] += slack
            step_s -= slack
    lost_steps = 0
    limit = keep.get(id(r), math.inf)
    if limit < nl:
        lost_steps = int(nl - max(limit, resume))
    lost = min(step_s, lost_steps * m) if m > 0 else (step_s if lost_steps else 0.0)
    if m <= 0 and lost_steps and executed:
        lost = step_s * lost_steps / executed
    rp["lost_work"] += lost
    step_s -= lost
    pace = best
    if r.slow_nodes and r.node_median_step_s:
        fast = [v for n, v in r.node_median_step_s.items() if n not in r.slow_nodes]
        if fast:
            pace = min(statistics.median(fast), pace) if pace else statistics.median(fast)
    kept_steps = max(0, executed - lost_steps)
    if pace and m > params.straggler_factor * pace and kept_steps:
        strag = min(step_s, (m - pace) * kept_steps)
        rp["straggler"] += strag
        step_s -= strag
    rp["productive"] += step_s
    return lost_steps


def combine(items: Sequence[Breakdown]) -> dict[str, Any]:
    """Totals over jobs: seconds and GPU-hours per part, ETTR (GPU-weighted when any job had
    GPUs, else wall-weighted), and the jobs with unknown parts."""
    parts, gpu = _zero(), _zero()
    wall = held_gpu = 0.0
    for b in items:
        wall += b.wall_s
        held_gpu += b.held_gpu_s
        for k in PARTS:
            parts[k] += b.parts[k]
            gpu[k] += b.gpu_seconds[k]
    return totals(len(items), wall, parts, gpu, held_gpu,
                  sum(1 for b in items if b.unknown or b.parts["unknown"] > 0))


def totals(jobs: int, wall: float, parts: Mapping[str, float], gpu: Mapping[str, float],
           held_gpu: float, with_unknown: int) -> dict[str, Any]:
    alloc_gpu = sum(gpu.values())
    if alloc_gpu > 0:
        ettr: float | None = gpu["productive"] / alloc_gpu
    else:
        ettr = parts["productive"] / wall if wall > 0 else None
    return {"jobs": jobs, "wall_s": round(wall, 3),
            "ettr": None if ettr is None else round(ettr, 4),
            "allocated_gpu_hours": round(alloc_gpu / 3600, 4),
            "held_gpu_hours": round(held_gpu / 3600, 4),
            "productive_gpu_hours": round(gpu["productive"] / 3600, 4),
            "parts": {k: round(parts[k], 3) for k in PARTS},
            "gpu_hours": {k: round(gpu[k] / 3600, 4) for k in PARTS},
            "jobs_with_unknown": with_unknown}
