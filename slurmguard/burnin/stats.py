"""Straggler statistics: pure functions, no I/O (docs/burnin.md, "How a node is judged").

Per comparison group (same GPU model and count, or a configured Slurm feature / NodeSet) and
per metric, over each node's latest complete burn-in:

* ``median`` and ``MAD`` (median absolute deviation) of the group's values;
* a node's **score** = value / median, inverted (median / value) for metrics where lower is
  better (latency, time), so that 1.0 is "as good as the median node" and 0.8 is "20 % worse";
* its **robust z** = 0.6745 * (value - median) / MAD (Iglewicz and Hoaglin's modified z),
  signed so that a negative z is *worse* than the median, with MAD floored at
  ``mad_floor`` x median: a group of identical values (MAD 0) must not make a 0.1 % wobble
  infinitely significant;
* **flagged** when score < ``threshold`` (default 0.90) or z < -``z_limit`` (default 3.5;
  0 turns the z rule off). A node better than the median is never flagged;
* groups smaller than ``min_group`` (default 4) give **no verdict**, said so: three nodes
  cannot tell a slow node from a slow group;
* **degrading**: the node's nightly scores fell ``trend_nights`` (4) times in a row (each
  night lower than the one before) by at least ``trend_min_drop`` (0.05) and at least
  ``trend_sigmas`` (3) x the group's noise in all, while still above the threshold: it is
  reported (and may be drained, ``drain_degrading``) before it crosses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

# Modified z-score constant: 0.6745 = the 0.75 quantile of the standard normal, so that
# z ~ N(0, 1) for normal data (Iglewicz & Hoaglin 1993).
Z_CONST = 0.6745


@dataclass(frozen=True)
class StatParams:
    threshold: float = 0.90
    z_limit: float = 3.5
    mad_floor: float = 0.01
    min_group: int = 4
    trend_nights: int = 4
    trend_min_drop: float = 0.05
    trend_sigmas: float = 3.0

    @classmethod
    def from_section(cls, section: Mapping[str, object]) -> StatParams:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in section.items() if k in names})  # type: ignore[arg-type]


@dataclass(frozen=True)
class GroupStats:
    group: str
    metric: str
    n: int
    median: float | None
    mad: float | None
    verdict: bool  # False: too few nodes (or no usable value) to judge anyone
    why: str = ""  # why no verdict


class Judgement(NamedTuple):
    """One node's judgement on one metric (a NamedTuple: 100,000 a report, built cheaply)."""

    node: str
    metric: str
    value: float
    score: float | None  # None when the group gives no verdict
    z: float | None
    flagged: bool
    why: str  # "score 0.71 < 0.90", "robust z -5.2 < -3.5", "" when fine


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence (mean of the two middle values when even)."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return float(s[mid]) if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def mad(values: Sequence[float], center: float | None = None) -> float:
    """Median absolute deviation from ``center`` (default: the median)."""
    c = median(values) if center is None else center
    return median([abs(v - c) for v in values])


def score(value: float, med: float, higher_is_better: bool = True) -> float:
    """value / median (or median / value when lower is better); 1.0 = the median node.

    A zero or negative median (nothing measured) gives 1.0 for everyone: no one can be
    compared with it. A zero value where lower is better is the best possible: +inf.
    """
    if med <= 0 or not math.isfinite(med):
        return 1.0
    if higher_is_better:
        return value / med
    return math.inf if value <= 0 else med / value


def robust_z(value: float, med: float, spread: float, higher_is_better: bool = True,
             mad_floor: float = 0.01) -> float:
    """Modified z of ``value`` against (median, MAD); negative = worse than the median."""
    floor = abs(med) * mad_floor
    denom = max(spread, floor)
    if denom <= 0:
        return 0.0
    z = Z_CONST * (value - med) / denom
    return z if higher_is_better else -z


def usable(values: Mapping[str, float | None]) -> dict[str, float]:
    """The finite, non-negative values (a failed or unsupported measurement has none)."""
    return {n: float(v) for n, v in values.items()
            if v is not None and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0}


def judge_group(group: str, metric: str, values: Mapping[str, float | None],
                p: StatParams, higher_is_better: bool = True
                ) -> tuple[GroupStats, list[Judgement]]:
    """Judge every node of one group on one metric. Pure and deterministic."""
    vals = usable(values)
    if len(vals) < max(1, p.min_group):
        stats = GroupStats(group, metric, len(vals), median(list(vals.values())) if vals else None,
                           mad(list(vals.values())) if vals else None, False,
                           f"{len(vals)} node(s) in group {group}, fewer than min_group "
                           f"{p.min_group}: no verdict")
        return stats, [Judgement(n, metric, v, None, None, False, "") for n, v in sorted(vals.items())]
    med = median(list(vals.values()))
    spread = mad(list(vals.values()), med)
    out = []
    # score() and robust_z() inlined with the group's constants hoisted (the same arithmetic,
    # so the same floats): 100,000 judgements a report (docs/burnin.md).
    comparable = med > 0 and math.isfinite(med)
    denom = max(spread, abs(med) * p.mad_floor)
    threshold, z_limit = p.threshold, p.z_limit
    inf = math.inf
    for node, v in sorted(vals.items()):
        if not comparable:
            sc = 1.0
        elif higher_is_better:
            sc = v / med
        else:
            sc = inf if v <= 0 else med / v
        if denom <= 0:
            z = 0.0
        else:
            z = Z_CONST * (v - med) / denom
            if not higher_is_better:
                z = -z
        if sc < threshold:
            why = f"score {sc:.2f} < {threshold:.2f}"
            out.append(Judgement(node, metric, v, sc, z, True, why))
        elif z_limit > 0 and z < -z_limit:
            why = f"robust z {z:.1f} < -{z_limit:g}"
            out.append(Judgement(node, metric, v, sc, z, True, why))
        else:
            out.append(Judgement(node, metric, v, sc, z, False, ""))
    return GroupStats(group, metric, len(vals), med, spread, True), out


