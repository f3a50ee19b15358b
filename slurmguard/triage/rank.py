"""`slurmguard triage`: rank suspect nodes with the evidence behind each rank.

:func:`rank` is pure (table-tested in tests/test_triage_rank.py); its inputs come from the
store's API (``Store.nodes.summary``, ``Store.nodes.alerts``, ``Store.nodes.hook_speeds``). Scoring
(documented in docs/triage.md) favours what predicts lost GPU time:

- a lemon mark (+50) or a pending burn-in (+20): policy already judged the node;
- unhealthy runs in the last 7 days (+10 each, at most +100): repeat offenders;
- the last run unhealthy (+15): it is failing now;
- slow hooks (+5 per multiple of the fleet's typical duration, at most +30): a node whose
  checks take several times the fleet's is often sick (a hung mount, a throttled GPU);
- a node risk score at or above ``risk.level`` (+ a fifth of the score, at most +20), with
  its top factors as evidence (slurmguard.fleet.risk, docs/fleet.md): a node about to fail;
- membership in an open fleet alert halves the score: when many nodes fail the same check at
  once the suspect is the shared cause (one filesystem, one switch), and the alert is listed
  first with its nodes.

Checker errors never count: they are slurmguard's faults, not the node's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SLOW_FACTOR = 3.0  # a node's mean hook time this many times the fleet's median is "slow"
SLOW_MIN_SECONDS = 1.0  # ... and at least this much slower in absolute terms
SLOW_MIN_NODES = 3  # the fleet's median means nothing with fewer nodes


@dataclass(frozen=True)
class Suspect:
    node: str
    score: float
    evidence: tuple[str, ...] = field(default_factory=tuple)
    alerts: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"], d["alerts"] = list(self.evidence), list(self.alerts)
        return d


def slow_nodes(speeds: Mapping[str, Mapping[str, float]]) -> dict[str, tuple[str, float, float]]:
    """{hook: {node: mean seconds}} -> {node: (hook, node mean, fleet median)} for slow nodes.

    A node is slow for a hook when its mean is >= SLOW_FACTOR x the median of all nodes'
    means and at least SLOW_MIN_SECONDS more; the slowest hook (by ratio) is kept.
    """
    out: dict[str, tuple[str, float, float]] = {}
    for hook, per_node in sorted(speeds.items()):
        if len(per_node) < SLOW_MIN_NODES:
            continue
        median = statistics.median(per_node.values())
        for node, mean in per_node.items():
            if mean >= SLOW_FACTOR * median and mean - median >= SLOW_MIN_SECONDS:
                ratio = mean / median if median > 0 else float("inf")
                prev = out.get(node)
                if prev is None or ratio > (prev[1] / prev[2] if prev[2] > 0 else float("inf")):
                    out[node] = (hook, mean, median)
    return out


def rank(summaries: Iterable[Any], alerts: Sequence[Any] = (),
         speeds: Mapping[str, Mapping[str, float]] | None = None,
         risks: Mapping[str, Any] | None = None,
         risk_level: float | None = None) -> list[Suspect]:
    """Suspects, highest score first (ties by name); nodes with nothing against them left out.

    ``summaries``: store NodeSummary objects; ``alerts``: open AlertRow objects;
    ``speeds``: {hook: {node: mean seconds}} from ``Store.nodes.hook_speeds``; ``risks``: node ->
    :class:`slurmguard.fleet.risk.Risk` (only those at or above ``risk_level`` count; by
    default ``risk.level``'s default).
    """
    from slurmguard.nodeset import expand

    if risk_level is None:
        from slurmguard.fleet.params import RiskParams

        risk_level = RiskParams().level

    members: dict[str, list[Any]] = {}
    for a in alerts:
        for node in expand(a.nodes, source="alert.nodes", allow_empty=True):
            members.setdefault(node, []).append(a)
    slow = slow_nodes(speeds or {})
    by_name = {s.name: s for s in summaries}
    suspects = []
    hot = {n: r for n, r in (risks or {}).items() if r.score >= risk_level}
    for name in sorted(set(by_name) | set(slow) | set(hot)):
        s = by_name.get(name)
        score, evidence = 0.0, []
        if s is not None:
            if s.lemon:
                score += 50
                evidence.append(f"lemon: {s.lemon_reason or 'repeated failures'}")
            if s.burnin_required:
                score += 20
                evidence.append("awaiting burn-in")
            if s.failures:
                score += min(100, 10 * s.failures)
                evidence.append(f"{s.failures} unhealthy run{'s' if s.failures != 1 else ''} in 7 days")
            if s.last_health == "unhealthy":
                score += 15
                checks = ", ".join(s.failing_checks) or s.last_reason or "unhealthy"
                evidence.append(f"failing now: {checks}")
        if name in slow:
            hook, mean, median = slow[name]
            ratio = mean / median if median > 0 else 6.0
            score += min(30.0, 5 * ratio)
            evidence.append(f"slow: {hook} takes {mean:.1f}s on average, fleet median {median:.1f}s")
        if name in hot:
            score += min(20.0, hot[name].score / 5)
            evidence.append(f"risk {hot[name].score:g}: {hot[name].why()}")
        if score <= 0:
            continue
        mine = members.get(name, [])
        for a in mine:
            evidence.append(f"in fleet alert #{a.id}: {a.cause} on {a.count} nodes "
                            f"({a.scope}): shared cause suspected")
        if mine:
            score /= 2
        suspects.append(Suspect(name, round(score, 1), tuple(evidence), tuple(a.id for a in mine)))
    suspects.sort(key=lambda x: (-x.score, x.node))
    return suspects

