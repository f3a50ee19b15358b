"""Shared faults are not the node's own: failing runs excused by a fleet alert. Pure.

When the blast-radius guard stops draining for a cause it records a fleet alert naming a
suspect shared cause (policy/blast.py): a filer that hangs, a fabric that drops. Every node
that noticed it failed that check, and without this rule a filer that hangs twice in an hour
made every node that saw it twice a flapping lemon (pass, fail, pass, fail, pass: 4 changes),
the very fault the guard had called shared.

A failing check is **excused** at time t when a shared-cause alert for that check covers the
node (its scope holds the node, or the alert names it) and t lies in the alert's window:
from ``blast_window`` before it opened (the drains that filled the cap, and the nodes that saw
the fault first, came before the alert) to its close, or, while open, ``blast_window`` past
its last update (the store reuses an open alert that long, and the guard keeps refusing the
cause that long). Excused checks open no episode; a failing run whose every failing check is
excused is judged as a checker error is: neither a failure nor a pass, so it makes no
pass/fail change either. A run that also fails a check of its own still fails for that check.

Cost: one sort of the node's alert windows per cause and one walk over its runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from slurmguard.policy.types import UNHEALTHY, Sample

FLEET = "fleet"  # the scope that holds every node


@dataclass(frozen=True)
class SharedFault:
    """One fleet alert as the rule sees it: ``cause`` (the guard's cause, a check name) was a
    suspect shared cause in ``scope`` from ``start`` to ``end``; ``nodes``: those it names."""

    cause: str
    scope: str
    start: float
    end: float
    nodes: frozenset[str] = frozenset()


def from_alert(cause: str, scope: str, opened: float, updated: float, closed: float | None,
               blast_window: float, nodes: Iterable[str] = ()) -> SharedFault:
    """The alert's window (module doc): [opened - blast_window, updated + blast_window], cut
    at its close."""
    end = updated + blast_window if closed is None else min(closed, updated + blast_window)
    return SharedFault(cause, scope, opened - blast_window, end, frozenset(nodes))


def covering(node: str, faults: Iterable[SharedFault],
             scopes: Mapping[str, frozenset[str]] | None = None) -> tuple[tuple[str, float, float], ...]:
    """(cause, start, end) of the ``faults`` that cover ``node``: the fleet's, those of a
    scope (``scopes``: Slurm's partitions and config groups, policy/blast.py:scopes) that
    holds it, and those that name it."""
    scopes = scopes or {}
    return tuple(sorted((f.cause, f.start, f.end) for f in faults
                        if f.scope == FLEET or node in f.nodes or node in scopes.get(f.scope, ())))


def _merged(windows: Iterable[tuple[str, float, float]]) -> dict[str, list[tuple[float, float]]]:
    by_cause: dict[str, list[tuple[float, float]]] = {}
    for cause, start, end in sorted(windows):
        spans = by_cause.setdefault(cause, [])
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return by_cause


def excuse(samples: Iterable[Sample], shared: Iterable[tuple[str, float, float]]) -> list[Sample]:
    """``samples`` (sorted by time) less the failing checks the ``shared`` windows excuse; a
    failing run left without a failing check is dropped. Linear: each cause's windows are
    walked once, in step with the runs."""
    spans = _merged(shared)
    runs = sorted(samples, key=lambda s: s.at)
    if not spans:
        return runs
    at = dict.fromkeys(spans, 0)  # per cause: the first window that may still cover a run
    out: list[Sample] = []
    for s in runs:
        if s.health != UNHEALTHY or not s.checks:
            out.append(s)
            continue
        own = []
        for c in s.checks:
            ws = spans.get(c)
            if ws is None:
                own.append(c)
                continue
            i = at[c]
            while i < len(ws) and ws[i][1] < s.at:
                i += 1
            at[c] = i
            if not (i < len(ws) and ws[i][0] <= s.at):
                own.append(c)
        if len(own) == len(s.checks):
            out.append(s)
        elif own:
            out.append(replace(s, checks=tuple(own)))
    return out
