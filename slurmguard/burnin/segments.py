"""The numpy judge's core (slurmguard/burnin/vector.py reads the columns, this judges them):
each (group, metric) segment of the summary rows as a few array operations, with the pure
judge's arithmetic operation for operation (docs/burnin.md, "Report at fleet scale").
numpy is passed in (``np``), never imported here: it is an optional extra.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

from slurmguard.burnin.stats import (
    FALL_Z,
    NOISE_MIN_GROUP,
    Z_CONST,
    GroupStats,
    Judgement,
    StatParams,
    hinge,
    mad,
    median,
    score,
    tail_factor,
)
from slurmguard.burnin.verdict import Report, assemble

_judgement = partial(tuple.__new__, Judgement)  # a Judgement from a plain tuple, in C


def median_sorted(s: Any) -> float:
    """:func:`~slurmguard.burnin.stats.median` of an already sorted non-empty array."""
    n = len(s)
    mid = n // 2
    return float(s[mid]) if n % 2 else (float(s[mid - 1]) + float(s[mid])) / 2.0


class Cols(NamedTuple):
    """The summary rows to judge, by column: only the values of each node's latest complete
    run. ``nc``/``mc`` index ``names`` (every node with a run, sorted) and ``metrics``
    (sorted); ``last`` is the ordinal of each row's last night; ``tails`` its last
    trend_nights + 1 nightly values, (rows, k), nan-padded on the left."""

    names: list[str]
    nc: Any
    metrics: list[str]
    mc: Any
    units: dict[str, str]
    higher: dict[str, bool]
    value: Any
    last: Any
    tails: Any


class _Acc:
    """Each row's score, z, flags and why, filled in (group, metric) segment by segment; the
    trends and previous-run confirmations (re-runs) per node; the group statistics."""

    def __init__(self, np: Any, n_rows: int) -> None:
        self.sc = np.ones(n_rows)
        self.z = np.zeros(n_rows)
        self.judged = np.zeros(n_rows, dtype=bool)  # a usable value: the row gets a Judgement
        self.verdict = np.zeros(n_rows, dtype=bool)  # and its group gave a verdict
        self.flag = np.zeros(n_rows, dtype=bool)
        self.why: dict[int, str] = {}
        self.stats: list[GroupStats] = []
        self.trends: dict[str, list[tuple[str, list[float], float, float]]] = {}
        self.previous: dict[str, set[str]] = {}


def judge_cols(np: Any, by_node: dict[str, Any], group: dict[str, str], c: Cols,
                p: StatParams, drain_degrading: bool) -> Report:
    if not len(c.nc):
        return assemble(by_node, group, {}, {}, [], c.units, p, drain_degrading)
    g_of = [group[n] for n in c.names]
    groups = sorted({g_of[i] for i in np.unique(c.nc).tolist()})
    g_rank = {g: i for i, g in enumerate(groups)}
    gc = np.array([g_rank.get(g, -1) for g in g_of], dtype=np.int64)[c.nc]
    order = np.lexsort((c.nc, c.mc, gc))  # sorted by (group, metric, node), as judge() walks
    key = gc[order] * len(c.metrics) + c.mc[order]
    cuts = np.flatnonzero(np.diff(key)) + 1
    acc = _Acc(np, len(c.nc))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for seg in np.split(order, cuts):
            _judge_segment(np, c, seg, groups[int(gc[seg[0]])], p, acc)
    judged, passing = _judgements(np, c, acc)
    return assemble(by_node, group, judged, acc.trends, acc.stats, c.units, p, drain_degrading,
                    acc.previous, passing=passing)


def _judge_segment(np: Any, c: Cols, seg: Any, g: str, p: StatParams, acc: _Acc) -> None:
    """Judge one (group, metric): :func:`~slurmguard.burnin.stats.judge_group`, its falling
    trends and previous-run confirmations (re-runs), written into ``acc``."""
    metric = c.metrics[int(c.mc[seg[0]])]
    hib = c.higher[metric]
    v_all = c.value[seg]
    ok = np.isfinite(v_all) & (v_all >= 0)
    sel = seg[ok]
    vals = v_all[ok]
    acc.judged[sel] = True
    if len(vals) < max(1, p.min_group):
        vl = vals.tolist()
        acc.stats.append(GroupStats(g, metric, len(vl), median(vl) if vl else None,
                                    mad(vl) if vl else None, False,
                                    f"{len(vl)} node(s) in group {g}, fewer than min_group "
                                    f"{p.min_group}: no verdict"))
        return
    srt = np.sort(vals)
    med = median_sorted(srt)
    spread = median_sorted(np.sort(np.abs(vals - med)))
    denom = max(spread, abs(med) * p.mad_floor)
    tail = tail_factor(srt, med, denom, hib, p.tail_quantile)
    denom *= tail
    acc.stats.append(GroupStats(g, metric, len(vals), med, spread, True, tail=tail))
    if not (med > 0 and math.isfinite(med)):
        sc = np.ones_like(vals)
    elif hib:
        sc = vals / med
    else:
        sc = np.where(vals <= 0, math.inf, med / vals)
    z = _z(np, vals, med, denom, hib)
    by_score = _below(np, sc, z, p, len(vals))
    by_z = ~by_score & (z < -p.z_limit) if p.z_limit > 0 else np.zeros_like(by_score)
    acc.sc[sel] = sc
    acc.z[sel] = z
    acc.verdict[sel] = True
    acc.flag[sel] = by_score | by_z
    for i in np.flatnonzero(by_score).tolist():
        acc.why[int(sel[i])] = f"score {float(sc[i]):.2f} < {p.threshold:.2f}"
    for i in np.flatnonzero(by_z).tolist():
        acc.why[int(sel[i])] = f"robust z {float(z[i]):.1f} < -{p.z_limit:g}"
    nights = _Nights.of(np, seg, c)
    if nights is None:
        return
    for node, z, scores, lz in _falls(np, nights, c, hib, p):
        acc.trends.setdefault(node, []).append((metric, scores, z, lz))
    for node in _previous_out(np, nights, c, hib, p, denom):
        acc.previous.setdefault(node, set()).add(metric)


def _judgements(np: Any, c: Cols, acc: _Acc) -> tuple[dict[str, Any], frozenset[str]]:
    """The Judgements per node in metric order, made once at the end (a node is in one group:
    its walk order), and the nodes that pass outright, counted from the columns: some metric
    judged by a group, none out of bounds (every row here is of a complete run)."""
    names, nc, mc = c.names, c.nc, c.mc
    rows = np.flatnonzero(acc.judged)
    fin = rows[np.lexsort((mc[rows], nc[rows]))]  # by node, then metric
    owner = nc[fin]
    node_l = list(map(names.__getitem__, owner.tolist()))
    scl, zl = acc.sc[fin].tolist(), acc.z[fin].tolist()
    verdict_l = acc.verdict[fin]
    for i in np.flatnonzero(~verdict_l).tolist():  # groups too small: no score, no z
        scl[i] = zl[i] = None
    whys = [""] * len(fin)
    if acc.why:
        at = np.empty(len(nc), dtype=np.int64)
        at[fin] = np.arange(len(fin))
        for r, why in acc.why.items():
            whys[int(at[r])] = why
    flag_l = acc.flag[fin]
    items = tuple(map(_judgement, zip(node_l, map(c.metrics.__getitem__, mc[fin].tolist()),
                                      c.value[fin].tolist(), scl, zl, flag_l.tolist(), whys,
                                      strict=True)))
    judged: dict[str, Any] = {}
    if items:
        starts = [0, *(np.flatnonzero(np.diff(owner)) + 1).tolist()]
        for a, b in zip(starts, [*starts[1:], len(items)], strict=True):
            judged[node_l[a]] = items[a:b]
    size = len(names)
    has_verdict = np.bincount(owner, weights=verdict_l, minlength=size) > 0
    has_flag = np.bincount(owner, weights=flag_l, minlength=size) > 0
    return judged, frozenset(names[i] for i in np.flatnonzero(has_verdict & ~has_flag).tolist())


class _Nights(NamedTuple):
    """One (group, metric) segment's last ``k`` nights: values ``t`` (rows x k), their night
    ordinals, which count (``good``: not nan, not negative), and each night's median over
    the counted values (``uniq`` nights, ``med``, ``count``)."""

    seg: Any
    t: Any
    night: Any
    good: Any
    uniq: Any
    med: Any
    count: Any

    @classmethod
    def of(cls, np: Any, seg: Any, c: Cols) -> _Nights | None:
        t = c.tails[seg]
        k = t.shape[1]
        lasts = c.last[seg]
        night = (lasts - (k - 1))[:, None] + np.arange(k)
        good = (t == t) & (t >= 0)
        if not good.any():
            return None
        if (lasts == lasts[0]).all():
            # Every node's last night is the same (a fleet's nightly run): each night is one
            # column, sorted on its own (the excluded values as +inf, after every counted
            # one). Equal values may come out in another order than the lexsort's below,
            # which only a 0.0 and a -0.0 tell apart: a median of either sign scores 1.0.
            srt = np.sort(np.where(good, t, math.inf).T, axis=1)  # night x node
            count = good.sum(axis=0)
            mid = count // 2
            col = np.arange(k)
            hi = srt[col, np.minimum(mid, len(t) - 1)]
            lo = srt[col, np.maximum(mid - 1, 0)]
            some = count > 0
            return cls(seg, t, night, good, night[0][some],
                       np.where(count % 2 == 1, hi, (lo + hi) / 2.0)[some], count[some])
        nv, vv = night[good], t[good]
        o = np.lexsort((vv, nv))
        nv, vv = nv[o], vv[o]
        uniq, start, count = np.unique(nv, return_index=True, return_counts=True)
        mid = start + count // 2
        med = np.where(count % 2 == 1, vv[mid], (vv[np.maximum(mid - 1, start)] + vv[mid]) / 2.0)
        return cls(seg, t, night, good, uniq, med, count)


def _falls(np: Any, ns: _Nights, c: Cols, hib: bool, p: StatParams
           ) -> list[tuple[str, float, list[float], float]]:
    """:func:`~slurmguard.burnin.stats.falls` of one (group, metric) segment: (node, z,
    scores, the line's z)."""
    full = ns.good.all(axis=1)
    if not full.any():
        return []
    tf, nf = ns.t[full], ns.night[full]
    m = ns.med[np.searchsorted(ns.uniq, nf)]
    comparable = (m > 0) & np.isfinite(m)
    if hib:
        s = np.where(comparable, tf / m, 1.0)
    else:
        s = np.where(comparable, np.where(tf <= 0, math.inf, m / tf), 1.0)
    fin = np.isfinite(s).all(axis=1)
    if int(fin.sum()) < max(1, p.min_group):
        return []
    s, rows = s[fin], ns.seg[full][fin]
    k = s.shape[1]
    if k < 2:
        return []
    w, shh, fell = hinge(k)
    if fell < 1 or shh <= 0:
        return []
    # hinge_drop's weighted sum, column by column in its order: the same floats per row.
    acc = np.zeros(len(s))
    for j in range(k):
        acc = acc + w[j] * s[:, j]
    drop = -acc / shh * fell
    z = _drop_z(np, drop, p)
    hit = (drop >= p.trend_min_drop) & (z >= FALL_Z) & (s[:, -1] >= p.threshold)
    if not hit.any():
        return []
    slopes = np.stack([(s[:, j] - s[:, i]) / (j - i) for i in range(k)
                       for j in range(i + 1, k)], axis=1)
    n = slopes.shape[1]
    # The middle order statistics only (28 slopes a row over 8 nights): the same values a
    # full sort puts there, so the same median, at a fraction of the sort.
    slopes = np.partition(slopes, [n // 2] if n % 2 else [n // 2 - 1, n // 2], axis=1)
    mid = (slopes[:, n // 2] if n % 2 else (slopes[:, n // 2 - 1] + slopes[:, n // 2]) / 2.0)
    line = _drop_z(np, -mid * (k - 1), p)
    out = []
    med_of = dict(zip(ns.uniq.tolist(), ns.med.tolist(), strict=True))
    for r, zr, vals, nights, lz in zip(rows[hit].tolist(), z[hit].tolist(),
                                       tf[fin][hit].tolist(), nf[fin][hit].tolist(),
                                       line[hit].tolist(), strict=True):
        # The few falling nodes are scored again with score() itself: the same floats as
        # the pure code, by construction.
        out.append((c.names[int(c.nc[r])], zr,
                    [score(v, med_of[n], hib) for v, n in zip(vals, nights, strict=True)], lz))
    return out


def _drop_z(np: Any, drop: Any, p: StatParams) -> Any:
    """:func:`~slurmguard.burnin.stats._drop_z` of one segment's drops (an array)."""
    srt = np.sort(drop)
    med = median_sorted(srt)
    denom = max(median_sorted(np.sort(np.abs(drop - med))), p.mad_floor)
    denom *= tail_factor(srt, med, denom, False, p.tail_quantile)
    return Z_CONST * (drop - med) / denom if denom > 0 else np.zeros_like(drop)


def _z(np: Any, x: Any, m: Any, denom: float, hib: bool) -> Any:
    """Robust z of ``x`` against ``m`` (negative: worse, whichever way the metric points)."""
    if denom <= 0:
        return np.zeros_like(x)
    z = Z_CONST * (x - m) / denom
    return z if hib else -z


def _below(np: Any, sc: Any, z: Any, p: StatParams, n: Any) -> Any:
    """Out of bounds by score: below ``threshold``, and (``score_z`` > 0, in a group of ``n``
    >= NOISE_MIN_GROUP nodes: :func:`~slurmguard.burnin.stats.score_z_of`) z below -score_z."""
    if p.score_z <= 0:
        return sc < p.threshold
    return (sc < p.threshold) & ((z < -p.score_z) | (n < NOISE_MIN_GROUP))


def _previous_out(np: Any, ns: _Nights, c: Cols, hib: bool, p: StatParams, denom: float
                  ) -> list[str]:
    """:func:`~slurmguard.burnin.stats.previous_out` of one (group, metric) segment."""
    before = ns.good[:, :-1]  # the nights before each row's last
    have = before.any(axis=1)
    if not have.any():
        return []
    col = (before.shape[1] - 1 - np.argmax(before[:, ::-1], axis=1))[have]  # the latest
    rows = np.flatnonzero(have)
    v, nights = ns.t[rows, col], ns.night[rows, col]
    at = np.searchsorted(ns.uniq, nights)
    m, n = ns.med[at], ns.count[at]
    comparable = (m > 0) & np.isfinite(m)
    if hib:
        s = np.where(comparable, v / m, 1.0)
    else:
        s = np.where(comparable, np.where(v <= 0, math.inf, m / v), 1.0)
    z = _z(np, v, m, denom, hib)
    out = _below(np, s, z, p, n) | ((z < -p.z_limit) if p.z_limit > 0 else False)
    out &= n >= max(1, p.min_group)
    return [c.names[int(c.nc[r])] for r in ns.seg[have][out].tolist()]
