"""Episodes: what one failure is. Pure.

An episode is one node, one cause, from the first failing result to the return: it opens at a
drain of the node (by anyone) and closes at the next clear (UNDRAIN/resume) in the events
ledger, or at repair's return (``repair_return``: repair resumes the node itself and writes
no ``clear``). Its start is the first failing result of that cause (or any failing result, for a
drain by someone else) within ``lookback`` before the drain and after the previous episode;
without one, the drain itself. Further drains while it is open (a lemon drain, an admin's
re-drain) and every failing run until the return belong to it: a drained node that keeps
failing its healthcheck is one failure, not one per run.

An episode whose node and cause are named by a fleet alert of the blast-radius guard, and
whose drain falls within the alert's time (from ``blast_window`` before it opened until it
closed or was last updated), is *shared*: one suspected shared cause, counted once as a
fleet incident, never as N node failures (docs/fleet.md, "Counting rules").

Failing runs that never led to a drain (refused by the guard, observe mode, degraded only) are
not failures; they are counted apart as ``undrained``.

The lemon rule counts episodes the same way once it does (trust-guard's change); this module
could then be the one definition both use (it depends on plain data only).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmguard.contract import reason_source
from slurmguard.fleet.history import Alert, Ev, History, Run

LOOKBACK = 86400.0  # a failing result more than a day before the drain is another story
# Events that return a node: a clear (admin resume, slurmguard's UNDRAIN, burn-in) and
# autonomous repair's return, which resumes the node through Slurm without a clear event.
RETURNS = ("clear", "repair_return")


@dataclass(frozen=True)
class Episode:
    node: str
    cause: str  # the check (gpu-xid), policy (lemon) or foreign actor (admin, slurm, kubernetes)
    start: float  # first failing result (or the drain)
    drained_at: float
    drained_by: str  # actor kind of the drain
    returned_at: float | None  # None: still out at the end of the history
    returned_by: str | None  # actor kind of the clear
    shared: int | None = None  # index of the fleet alert it belongs to

    def out_until(self, until: float) -> float:
        return self.returned_at if self.returned_at is not None else until


def _cause(ev: Ev) -> str:
    if ev.actor_kind != "slurmguard" and not reason_source(ev.reason):
        return ev.actor_kind  # an admin's or Slurm's own drain: the actor is the cause we know
    return ev.source or reason_source(ev.reason) or "unknown"


def _start(failing: Sequence[Run], times: Sequence[float], cause: str, drained: float,
           floor: float, lookback: float) -> float:
    lo = bisect_left(times, max(floor, drained - lookback))
    hi = bisect_right(times, drained)
    cands = failing[lo:hi]
    mine = [r.at for r in cands if cause in r.checks]
    if mine:
        return mine[0]
    return cands[0].at if cands else drained


def node_episodes(node: str, runs: Sequence[Run], events: Sequence[Ev], *,
                  lookback: float = LOOKBACK) -> list[Episode]:
    """The episodes of one node from its runs and events (both oldest first)."""
    failing = [r for r in runs if r.checks]
    times = [r.at for r in failing]
    out: list[Episode] = []
    open_: dict[str, object] | None = None
    floor = float("-inf")
    for ev in events:
        if ev.kind == "drain" and open_ is None:
            cause = _cause(ev)
            open_ = {"cause": cause, "start": _start(failing, times, cause, ev.at, floor, lookback),
                     "drained_at": ev.at, "drained_by": ev.actor_kind}
        elif ev.kind in RETURNS and open_ is not None:
            out.append(Episode(node, returned_at=ev.at, returned_by=ev.actor_kind, **open_))  # type: ignore[arg-type]
            floor, open_ = ev.at, None
    if open_ is not None:
        out.append(Episode(node, returned_at=None, returned_by=None, **open_))  # type: ignore[arg-type]
    return out


def mark_shared(episodes: Iterable[Episode], alerts: Sequence[Alert],
                blast_window: float = 3600.0) -> list[Episode]:
    """Episodes with ``shared`` set where a fleet alert names their node and cause."""
    from dataclasses import replace

    out = []
    for ep in episodes:
        hit = None
        for i, a in enumerate(alerts):
            end = a.closed if a.closed is not None else a.updated
            if (a.cause == ep.cause and ep.node in a.nodes
                    and a.opened - blast_window <= ep.drained_at <= end + blast_window):
                hit = i
                break
        out.append(replace(ep, shared=hit) if hit is not None else ep)
    return out


def build(history: History, *, lookback: float = LOOKBACK,
          blast_window: float = 3600.0) -> list[Episode]:
    """Every episode of the history, oldest first (shared ones marked)."""
    eps: list[Episode] = []
    for node in sorted(set(history.events)):
        eps += node_episodes(node, history.runs.get(node, ()), history.events[node],
                             lookback=lookback)
    eps = mark_shared(eps, history.alerts, blast_window)
    eps.sort(key=lambda e: (e.start, e.node))
    return eps


def undrained(history: History, episodes: Sequence[Episode]) -> dict[str, int]:
    """Failing runs outside every episode, per check: failures that drained nothing."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in episodes:
        spans.setdefault(e.node, []).append((e.start, e.out_until(history.until)))
    out: dict[str, int] = {}
    for node, runs in history.runs.items():
        mine = spans.get(node, [])
        for r in runs:
            if r.checks and history.since <= r.at <= history.until and not any(
                    a <= r.at <= b for a, b in mine):
                for c in r.checks:
                    out[c] = out.get(c, 0) + 1
    return out