def degrading(scores: Sequence[float], p: StatParams, noise: float = 0.0) -> bool:
    """True when the last ``trend_nights`` nightly changes were all drops, together at least
    ``trend_min_drop`` and at least ``trend_sigmas`` x ``noise`` (the group's spread of
    scores, 1.4826 MAD / median: a drop the size of the night-to-night noise is not a
    trend), and the latest score has not crossed the threshold yet (crossing it is a
    straggler verdict of its own). ``scores`` are oldest first."""
    k = max(1, p.trend_nights)
    finite = [s for s in scores if s is not None and math.isfinite(s)]
    if len(finite) < k + 1:
        return False
    tail = finite[-(k + 1):]
    falling = all(b < a for a, b in zip(tail, tail[1:], strict=False))
    need = max(p.trend_min_drop, p.trend_sigmas * noise)
    return falling and (tail[0] - tail[-1]) >= need and tail[-1] >= p.threshold


def noise_of(stats: GroupStats) -> float:
    """The group's spread as a fraction of its median (1.4826 MAD / median: sigma for
    normal data)."""
    if not stats.median or stats.mad is None or stats.median <= 0:
        return 0.0
    return 1.4826 * stats.mad / stats.median


def nightly_scores(series: Mapping[str, tuple[int, Sequence[float]]], higher_is_better: bool,
                   nights: int) -> dict[str, list[float]]:
    """Each node's scores over its last ``nights`` nights, against each night's median.

    ``series``: node -> (number of its last night, its values of consecutive nights up to
    it, oldest first; nan where it had no complete run). A night's median is over every
    value of that night in the group. Nodes with a gap (nan) or fewer nights get none.
    """
    by_night: dict[int, list[float]] = {}
    tails: dict[str, tuple[int, Sequence[float]]] = {}
    for node, (last, values) in series.items():
        tail = values[-nights:]
        first = last - len(tail) + 1
        for i, v in enumerate(tail):
            if v == v and v >= 0:  # not nan
                by_night.setdefault(first + i, []).append(v)
        if len(tail) == nights:
            tails[node] = (first, tail)
    med = {night: median(vs) for night, vs in by_night.items()}
    out: dict[str, list[float]] = {}
    for node, (first, tail) in tails.items():
        if all(v == v and v >= 0 for v in tail):
            out[node] = [score(v, med[first + i], higher_is_better) for i, v in enumerate(tail)]
    return out


def degrading_nodes(series: Mapping[str, tuple[int, Sequence[float]]], higher_is_better: bool,
                    p: StatParams, noise: float = 0.0) -> dict[str, list[float]]:
    """The nodes of one group whose nightly scores say :func:`degrading`, with those scores.

    Equal to ``{n: sc for n, sc in nightly_scores(series, higher, k + 1).items() if
    degrading(sc, p, noise)}`` (a property test holds it to that), but it scores only the
    first and last of a node's nights unless those already fall far enough: over 100,000
    series a night it is what keeps the report fast.
    """
    nights = max(1, p.trend_nights) + 1
    need = max(p.trend_min_drop, p.trend_sigmas * noise)
    by_night: dict[int, list[float]] = {}
    tails = []
    # Full tails ending the same night (the common case: one nightly campaign) are
    # transposed into one column per night with zip(), at C speed; the rest value by value.
    columns: dict[int, list[Sequence[float]]] = {}
    for node, (last, values) in series.items():
        tail = values[-nights:]
        first = last - len(tail) + 1
        if len(tail) == nights:
            tails.append((node, first, tail))
            columns.setdefault(last, []).append(tail)
        else:
            for i, v in enumerate(tail):
                if v == v and v >= 0:
                    by_night.setdefault(first + i, []).append(v)
    for last, rows in columns.items():
        for i, col in enumerate(zip(*rows, strict=True)):
            vals = [v for v in col if v == v and v >= 0]
            if vals:
                by_night.setdefault(last - nights + 1 + i, []).extend(vals)
    med = {night: median(vs) for night, vs in by_night.items()}
    out: dict[str, list[float]] = {}
    threshold = p.threshold
    ends: dict[int, tuple[float, float]] = {}  # first night -> (its median, the last's)
    for node, first, tail in tails:
        a, b = tail[0], tail[-1]
        if not (a == a and b == b and a >= 0 and b >= 0):
            continue
        me = ends.get(first)
        if me is None:
            me = ends[first] = (med[first], med[first + nights - 1])
        ma, mb = me
        if higher_is_better and ma > 0 and mb > 0 and ma != math.inf and mb != math.inf:
            sa, sb = a / ma, b / mb  # score(), inlined for the common case
        else:
            sa = score(a, ma, higher_is_better)
            sb = score(b, mb, higher_is_better)
        if sa - sb < need or sb < threshold:
            continue
        if not all(v == v and v >= 0 for v in tail):
            continue
        sc = [score(v, med[first + i], higher_is_better) for i, v in enumerate(tail)]
        if degrading(sc, p, noise):
            out[node] = sc
    return out


def worst(judgements: Iterable[Judgement]) -> Judgement | None:
    """The flagged judgement with the lowest score (the one a drain reason names)."""
    flagged = [j for j in judgements if j.flagged]
    if not flagged:
        return None
    return min(flagged, key=lambda j: (j.score if j.score is not None else math.inf, j.metric))
