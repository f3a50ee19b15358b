"""Lemons and flapping: nodes that fail again and again, or alternate pass and fail.

A node is a lemon when, within the policy window (default 1 h),
  * it failed at least ``lemon_failures`` times (default 3): unhealthy runs plus drains by
    someone else (an admin, Kubernetes, Slurm itself); our own drains come with an unhealthy
    run already, so they are not counted twice; or
  * its failure rate is far above the fleet's: at least ``lemon_rate_factor`` (5x) the fleet
    rate, at least ``lemon_rate_floor`` (50 %), over at least ``lemon_rate_min_runs`` runs.
A node is flapping when its judged runs change between pass and fail at least
``flap_transitions`` (4) times in the window: it counts as failing (it becomes a lemon with a
flapping reason) even though its last run may have passed.
Checker errors (health ``error``) and ``unsupported`` runs are never a failure or a pass.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from slurmguard.contract import REASON_PREFIX
from slurmguard.policy.params import PolicyParams, human_window
from slurmguard.policy.types import ERROR, UNHEALTHY, UNSUPPORTED, NodeView, Sample


@dataclass(frozen=True)
class Verdict:
    source: str  # "lemon" or "flapping"
    text: str  # "3 failures in 1h (gpu-xid)"

    @property
    def reason(self) -> str:
        return f"{REASON_PREFIX} {self.source}: {self.text}"


def judged(samples: tuple[Sample, ...], since: float) -> list[Sample]:
    """Runs in the window that judged the node (not checker errors), oldest first."""
    return [s for s in sorted(samples, key=lambda s: s.at)
            if s.at >= since and s.health not in (ERROR, UNSUPPORTED)]


def _since(view: NodeView, now: float, window: float) -> float:
    # History from before an admin or a burn-in returned the node is forgiven.
    return max(now - window, view.reset_at or float("-inf"))


def failures(view: NodeView, now: float, window: float) -> int:
    since = _since(view, now, window)
    runs = sum(1 for s in judged(view.samples, since) if s.health == UNHEALTHY)
    return runs + sum(1 for t in view.foreign_drains if t >= since)


def transitions(view: NodeView, now: float, window: float) -> int:
    states = [s.health == UNHEALTHY for s in judged(view.samples, _since(view, now, window))]
    return sum(1 for a, b in zip(states, states[1:], strict=False) if a != b)


def top_checks(view: NodeView, now: float, window: float, limit: int = 2) -> str:
    counts = Counter(c for s in judged(view.samples, _since(view, now, window)) if s.health == UNHEALTHY
                     for c in s.checks)
    return ", ".join(name for name, _ in counts.most_common(limit))


def lemon_verdict(view: NodeView, now: float, p: PolicyParams,
                  fleet_rate: float | None = None) -> Verdict | None:
    """Why this node is a lemon now (or flapping), or None. Pure."""
    w = human_window(p.window)
    checks = top_checks(view, now, p.window)
    suffix = f" ({checks})" if checks else ""
    n = failures(view, now, p.window)
    if n >= p.lemon_failures:
        return Verdict("lemon", f"{n} failures in {w}{suffix}")
    flips = transitions(view, now, p.window)
    if flips >= p.flap_transitions:
        return Verdict("flapping", f"{flips} pass/fail changes in {w}{suffix}")
    runs = judged(view.samples, _since(view, now, p.window))
    if fleet_rate is not None and len(runs) >= p.lemon_rate_min_runs:
        bad = sum(1 for s in runs if s.health == UNHEALTHY)
        rate = bad / len(runs)
        if rate >= p.lemon_rate_floor and rate >= p.lemon_rate_factor * fleet_rate and bad > 0:
            return Verdict("lemon", f"failure rate {rate:.0%} vs fleet {fleet_rate:.0%} in {w}{suffix}")
    return None
