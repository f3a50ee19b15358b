"""Lemons and flapping: nodes that fail again and again, or alternate pass and fail.

Failures are counted as **episodes**, not sightings: an episode is one node, one cause (the
failing check), from its first failing run to the first later run in which that check passed.
The prolog that found a lost GPU, the epilog of the same job, every health check and agent
run that sees it while the node waits: one failure. A run that did not run the check does
not end its episode (a prolog may run fewer checks than a health check).

A node is a lemon when, within the policy window (default 1 h),
  * it failed at least ``lemon_failures`` times (default 3): episodes plus drains by
    someone else (an admin, Kubernetes, Slurm itself); our own drains come with a failing
    run already, so they are not counted twice; or
  * its failure rate is far above the fleet's: episodes / (episodes + passing runs) at least
    ``lemon_rate_factor`` (5x) the fleet rate and at least ``lemon_rate_floor`` (50 %), over
    at least ``lemon_rate_min_runs`` runs.
A node is flapping when its judged runs change between pass and fail at least
``flap_transitions`` (4) times in the window: it counts as failing (it becomes a lemon with a
flapping reason) even though its last run may have passed.
Checker errors (health ``error``) and ``unsupported`` runs are never a failure or a pass.
Nor is a failing check that a fleet alert named a suspect shared cause of (``NodeView.shared``,
policy/shared.py): a shared filesystem that hangs twice in an hour is not every node's flapping.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from slurmguard.contract import REASON_PREFIX
from slurmguard.policy.params import PolicyParams, human_window
from slurmguard.policy.shared import excuse
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


def runs(view: NodeView, now: float, window: float) -> list[Sample]:
    """The node's judged runs in the window, less the failing checks of shared faults."""
    return judged(tuple(excuse(view.samples, view.shared)) if view.shared else view.samples,
                  _since(view, now, window))


def _since(view: NodeView, now: float, window: float) -> float:
    # History from before an admin or a burn-in returned the node is forgiven.
    return max(now - window, view.reset_at or float("-inf"))


def episodes(samples: Iterable[Sample]) -> list[tuple[str, float]]:
    """(cause, start) of each failure episode in judged ``samples`` (oldest first). Pure.

    A cause's episode opens at a failing run that names it while it is not open, and closes
    at a run in which that check passed (``Sample.passed``; a passing run whose checks are not
    known closes every episode)."""
    out: list[tuple[str, float]] = []
    open_: set[str] = set()
    for s in samples:
        if s.passed is None and s.health != UNHEALTHY:
            open_.clear()
            continue
        open_ -= set(s.passed or ())
        if s.health != UNHEALTHY:
            open_.discard("unhealthy")
            continue
        for cause in s.checks or ("unhealthy",):
            if cause not in open_:
                open_.add(cause)
                out.append((cause, s.at))
    return out


def failures(view: NodeView, now: float, window: float) -> int:
    """Failure episodes in the window, plus drains by someone else."""
    return _failures(view, runs(view, now, window), _since(view, now, window))


def _failures(view: NodeView, seen: list[Sample], since: float) -> int:
    return len(episodes(seen)) + sum(1 for t in view.foreign_drains if t >= since)


def transitions(view: NodeView, now: float, window: float) -> int:
    return _transitions(runs(view, now, window))


def _transitions(seen: list[Sample]) -> int:
    states = [s.health == UNHEALTHY for s in seen]
    return sum(1 for a, b in zip(states, states[1:], strict=False) if a != b)


def top_checks(view: NodeView, now: float, window: float, limit: int = 2) -> str:
    """The causes with the most episodes in the window (ties: the earliest first)."""
    return _top_checks(runs(view, now, window), limit)


def _top_checks(seen: list[Sample], limit: int = 2) -> str:
    counts = Counter(c for c, _ in episodes(seen) if c != "unhealthy")
    return ", ".join(name for name, _ in counts.most_common(limit))


def lemon_verdict(view: NodeView, now: float, p: PolicyParams,
                  fleet_rate: float | None = None) -> Verdict | None:
    """Why this node is a lemon now (or flapping), or None. Pure."""
    w = human_window(p.window)
    # The window's runs, shared faults excused, taken once: every count below reads them.
    seen = runs(view, now, p.window)
    checks = _top_checks(seen)
    suffix = f" ({checks})" if checks else ""
    n = _failures(view, seen, _since(view, now, p.window))
    if n >= p.lemon_failures:
        return Verdict("lemon", f"{n} failures in {w}{suffix}")
    flips = _transitions(seen)
    if flips >= p.flap_transitions:
        return Verdict("flapping", f"{flips} pass/fail changes in {w}{suffix}")
    if fleet_rate is not None and len(seen) >= p.lemon_rate_min_runs:
        # Episodes against passes: a node that stays failing for an hour is one incident.
        bad = len(episodes(seen))
        passes = sum(1 for s in seen if s.health != UNHEALTHY)
        rate = bad / (bad + passes) if bad + passes else 0.0
        if rate >= p.lemon_rate_floor and rate >= p.lemon_rate_factor * fleet_rate and bad > 0:
            return Verdict("lemon", f"failure rate {rate:.0%} vs fleet {fleet_rate:.0%} in {w}{suffix}")
    return None
