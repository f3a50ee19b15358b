"""The risk score's curve on the site's own history: at each level, how many flags were
true, how many failures they foresaw, and how far ahead (`slurmguard fleet risk --curve`).
Pure: a function of a :class:`History` and the ``[risk]`` params, counted with the one
scorer (:mod:`slurmguard.fleet.scoring`).

Every node is scored once a day over the window (as replay does), once; each level then
only thresholds those scores, so a curve of 20 levels costs little more than one replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurmguard.fleet import scoring
from slurmguard.fleet.episodes import Episode
from slurmguard.fleet.history import History
from slurmguard.fleet.params import RiskParams
from slurmguard.fleet.risk import DAY, NodeSignals, returns_of, score

LEVELS = tuple(range(10, 101, 5))


def daily_scores(h: History, eps: Sequence[Episode], rp: RiskParams) -> tuple[list[float], dict[str, list[float]]]:
    """The days of the window (each day from ``since``, and its end) and every node's score
    on each (nodes with nothing to score are left out: their score is 0 every day)."""
    starts: dict[str, list[float]] = {}
    for e in eps:
        if e.shared is None:
            starts.setdefault(e.node, []).append(e.start)
    back = returns_of(eps)
    days = [h.since + k * DAY for k in range(1, int((h.until - h.since) // DAY) + 1)]
    if not days or days[-1] < h.until - 60.0:  # the window's end is judged too
        days.append(h.until)
    out: dict[str, list[float]] = {}
    for node in sorted(set(h.runs) | set(starts) | set(h.burnin)):
        sig = NodeSignals.build(h.runs.get(node, ()), sorted(starts.get(node, ())),
                                h.burnin.get(node, ()), back.get(node, ()))
        if not (sig.failures or sig.any_warning or sig.burnin or sig.failed_jobs):
            continue
        out[node] = [score(sig.inputs(t, rp), rp).score for t in days]
    return days, out


def flags_at(days: Sequence[float], scores: dict[str, list[float]],
             level: float) -> dict[str, list[tuple[float, float]]]:
    """node -> alarms at ``level``."""
    out = {}
    for node, ss in scores.items():
        spans = scoring.alarms(days, [s >= level for s in ss])
        if spans:
            out[node] = spans
    return out


def curve(h: History, eps: Sequence[Episode], rp: RiskParams,
          levels: Sequence[float] = LEVELS) -> dict[str, Any]:
    """Precision, recall, recall a day ahead and the median lead at each level."""
    days, scores = daily_scores(h, eps, rp)
    fails = scoring.failures_of(eps, h.until)
    rows = []
    for level in levels:
        flags = flags_at(days, scores, level)
        r = scoring.score(flags, fails, h.since, h.until, rp.horizon_days * DAY)
        rows.append({"level": level, "nodes_flagged": len(flags), **r})
    return {"since": h.since, "until": h.until, "horizon_days": rp.horizon_days,
            "current_level": rp.level, "nodes": len(h.first_seen), "levels": rows}
