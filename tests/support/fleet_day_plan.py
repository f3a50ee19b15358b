"""The fleet day's plan and its arithmetic, pure (no cluster): the seeded fault schedule drawn
from docs/fleet.md's mix and rate, the job mix that keeps the fleet ~80 % busy, and the figures
(ETTR, goodput, GPU-hours lost by cause, detect and return times) from what the jobs wrote.
The run on real Slurm is support/fleet_day.py; docs/scale.md says how to read the figures.

Time is compressed: the day is ``day_s`` seconds of wall time on N nodes, its faults those of
a 10,000-GPU fleet's day (1,250 nodes of 8 GPUs at fleet.md's 3.5 failures per 1,000
node-days: 4.4 a day), so each node here fails ``acceleration()`` times faster than a real one.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

GPUS_PER_NODE = 8
FLEET_NODES = 1250                    # a 10,000-GPU fleet
FAILURES_PER_1000_NODE_DAYS = 3.5     # docs/fleet.md's base rate (the published range 2.3-6.5)

# kind -> (share of node faults, the check whose drain names it, what it does to a job on the
# node: "crash" (a CUDA/NCCL error ends the run) or "slow F" (steps F times as long)). The
# shares are fleetgen.CAUSES' (docs/fleet.md) with host-memory and node-local fs-mount folded
# into the GPU kinds they most resemble, and NVLink and thermal (warnings in fleet.md's data,
# drains here) taken from gpu-xid's and ib-link's shares.
KINDS: dict[str, tuple[float, str, str]] = {
    "xid79": (0.30, "gpu-xid:79", "crash"),
    "gpu-lost": (0.15, "gpu-lost", "crash"),
    "ecc": (0.20, "gpu-ecc", "crash"),
    "ib-link": (0.15, "ib-link", "crash"),
    "nvlink": (0.10, "gpu-nvlink", "slow 2"),
    "thermal": (0.10, "gpu-thermal", "slow 1.5"),
}
SHARED_CAUSE = "fs-mount"             # the one shared incident: the shared filesystem hangs

# What a reboot (the BMC's power cycle, through Slurm's RebootProgram) does to each kind, with
# why: the physics the harness's reboot follows (support/fleet_day_faults.py) and the page
# shows. A fault a reboot clears is gone at boot and the node's health check at boot passes;
# one it does not clear is still there after the reboot, and repair must find that out and
# ticket the node, never return it.
REBOOT_CLEARS: dict[str, tuple[bool, str]] = {
    "xid79": (True, "the GPU fell off the bus: the reboot's power cycle brings it back"),
    "gpu-lost": (True, "the GPU is gone from the PCIe bus: the power cycle brings it back"),
    "ecc": (True, "the pending row remap is applied at the GPU's reset"),
    "nvlink": (True, "a hung NVLink trains again at boot"),
    "ib-link": (False, "a cable or transceiver: the link stays down after the reboot"),
    "thermal": (False, "a fan or heatsink: the GPU throttles again once it is warm"),
}


def reboot_clears(kind: str) -> bool:
    """Whether a reboot clears a fault of ``kind`` (the shared hang: no, it is not the node's)."""
    return REBOOT_CLEARS.get(kind, (False, ""))[0]


@dataclass(frozen=True)
class Fault:
    at: float                 # seconds into the day
    kind: str                 # a KINDS key, or "shared-fs"
    node: str                 # "" for the shared fault
    clear_at: float | None    # seconds into the day it goes away by itself (None: stays)

    @property
    def cause(self) -> str:
        return SHARED_CAUSE if self.kind == "shared-fs" else KINDS[self.kind][1]

    @property
    def effect(self) -> str:
        return "stall" if self.kind == "shared-fs" else KINDS[self.kind][2]


@dataclass(frozen=True)
class JobSpec:
    name: str
    nodes: int
    steps: int


def expected_faults_per_day() -> float:
    """Node faults in one day of a 10,000-GPU fleet at docs/fleet.md's base rate."""
    return FLEET_NODES * FAILURES_PER_1000_NODE_DAYS / 1000


def acceleration(nodes: int, day_s: float) -> float:
    """How much faster a node here fails than a real one: a fleet's day on ``nodes`` nodes in
    ``day_s`` seconds."""
    return (FLEET_NODES / nodes) * (86400.0 / day_s)


def schedule(seed: int, nodes: list[str], day_s: float, *, every_kind: bool,
             node_faults: int | None = None, flap: bool = True, shared: bool = True,
             shared_s: float = 12.0) -> list[Fault]:
    """The day's faults, seeded. ``every_kind``: each kind once (the long form: every cause
    shows; more faults than a real day's 4.4, which the figures state); else ``node_faults``
    kinds drawn by share (default: Poisson around the real day's count, at least 1). A
    flapping node: NVLink down, back, down again (two faults, two incidents). The shared
    filesystem hangs once on every node for ``shared_s`` seconds."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    if every_kind:
        picked = list(kinds)
    else:
        n = node_faults if node_faults is not None else max(1, _poisson(rng, expected_faults_per_day()))
        picked = rng.choices(kinds, weights=[KINDS[k][0] for k in kinds], k=n)
    spare = list(nodes)
    rng.shuffle(spare)
    # The shared hang early in the day, the flapping node's return before it, node faults
    # clear of it (a node drained by the shared cause and failing on its own meanwhile is
    # one episode, so one incident: the truth check would see one fault missing).
    s0 = round(rng.uniform(0.3, 0.35) * day_s, 1)
    quiet = (s0 - 0.04 * day_s, s0 + shared_s + 0.12 * day_s)
    out = []
    for k in picked:
        t = rng.uniform(0.1 * day_s, 0.7 * day_s)
        while shared and quiet[0] <= t <= quiet[1]:
            t = rng.uniform(0.1 * day_s, 0.7 * day_s)
        out.append(Fault(round(t, 1), k, spare.pop(), None))
    if flap:
        node, t = spare.pop(), round(rng.uniform(0.08, 0.12) * day_s, 1)
        out.append(Fault(t, "nvlink", node, round(t + 0.12 * day_s, 1)))
        out.append(Fault(round(rng.uniform(0.6, 0.7) * day_s, 1), "nvlink", node, None))
    if shared:
        out.append(Fault(s0, "shared-fs", "", round(s0 + shared_s, 1)))
    return sorted(out, key=lambda f: f.at)


class FaultQueue:
    """The day's fault events ("on", "off") in time order, handed out as they fall due.

    An event that may not happen yet (``ready`` says no: the flapping node not back in service,
    a link that must wait for its drain) stays queued and holds up nothing behind it; an event
    whose time passed while the caller's loop stalled comes out late, never lost. A fault that
    comes late keeps its planned length (its "off" moves with it), and an "off" never comes
    before its "on"."""

    def __init__(self, faults: list[Fault]) -> None:
        self.events: list[tuple[float, str, Fault]] = sorted(
            [(f.at, "on", f) for f in faults]
            + [(f.clear_at, "off", f) for f in faults if f.clear_at is not None],
            key=lambda e: (e[0], e[1] == "on"))
        self.late: dict[Fault, float] = {}  # a fault injected late: by how many seconds

    def due(self, t: float, ready: Any = None) -> list[tuple[str, Fault]]:
        """The events due at ``t`` (seconds into the day) that ``ready(what, fault)`` allows,
        in time order; the "on" events among them are taken as done at ``t``."""
        out: list[tuple[str, Fault]] = []
        keep: list[tuple[float, str, Fault]] = []
        for at, what, f in self.events:
            # An "off" waits for its "on", and never comes in the same instant (a stalled
            # loop once injected and cleared a 12-s filer hang at once).
            held = what == "off" and (any(w == "on" and g is f for _, w, g in keep)
                                      or ("on", f) in out)
            if at <= t and not held and (ready is None or ready(what, f)):
                out.append((what, f))
                if what == "on":
                    self.late[f] = round(t - at, 1)
            else:
                keep.append((at, what, f))
        fired = {f for what, f in out if what == "on"}
        self.events = sorted([(at + self.late[f] if what == "off" and f in fired else at, what, f)
                              for at, what, f in keep], key=lambda e: (e[0], e[1] == "on"))
        return out

    def __len__(self) -> int:
        return len(self.events)


def _poisson(rng: random.Random, mean: float) -> int:
    k, p, limit = 0, 1.0, math.exp(-mean)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def job_mix(nodes: int) -> list[int]:
    """Job sizes (nodes) filling ~80 % of ``nodes``: one 64-node job from 128 nodes up, 8-node
    jobs for about a quarter of the fleet, 1-node jobs for the rest."""
    target = round(0.8 * nodes)
    sizes = [64] if nodes >= 128 else []
    eights = max(1, round(0.25 * nodes / 8)) if nodes >= 16 else 0
    sizes += [8] * eights
    sizes += [1] * max(0, target - sum(sizes))
    return sizes


# -- the figures ----------------------------------------------------------------------------


@dataclass
class Run:
    """One allocation of a job: its batch script's lines, its steps, and the instants before
    the script (support/fleet_day_timeline.py attaches them)."""
    job: str
    start: float  # the batch script's first line
    end: float | None
    rc: int | None
    nodes: list[str]
    steps: list[tuple[int, float]] = field(default_factory=list)  # (step, when it ended)
    job_id: str = ""
    alloc: float | None = None  # slurmctld allocated the nodes (its log); None: not known
    began: float | None = None  # the training program's first instant (its own clock)
    prolog_s: float = 0.0  # slurmguard's Prolog on the allocation's slowest node (its timer)

    @property
    def first(self) -> float:
        """When the run's GPUs were taken: Slurm's allocation, else the script's start."""
        return self.alloc if self.alloc is not None and self.alloc <= self.start else self.start


def parse_runs(name: str, text: str) -> list[Run]:
    """The batch script's lines: "start T JOBID RESTART NODELIST" / "end T JOBID RESTART RC"."""
    from slurmguard.nodeset import expand

    runs: list[Run] = []
    for ln in text.splitlines():
        w = ln.split()
        if len(w) == 5 and w[0] == "start":
            runs.append(Run(name, float(w[1]), None, None, expand(w[4]), job_id=w[2]))
        elif len(w) == 5 and w[0] == "end" and runs and runs[-1].end is None:
            runs[-1].end, runs[-1].rc = float(w[1]), int(w[4])
    return runs


def attach_steps(runs: list[Run], step_log: str) -> None:
    """train_job's "STEP RESTART NODE TIME" lines onto the run whose time span holds them."""
    for ln in step_log.splitlines():
        w = ln.split()
        if len(w) != 4:
            continue
        step, t = int(w[0]), float(w[3])
        for r in reversed(runs):
            if r.start <= t and (r.end is None or t <= r.end + 1.0):
                r.steps.append((step, t))
                break


def figures(runs: list[Run], faults: list[Fault], t0: float, t_end: float, step_s: float,
            n_nodes: int, drains: dict[str, list[tuple[float, float | None]]],
            healthy_drained: list[str],
            detect_drains: dict[str, list[tuple[float, float | None]]] | None = None,
            every: int = 0) -> dict[str, Any]:
    """Everything the day is judged by, from the runs (steps attached) and the faults.

    - allocated: each run's wall time (start to end, or to the day's end) x its GPUs;
    - useful: every step kept (not redone by a later run) x the nominal step time x GPUs; a
      slowed step is useful for its nominal time only, the rest is lost to the fault;
    - ETTR = useful / allocated; goodput = useful / (all GPUs x the day);
    - lost by cause: a run's allocated time less its useful, charged to the fault active on
      one of its nodes during it (the earliest), else to "overhead" (start-up, checkpoints);
    - detect: fault to its node's drain (``detect_drains``: the drains that may count, default
      all); return: drain to undrain, where the fault went away and the node came back."""
    # The window: only runs allocated inside it, each clipped to it; a run's GPUs are taken
    # from Slurm's allocation (the gate and the Prolog run before its script starts).
    runs = [r for r in runs if r.first < t_end]
    by_job: dict[str, list[Run]] = {}
    for r in runs:
        by_job.setdefault(r.job, []).append(r)
    alloc = useful = 0.0
    lost: dict[str, float] = {}
    split: dict[str, float] = {}
    redone_steps = failed = 0
    for jruns in by_job.values():
        later: set[int] = set()
        for r in reversed(jruns):  # a step is kept by the last run that did it
            end = min(r.end if r.end is not None else t_end, t_end)
            gpus = len(r.nodes) * GPUS_PER_NODE
            a = max(0.0, end - max(r.first, t0)) * gpus
            kept = [s for s, t in r.steps if s not in later and t <= t_end]
            redone_steps += sum(1 for s, _ in r.steps if s in later)
            later |= {s for s, _ in r.steps}
            u = len(set(kept)) * step_s * gpus
            alloc += a
            useful += min(u, a)
            cause = _charged(r, faults, t0, end)
            lost[cause] = lost.get(cause, 0.0) + max(0.0, a - u)
            if cause == "overhead":
                for part, s in _overhead_parts(r, max(r.first, t0), end, step_s, every).items():
                    split[part] = split.get(part, 0.0) + s * gpus
            if r.rc not in (None, 0, 75) and r.end is not None and r.end <= t_end:
                failed += 1
    detect: dict[str, list[float]] = {}
    ret: dict[str, list[float]] = {}
    missed = []
    for f in faults:
        if not f.node:
            continue
        spans = [d for d in (drains if detect_drains is None else detect_drains).get(f.node, [])
                 if t0 + f.at - 0.5 <= d[0] < t_end]
        if not spans:
            missed.append(f"{f.kind}@{f.node}")
        if spans:
            detect.setdefault(f.cause, []).append(round(spans[0][0] - t0 - f.at, 1))
            if spans[0][1] is not None and f.clear_at is not None:
                ret.setdefault(f.cause, []).append(round(spans[0][1] - spans[0][0], 1))
    out_s = sum(min(e if e is not None else t_end, t_end) - max(s, t0)
                for spans in drains.values() for s, e in spans if s < t_end)
    return {
        "ettr": round(useful / alloc, 4) if alloc else None,
        "goodput": round(useful / (n_nodes * GPUS_PER_NODE * (t_end - t0)), 4),
        "allocated_gpu_s": round(alloc), "useful_gpu_s": round(useful),
        "lost_gpu_s_by_cause": {k: round(v) for k, v in sorted(lost.items())},
        "overhead_gpu_s_by_part": {k: round(v) for k, v in sorted(split.items())},
        "runs": len(runs), "jobs": len(by_job), "runs_failed": failed,
        "jobs_completed": sum(1 for r in runs if r.rc == 0 and r.end is not None
                              and r.end <= t_end),
        "steps_redone": redone_steps,
        "detect_s_by_cause": {k: v for k, v in sorted(detect.items())},
        "undetected": sorted(missed),
        "return_s_by_cause": {k: v for k, v in sorted(ret.items())},
        "node_s_out_of_service": round(out_s, 1),
        "healthy_drained": healthy_drained,
        "shared_fault": shared_stall(runs, faults, t0, t_end, step_s),
    }


def shared_stall(runs: list[Run], faults: list[Fault], t0: float, t_end: float,
                 step_s: float) -> dict[str, Any]:
    """What the shared fault (no node: the filer's hang) took from the runs it caught: the GPUs
    of the runs alive while it was on, and its stall, each step that spanned it past its
    nominal time x the run's GPUs. Every running GPU waits out the hang, so the stall grows
    with how busy the fleet was when it came, whatever health checks run."""
    out: dict[str, Any] = {}
    for f in faults:
        if f.node:
            continue
        start = t0 + f.at
        stop = min(t0 + f.clear_at if f.clear_at is not None else t_end, t_end)
        gpus = stall = 0.0
        for r in runs:
            end = min(r.end if r.end is not None else t_end, t_end)
            if not (r.first <= stop and end >= start):
                continue
            g = len(r.nodes) * GPUS_PER_NODE
            gpus += g
            ts = sorted(t for _, t in r.steps if t <= t_end)
            stall += g * sum(max(0.0, t - tp - step_s) for tp, t in zip(ts, ts[1:], strict=False)
                             if t >= start and tp <= stop)
        out = {"gpus_running": round(gpus), "stall_gpu_s": round(stall)}
    return out


PROLOG = "allocation to script: the Prolog"
LAUNCH = "allocation to script: Slurm's launch and the gate"
WRAPPER = "script to program: slurmguard run's start"
RESUME = "program to first step: the resume"
CKPT = "steps after a checkpoint, past nominal"
OTHER = "other steps, past nominal: polls, load"
EXIT = "last step to end"


def _overhead_parts(r: Run, start: float, end: float, step_s: float,
                   every: int) -> dict[str, float]:
    """Where a run's time beyond its steps' nominal went (seconds, inside [start, end]), in
    the order it is spent: Slurm's allocation to the batch script (slurmctld's launch and,
    with slurmguard, the gate; its Prolog by the Prolog's own timer), the script to the
    program's first instant (``slurmguard run``'s start; bash's exec for the other arms), the
    program to its first step (the resume), the time past nominal of the steps after a
    checkpoint (``every``: the program's checkpoint interval; the write) and of the other steps
    (each step's drain-notice poll, this host's load), and its last step to its end (the final
    state, the exit). A part whose instants are unknown falls into the next one."""
    ts = sorted(t for _, t in r.steps if start <= t <= end)
    out = dict.fromkeys((PROLOG, LAUNCH, WRAPPER, RESUME, CKPT, OTHER, EXIT), 0.0)
    at = start
    first = ts[0] - step_s if ts else end
    if r.alloc is not None and at < r.start <= first:
        pre = r.start - at
        out[PROLOG] = min(r.prolog_s, pre)
        out[LAUNCH] = pre - out[PROLOG]
        at = r.start
    if r.began is not None and at <= r.began <= first:
        out[WRAPPER] = r.began - at
        at = r.began
    out[RESUME] = max(0.0, first - at)
    if not ts:
        return out
    steps = sorted((t, s) for s, t in r.steps if start <= t <= end)
    out[EXIT] = max(0.0, end - ts[-1])
    for (t_prev, s_prev), (t, _) in zip(steps, steps[1:], strict=False):
        key = CKPT if every and s_prev % every == 0 else OTHER
        out[key] += max(0.0, t - t_prev - step_s)
    return out


def after_day(runs: list[Run], faults: list[Fault], t0: float, t_end: float,
              drains: dict[str, list[tuple[float, float | None]]], ran_on_s: float) -> dict[str, Any]:
    """What happened after the day's end, counted in no figure: runs that ended then (their
    completions), node faults first drained then (seconds after their injection), and how long
    the arm's loop went on (slurmguard's repairs finishing)."""
    late: dict[str, float] = {}
    for f in faults:
        if not f.node:
            continue
        spans = [d for d in drains.get(f.node, []) if d[0] >= t0 + f.at - 0.5]
        if spans and spans[0][0] >= t_end:
            late[f"{f.kind}@{f.node}"] = round(spans[0][0] - t0 - f.at, 1)
    return {"ran_on_s": ran_on_s,
            "completions": sum(1 for r in runs if r.rc == 0 and r.end is not None and r.end > t_end),
            "detected": late}


def _charged(r: Run, faults: list[Fault], t0: float, end: float) -> str:
    for f in faults:
        start, stop = t0 + f.at, t0 + (f.clear_at if f.clear_at is not None else 1e18)
        if start <= end and stop >= r.first and (not f.node or f.node in r.nodes):
            return f.cause
    return "overhead"


def fault_rows(faults: list[Fault]) -> list[dict[str, Any]]:
    return [asdict(f) | {"cause": f.cause} for f in faults]
