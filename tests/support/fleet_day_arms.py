"""The fleet day's four arms (docs/fleet-day.md), on the same seed and schedule, at once on
separate clusters of this host, over one window:

- ``slurm``: Slurm alone, as a cluster without health checks is: JobRequeue, a failed job
  submitted again, no drain unless Slurm itself marks a node DOWN; a node that fails jobs
  keeps taking them.
- ``nhc``: Slurm with LBNL NHC as a site runs it (support/nhc_node.py): every node's NHC each
  tick, as slurmd's HealthCheckProgram would run it on HealthCheckInterval, compressed like
  slurmguard's checks; NHC marks nodes offline and online itself.
- ``slurmguard``: the product (support/fleet_day.py's module docstring).
- ``oracle``: Slurm alone plus an instant, correct drain of the faulty node a job failed on:
  the best any tool that reacts to failed jobs can do. A reference row, not a competitor.

Pure (no cluster): what each arm can see of each fault kind (the page's table), and the
harness's own limits measured from what a day recorded.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from support.fleet_day_plan import KINDS
from support.nhc_node import SEES as NHC_SEES

ARMS = ("slurm", "nhc", "slurmguard", "oracle")
LABELS = {"slurm": "Slurm alone", "nhc": "Slurm + LBNL NHC", "slurmguard": "slurmguard",
          "oracle": "oracle (reference)"}
FAULT_KINDS = (*KINDS, "shared-fs")


def can_see(arm: str, kind: str) -> tuple[bool, str]:
    """Whether ``arm`` can see a fault of ``kind`` at all (drain the node for it), and why."""
    crash = kind in KINDS and KINDS[kind][2] == "crash"
    if arm == "slurm":
        return False, "no health check: a node is drained only when Slurm marks it DOWN"
    if arm == "nhc":
        return NHC_SEES[kind]
    if arm == "oracle":
        if crash:
            return True, "a job fails on the node, which is drained at once"
        return False, ("no job fails: it slows (seen by no job's exit)" if kind in KINDS
                       else "every job stalls; none fails on a node of its own")
    if kind == "shared-fs":
        return True, "the fs-mount check (one shared incident; the blast-radius guard caps drains)"
    return True, f"the {KINDS[kind][1]} check"


def visibility() -> dict[str, dict[str, bool]]:
    """{arm: {kind: can see}} (the page's table; the CI form's expectation of NHC's misses)."""
    return {a: {k: can_see(a, k)[0] for k in FAULT_KINDS} for a in ARMS}


class StartLine:
    """One clock for every arm: each arm's day starts at the same instant (the last arm ready
    sets it), so every figure of every arm is over the same [t0, t0 + day_s]."""

    def __init__(self, arms: int) -> None:
        self.t0 = 0.0
        self.barrier = threading.Barrier(arms, action=self._go, timeout=3600)

    def _go(self) -> None:
        self.t0 = time.time()

    def wait(self) -> float:
        self.barrier.wait()
        return self.t0

    def abort(self) -> None:
        """An arm ended (or failed): none may wait for it at the line any more."""
        self.barrier.abort()


def stalls(pass_starts: list[float], t0: float, period: float, over: float = 5.0) -> list[list[float]]:
    """The loop's stalls: [when (s into the day), seconds] for each gap between two passes'
    starts longer than the loop's period plus ``over`` seconds (it waited on Slurm)."""
    return [[round(a - t0, 1), round(b - a, 1)] for a, b in zip(pass_starts, pass_starts[1:], strict=False)
            if b - a > period + over]


def load_summary(samples: list[tuple[float, float]], t0: float, t_end: float) -> dict[str, Any]:
    """The 1-minute load average sampled inside the window: mean, max, and up to 24 samples."""
    inside = [(t, v) for t, v in samples if t0 <= t <= t_end]
    if not inside:
        return {"mean": None, "max": None, "samples": []}
    vals = [v for _, v in inside]
    step = max(1, len(inside) // 24)
    return {"mean": round(sum(vals) / len(vals), 1), "max": round(max(vals), 1),
            "samples": [[round(t - t0, 1), v] for t, v in inside[::step]]}


def spread(xs: list[float]) -> dict[str, Any]:
    """How many, the median and the largest (one node's NHC run times, say)."""
    if not xs:
        return {"n": 0, "median": None, "max": None}
    ys = sorted(xs)
    return {"n": len(ys), "median": round(ys[len(ys) // 2], 3), "max": round(ys[-1], 3)}
