"""Straggler statistics: pure functions, no I/O (docs/burnin.md, "How a node is judged").

Per comparison group (same GPU model and count, or a configured Slurm feature / NodeSet) and
per metric, over each node's latest complete burn-in:

* ``median`` and ``MAD`` (median absolute deviation) of the group's values;
* a node's **score** = value / median, inverted (median / value) for metrics where lower is
  better (latency, time), so that 1.0 is "as good as the median node" and 0.8 is "20 % worse";
* its **robust z** = 0.6745 * (value - median) / MAD (Iglewicz and Hoaglin's modified z),
  signed so that a negative z is *worse* than the median, with MAD floored at
  ``mad_floor`` x median: a group of identical values (MAD 0) must not make a 0.1 % wobble
  infinitely significant; and divided by the group's **tail factor** (:func:`tail_factor`:
  its better side's z at ``tail_quantile`` over a Gaussian's, at least 1), so that
  heavy-tailed noise is read with its own yardstick;
* **out of bounds** on a metric when score < ``threshold`` (default 0.90) with z <
  -``score_z`` (4), or z < -``z_limit`` (default 5; 0 turns the z rule off). A node better
  than the median never is. A node is
  *flagged* (drained) only when that is corroborated (:func:`confirmed`, docs/burnin.md
  "False flags across the fleet"): on ``confirm_metrics`` (2) metrics the same night, or on
  the same metric on its run before too (the re-run of a suspect), or clearly (score <
  threshold and z < -``clear_z`` (11) x the group's tail factor); else it is a *suspect*,
  drained only if its re-run (its next burn-in run) confirms it;
* groups smaller than ``min_group`` (default 4) give **no verdict**, said so: three nodes
  cannot tell a slow node from a slow group;
* **degrading**: over its last ``trend_nights`` + 1 (8) nights the node's scores fell, its
  last half of them against its own level over the first half (:func:`hinge_drop`: a wear
  that began inside the window), by at least ``trend_min_drop`` (0.03) and at least
  :data:`FALL_Z` (1) robust z (divided by the falls' tail factor) above the group's falls, on at least
  ``confirm_metrics`` (2) metrics of one component whose falls add up (:func:`stouffer`) to
  ``trend_sigmas`` (4.5) robust z, their Theil-Sen lines through every night to
  :data:`LINE_Z` (3), while still above the threshold: it is reported (and may be drained,
  ``drain_degrading``) before it crosses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

# Modified z-score constant: 0.6745 = the 0.75 quantile of the standard normal, so that
# z ~ N(0, 1) for normal data (Iglewicz & Hoaglin 1993).
Z_CONST = 0.6745
# The tail factor (:func:`tail_factor`) is taken only when the better side holds at least
# this many nodes beyond its ``tail_quantile``: fewer say little about a tail.
TAIL_MIN = 5
# ``score_z`` asks a low score to stand out of the group's own noise too; only a group this
# large measures its noise well enough to be trusted with that (the tail factor's scale,
# TAIL_MIN / tail_quantile). In a smaller group a score below threshold counts by itself:
# a node at a tenth of its peers' speed is drained the same night whatever their spread.
NOISE_MIN_GROUP = 1000
# A metric's fall counts toward its component's trend only from this robust z up: the trend
# (``trend_sigmas``) is the Stouffer sum of the component's falls (:func:`stouffer`), and a
# metric that barely moved would only dilute it, or let chance wobbles add up.
FALL_Z = 1.0
# A component's trend must show as a line through every night too: the Stouffer sum of its
# falling metrics' Theil-Sen drops (each a robust z against the group's, as the hinge's) at
# least this. The hinge (:func:`hinge_drop`) is least squares, so one or two odd nights of
# heavy-tailed noise read as a fall; a median of slopes moves little for them. Chosen with
# the rest on seeds 1 and 2 of the wearing fleets (docs/burnin.md, "Degrading").
LINE_Z = 3.0


@dataclass(frozen=True)
class StatParams:
    threshold: float = 0.90
    z_limit: float = 5.0
    clear_z: float = 11.0
    confirm_metrics: int = 2
    mad_floor: float = 0.01
    min_group: int = 4
    trend_nights: int = 7
    trend_min_drop: float = 0.03
    trend_sigmas: float = 4.5
    score_z: float = 4.0
    tail_quantile: float = 0.005

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
    tail: float = 1.0  # the tail factor the robust z was divided by (:func:`tail_factor`)


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


def score_z_of(n: int, p: StatParams) -> float:
    """``p.score_z`` in a group of ``n`` nodes: 0 (off) below :data:`NOISE_MIN_GROUP`."""
    return p.score_z if n >= NOISE_MIN_GROUP else 0.0


def tail_factor(s: Any, med: float, denom: float, higher_is_better: bool, q: float) -> float:
    """How much heavier than Gaussian the group's noise is, from its better side (where no
    fault lands): the robust z of the better side's ``q`` quantile (an order statistic of
    ``s``, the group's values sorted) over a Gaussian's (2.58 at q = 0.005), at least 1.
    1.0 when ``q`` is 0 or fewer than :data:`TAIL_MIN` nodes lie beyond it. The robust z
    of the group is divided by it (docs/burnin.md, "False flags across the fleet")."""
    n = len(s)
    k = int(q * n) if 0 < q < 0.5 else 0
    if k < TAIL_MIN or denom <= 0:
        return 1.0
    from statistics import NormalDist  # here: only groups of 1,000+ nodes need it (~3 ms)

    x = float(s[n - 1 - k]) if higher_is_better else float(s[k])
    z = Z_CONST * (x - med) / denom
    return max(1.0, (z if higher_is_better else -z) / NormalDist().inv_cdf(1.0 - q))


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
    srt = sorted(vals.values())
    med = median(srt)
    spread = mad(srt, med)
    out = []
    # score() and robust_z() inlined with the group's constants hoisted (the same arithmetic,
    # so the same floats): 100,000 judgements a report (docs/burnin.md).
    comparable = med > 0 and math.isfinite(med)
    denom = max(spread, abs(med) * p.mad_floor)
    tail = tail_factor(srt, med, denom, higher_is_better, p.tail_quantile)
    denom *= tail
    threshold, z_limit, score_z = p.threshold, p.z_limit, score_z_of(len(vals), p)
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
        if sc < threshold and (score_z <= 0 or z < -score_z):
            why = f"score {sc:.2f} < {threshold:.2f}"
            out.append(Judgement(node, metric, v, sc, z, True, why))
        elif z_limit > 0 and z < -z_limit:
            why = f"robust z {z:.1f} < -{z_limit:g}"
            out.append(Judgement(node, metric, v, sc, z, True, why))
        else:
            out.append(Judgement(node, metric, v, sc, z, False, ""))
    return GroupStats(group, metric, len(vals), med, spread, True, tail=tail), out


def theil_sen_drop(scores: Sequence[float]) -> float:
    """What a straight line through ``scores`` (one a night, oldest first) loses from the
    first night to the last: minus the median of the pairwise slopes (Theil-Sen) times the
    nights between. One odd night moves a median of slopes little, where it moves a
    least-squares line (and a first-to-last difference) by all of its size."""
    n = len(scores)
    slopes = sorted((scores[j] - scores[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    return -median(slopes) * (n - 1) if slopes else 0.0


def hinge(n: int) -> tuple[tuple[float, ...], float, int]:
    """The hinge a fall is fitted to over ``n`` nights: the node's own level over the first
    ``n - n // 2`` nights, falling by the same step a night over the last ``n // 2`` (a wear
    that began inside the window). Returns (each night's weight: the regressor 0, ..., 0, 1,
    ..., n // 2 less its mean; their sum of squares; n // 2)."""
    m = n // 2
    h = [0.0] * (n - m) + [float(i) for i in range(1, m + 1)]
    mean = sum(h) / n if n else 0.0
    w = tuple(x - mean for x in h)
    return w, sum(x * x for x in w), m


def hinge_drop(scores: Sequence[float]) -> float:
    """What ``scores`` (one a night, oldest first) lost by the last night against their own
    level before: the least-squares fit of :func:`hinge` (flat over the first half of the
    nights, a straight fall over the last half), its fall a night times the nights fallen.
    A fall that began inside the window reads at its size, where one line through every
    night reads it as a shallow slope; a node's own level is its own, so a node steadily a
    little below the median has no fall. 0.0 for fewer than 2 nights.

    The weighted sum runs night by night from the first, as the columnar twin
    (slurmguard/burnin/segments.py ``_falls``) adds its columns: the same floats."""
    w, shh, m = hinge(len(scores))
    if m < 1 or shh <= 0:
        return 0.0
    acc = 0.0
    for wi, s in zip(w, scores, strict=True):
        acc = acc + wi * s
    return -acc / shh * m


def _add_nights(by_night: dict[int, list[float]], last: int, tail: Sequence[float]) -> int:
    """Add a node's values of consecutive nights ending at night ``last`` (nan: no run) to
    ``by_night``; return the number of the first of them."""
    first = last - len(tail) + 1
    for i, v in enumerate(tail):
        if v == v and v >= 0:  # not nan
            by_night.setdefault(first + i, []).append(v)
    return first


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
        first = _add_nights(by_night, last, tail)
        if len(tail) == nights:
            tails[node] = (first, tail)
    med = {night: median(vs) for night, vs in by_night.items()}
    out: dict[str, list[float]] = {}
    for node, (first, tail) in tails.items():
        if all(v == v and v >= 0 for v in tail):
            out[node] = [score(v, med[first + i], higher_is_better) for i, v in enumerate(tail)]
    return out


def _drop_z(drops: Mapping[str, float], p: StatParams) -> dict[str, float]:
    """Each node's drop as a robust z above the group's drops: their median and MAD, the MAD
    floored at ``mad_floor`` then multiplied by the drops' :func:`tail_factor` measured on
    the rises (a rise is no fault: a heavy-tailed night-to-night noise makes heavy-tailed
    falls too, whatever its tails)."""
    srt = sorted(drops.values())
    med = median(srt)
    denom = max(mad(srt, med), p.mad_floor)
    denom *= tail_factor(srt, med, denom, False, p.tail_quantile)
    return {n: Z_CONST * (d - med) / denom if denom > 0 else 0.0 for n, d in drops.items()}


def falls(series: Mapping[str, tuple[int, Sequence[float]]], higher_is_better: bool,
          p: StatParams) -> dict[str, tuple[float, list[float], float]]:
    """The nodes of one group whose scores fall on this metric: node -> (the fall's robust z,
    its last ``trend_nights`` + 1 scores, the robust z of its Theil-Sen line). A node's
    trend (:func:`degrading_nodes`, and the verdict's
    :func:`~slurmguard.burnin.verdict.one_component`) adds up these z over the metrics of
    one component.

    Each node with a complete, finite tail is scored night by night (:func:`nightly_scores`)
    and its :func:`hinge_drop` taken; a node falls when its drop is at least
    ``trend_min_drop``, at least :data:`FALL_Z` robust z above the group's drops
    (:func:`_drop_z`), and its latest score is still >= ``threshold``. Its
    :func:`theil_sen_drop` is read against the group's the same way (:data:`LINE_Z`).
    Groups with fewer than ``min_group`` such nodes have no trends.
    """
    nights = max(1, p.trend_nights) + 1
    scored = {n: sc for n, sc in nightly_scores(series, higher_is_better, nights).items()
              if all(map(math.isfinite, sc))}
    if len(scored) < max(1, p.min_group):
        return {}
    drops = {n: hinge_drop(sc) for n, sc in scored.items()}
    zs = _drop_z(drops, p)
    fell = [n for n, d in drops.items()
            if d >= p.trend_min_drop and zs[n] >= FALL_Z and scored[n][-1] >= p.threshold]
    if not fell:
        return {}
    line = _drop_z({n: theil_sen_drop(sc) for n, sc in scored.items()}, p)
    return {n: (zs[n], scored[n], line[n]) for n in fell}


def degrading_nodes(series: Mapping[str, tuple[int, Sequence[float]]], higher_is_better: bool,
                    p: StatParams) -> dict[str, list[float]]:
    """The nodes whose fall on this one metric (:func:`falls`) is a trend by itself: at least
    ``trend_sigmas`` robust z, its line at least :data:`LINE_Z`, with their last
    ``trend_nights`` + 1 scores."""
    return {n: sc for n, (z, sc, lz) in falls(series, higher_is_better, p).items()
            if z >= p.trend_sigmas and lz >= LINE_Z}


def stouffer(zs: Sequence[float]) -> float:
    """The robust z of falls on several metrics read as one: their sum over the square root of
    their number (Stouffer's method: independent N(0, 1) z add up to N(0, k))."""
    return sum(zs) / math.sqrt(len(zs)) if zs else 0.0


def previous_out(series: Mapping[str, tuple[int, Sequence[float]]], higher_is_better: bool,
                 denom: float, p: StatParams) -> frozenset[str]:
    """The nodes of one group that were out of bounds on their run before the last one too.

    ``series`` as for :func:`degrading_nodes` (each node's last ``trend_nights`` + 1 values
    count in their night's median). The run before is the latest earlier night with a value
    among those (a suspect's re-run may come a few nights later, when the node is idle);
    its score is against that night's median, its z against the group's spread of tonight
    (``denom``, the floored MAD the judgement used): the next run is the re-run that
    confirms a suspect (docs/burnin.md, "False flags across the fleet").
    """
    by_night: dict[int, list[float]] = {}
    prev: dict[str, tuple[int, float]] = {}
    nights = max(1, p.trend_nights) + 1
    for node, (last, values) in series.items():
        tail = values[-nights:]
        _add_nights(by_night, last, tail)
        for back in range(2, len(tail) + 1):
            v = tail[-back]
            if v == v and v >= 0:  # not nan
                prev[node] = (last - back + 1, v)
                break
    out = []
    for node, (night, v) in prev.items():
        vals = by_night[night]
        if len(vals) < max(1, p.min_group):
            continue
        med = median(vals)
        z = 0.0 if denom <= 0 else Z_CONST * (v - med) / denom
        if not higher_is_better:
            z = -z
        sz = score_z_of(len(vals), p)
        below = score(v, med, higher_is_better) < p.threshold and (sz <= 0 or z < -sz)
        if below or (p.z_limit > 0 and z < -p.z_limit):
            out.append(node)
    return frozenset(out)


def confirmed(out: Sequence[Judgement], previous: Iterable[str], p: StatParams,
              tails: Mapping[str, float] | None = None) -> bool:
    """Whether a node's out-of-bounds judgements (``out``, one run) are corroborated enough
    to drain it: on ``confirm_metrics`` metrics at once, on a metric that was out on the run
    before too (``previous``: those metrics; the re-run of a suspect), or clearly below the
    threshold on one: z < -``clear_z`` x the metric's tail factor (``tails``: metric -> the
    factor its z was divided by; 1 when absent). The further out, the more a heavy tail
    outweighs its 0.5 % quantile: a Student-t 4 group (factor 1.63) needs z < -18 (docs/burnin.md)."""
    if not out:
        return False
    if len(out) >= max(1, p.confirm_metrics) or not set(previous).isdisjoint(j.metric for j in out):
        return True
    tails = tails or {}
    return any(j.score is not None and j.z is not None and j.score < p.threshold
               and j.z < -p.clear_z * tails.get(j.metric, 1.0) for j in out)


def worst(judgements: Iterable[Judgement]) -> Judgement | None:
    """The flagged judgement with the lowest score (the one a drain reason names)."""
    flagged = [j for j in judgements if j.flagged]
    if not flagged:
        return None
    return min(flagged, key=lambda j: (j.score if j.score is not None else math.inf, j.metric))
