"""From a night's burn-in runs and values to one verdict per node. Pure (docs/burnin.md).

    report = judge(runs, series, params, groups_of=...)
    report.nodes["n3"].verdict      # "flagged"
    report.nodes["n3"].reason       # "slurmguard: burnin: host_cpu_gflops 3.1 GFLOP/s = 0.12 of group median"

Verdicts: ``failed`` (a health check or a hard measurement failed), ``flagged`` (a straggler,
corroborated: :func:`~slurmguard.burnin.stats.confirmed`), ``suspect`` (out of bounds on
one metric, one run, not clearly: its re-run, the node's next burn-in run, confirms or
clears it; never drained on this run),
``degrading`` (scores falling night after night on ``confirm_metrics`` metrics of one
component, their falls adding up to ``trend_sigmas``, still above the threshold),
``pass``, ``no_verdict`` (the run was complete but no metric had a group big enough),
``partial`` (cancelled, preempted, killed: never a failure), ``pending`` (still queued or
running).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from slurmguard import contract
from slurmguard.burnin.stats import (
    LINE_Z,
    GroupStats,
    Judgement,
    StatParams,
    confirmed,
    falls,
    judge_group,
    previous_out,
    stouffer,
    worst,
)

REASON_PREFIX = f"{contract.REASON_PREFIX} burnin: "
_score = attrgetter("score")
_flagged = attrgetter("flagged")
REASON_MAX = 200
NO_SCORES: Mapping[str, tuple[float, ...]] = MappingProxyType({})


class NodeVerdict(NamedTuple):
    """One node's verdict (a NamedTuple: 10,000 a fleet report, built positionally)."""

    node: str
    group: str
    run_id: int | None
    status: str  # the run's status
    verdict: str  # failed, flagged, suspect, degrading, pass, no_verdict, partial, pending
    reason: str = ""  # the Slurm drain reason for failed/flagged ("" otherwise)
    why: str = ""  # the plain explanation (also for pass / partial / no_verdict)
    metric: str = ""  # the metric named in the reason (flagged/degrading)
    judgements: tuple[Judgement, ...] = ()
    degrading: tuple[str, ...] = ()  # metrics whose score fell night after night
    scores: Mapping[str, tuple[float, ...]] = NO_SCORES  # metric -> nightly scores

    @property
    def bad(self) -> bool:
        return self.verdict in ("failed", "flagged")


@dataclass(frozen=True)
class Report:
    nodes: dict[str, NodeVerdict]
    groups: tuple[GroupStats, ...]
    units: dict[str, str]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.nodes.values():
            out[v.verdict] = out.get(v.verdict, 0) + 1
        return out


def fmt_value(value: float) -> str:
    """Three significant digits, no exponent for ordinary magnitudes: 3.14, 912, 12800."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.3g}"


def straggler_reason(j: Judgement, unit: str) -> str:
    """``slurmguard: burnin: <metric> <value> <unit> = <score> of group median``."""
    text = f"{REASON_PREFIX}{j.metric} {fmt_value(j.value)} {unit} = {j.score:.2f} of group median"
    return _cut(" ".join(text.split()))


def failure_reason(run_reason: str) -> str:
    return _cut(REASON_PREFIX + " ".join((run_reason or "failed").split()))


def degrading_reason(metric: str, scores: Iterable[float]) -> str:
    tail = " ".join(f"{s:.2f}" for s in scores)
    return _cut(f"{REASON_PREFIX}{metric} degrading: scores {tail} of group median")


def _night_number(night: str) -> int:
    from datetime import date

    try:
        return date.fromisoformat(night).toordinal()
    except (TypeError, ValueError):
        return 0


def _cut(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def judge(runs: Iterable[Any], series: Iterable[Any], p: StatParams, *,
          groups_of: Mapping[str, str] | None = None, drain_degrading: bool = False) -> Report:
    """One verdict per node with a run.

    ``runs``: each node's latest run (objects with node, id, status, reason, group_key).
    ``series``: summary rows (node, metric, unit, higher_is_better, group_key, last_run_id,
    last_value, last_night, recent: the values of the nights up to last_night). ``groups_of`` overrides a node's group (config-named groups).
    Only values of the node's latest run, and only complete runs, are compared.
    """
    runs, group = node_groups(runs, groups_of)
    # (group, metric) -> {node: value} over the latest complete runs; and per-node series.
    values: dict[tuple[str, str], dict[str, float]] = {}
    higher: dict[str, bool] = {}
    units: dict[str, str] = {}
    points: dict[tuple[str, str], dict[str, tuple[int, tuple[float, ...]]]] = {}
    night_no: dict[str, int] = {}
    # 100,000 summary rows a night at fleet scale: one dict lookup per row where possible.
    complete = {n: (r.id, group[n]) for n, r in runs.items() if r.status == "complete"}
    buckets: dict[tuple[str, str], tuple[dict[str, float], dict[str, Any]]] = {}
    for s in series:
        node = s.node
        c = complete.get(node)
        if c is None or s.last_run_id != c[0]:
            continue
        metric = s.metric
        key = (c[1], metric)
        b = buckets.get(key)
        if b is None:
            b = buckets[key] = (values.setdefault(key, {}), points.setdefault(key, {}))
        b[0][node] = s.last_value
        night = s.last_night
        n = night_no.get(night)
        if n is None:
            n = night_no[night] = _night_number(night)
        b[1][node] = (n, s.recent)
        if metric not in higher:
            higher[metric] = s.higher_is_better
            units[metric] = s.unit
    stats: list[GroupStats] = []
    judged: dict[str, list[Judgement]] = {}
    trends: dict[str, list[Fall]] = {}
    previous: dict[str, set[str]] = {}
    for (g, metric), vals in sorted(values.items()):
        gs, js = judge_group(g, metric, vals, p, higher[metric])
        stats.append(gs)
        for j in js:
            judged.setdefault(j.node, []).append(j)
        if gs.verdict:
            pts = points[(g, metric)]
            for node, (z, sc, lz) in falls(pts, higher[metric], p).items():
                trends.setdefault(node, []).append((metric, sc, z, lz))
            denom = max(gs.mad or 0.0, abs(gs.median or 0.0) * p.mad_floor) * gs.tail
            for node in previous_out(pts, higher[metric], denom, p):
                previous.setdefault(node, set()).add(metric)
    return assemble(runs, group, judged, trends, stats, units, p, drain_degrading, previous)


def node_groups(runs: Iterable[Any], groups_of: Mapping[str, str] | None
                ) -> tuple[dict[str, Any], dict[str, str]]:
    """Each node's latest run, and its comparison group (config-named groups win)."""
    groups_of = dict(groups_of or {})
    by_node = {r.node: r for r in runs}
    return by_node, {n: groups_of.get(n) or r.group_key or "all" for n, r in by_node.items()}


def component(metric: str) -> str:
    """The component a metric measures: its name's first word (gpu_membw_gbs -> gpu)."""
    return metric.split("_", 1)[0]


# (metric, its last scores, its fall's robust z, its Theil-Sen line's robust z)
Fall = tuple[str, Sequence[float], float, float]


def one_component(falling: Sequence[Fall], p: StatParams) -> list[Fall]:
    """A node's falls (:func:`~slurmguard.burnin.stats.falls`) that make a trend: those of a
    component (:func:`component`) on which at least ``confirm_metrics`` metrics fell and
    whose robust z add up (:func:`~slurmguard.burnin.stats.stouffer`) to ``trend_sigmas``,
    their lines' to :data:`~slurmguard.burnin.stats.LINE_Z`.
    A worn component is seen by every metric that exercises it, each a little; noise makes
    some single metric "fall" among 100,000 series a night, and pairs of metrics of
    different components (39 of the 45 pairs of 10 metrics) fall together by chance as
    often as pairs within one (docs/burnin.md, "Degrading")."""
    need = max(1, p.confirm_metrics)
    by: dict[str, list[Fall]] = {}
    for f in falling:
        by.setdefault(component(f[0]), []).append(f)
    ok = {c for c, fs in by.items()
          if len(fs) >= need and stouffer([f[2] for f in fs]) >= p.trend_sigmas
          and stouffer([f[3] for f in fs]) >= LINE_Z}
    return [f for f in falling if component(f[0]) in ok]  # in metric order, as they came


def assemble(runs: Mapping[str, Any], group: Mapping[str, str],
             judged: Mapping[str, Sequence[Judgement]],
             trends: Mapping[str, Sequence[Fall]],
             stats: Iterable[GroupStats], units: dict[str, str], p: StatParams,
             drain_degrading: bool, previous: Mapping[str, Iterable[str]] | None = None,
             passing: frozenset[str] | None = None) -> Report:
    """One verdict per node from its judgements and falling trends (shared by :func:`judge`
    and the numpy path, :mod:`slurmguard.burnin.vector`). ``previous``: node -> the metrics
    it was out of bounds on its run before too (tonight is a suspect's re-run). ``passing``:
    the nodes known to pass (a complete run, no falling trend, some metric judged and none
    out of bounds), as the numpy path counts them from its columns; else each node's
    judgements are looked at.
    A fall on fewer than ``confirm_metrics`` metrics of one component is no trend
    (:func:`one_component`)."""
    previous = previous or {}
    trends = {n: t for n, t in ((n, one_component(t, p)) for n, t in trends.items()) if t}
    if passing is not None:
        passing = passing - trends.keys()
    stats = tuple(stats)
    tail_of = {(g.group, g.metric): g.tail for g in stats}
    out: dict[str, NodeVerdict] = {}
    for node, r in sorted(runs.items()):
        js = tuple(judged.get(node, ()))
        if passing is not None:
            passes = node in passing
        else:
            passes = bool(r.status == "complete" and node not in trends and js
                          and not any(map(_flagged, js))
                          and list(map(_score, js)).count(None) < len(js))
        if passes:
            # Most of a fleet: the "pass" below, built positionally (10,000 nodes a report).
            out[node] = NodeVerdict(node, group[node], r.id, r.status, "pass", "",
                                    "every metric within bounds", "", js, (), NO_SCORES)
            continue
        falling = tuple(f[0] for f in trends.get(node, ()))
        common = {"node": node, "group": group[node], "run_id": r.id, "status": r.status,
                  "judgements": js, "degrading": falling,
                  "scores": {m: tuple(sc[-(p.trend_nights + 1):])
                             for m, sc, *_ in trends.get(node, ())}}
        if r.status == "failed":
            out[node] = NodeVerdict(**common, verdict="failed", reason=failure_reason(r.reason),
                                    why=r.reason or "failed")
        elif r.status in ("submitted", "running"):
            out[node] = NodeVerdict(**common, verdict="pending", why=f"burn-in {r.status}")
        elif r.status == "partial":
            out[node] = NodeVerdict(**common, verdict="partial",
                                    why=r.reason or "partial run: not judged")
        else:
            out[node] = _judged(common, trends.get(node, ()), previous.get(node, ()), units, p,
                                drain_degrading, tail_of)
    return Report(out, stats, units)


def _judged(common: dict[str, Any], trends: Sequence[Fall],
            previous: Iterable[str], units: Mapping[str, str], p: StatParams,
            drain_degrading: bool, tail_of: Mapping[tuple[str, str], float]) -> NodeVerdict:
    """The verdict of a complete run that does not pass outright: a corroborated straggler
    (flagged), an uncorroborated one (suspect), a falling trend, a pass or no verdict."""
    js: tuple[Judgement, ...] = common["judgements"]
    w = worst(js)
    out = [j for j in js if j.flagged]
    tails = {j.metric: tail_of.get((common["group"], j.metric), 1.0) for j in out}
    if w is not None and confirmed(out, previous, p, tails):
        return NodeVerdict(**common, verdict="flagged",
                           reason=straggler_reason(w, units.get(w.metric, "")), why=w.why,
                           metric=w.metric)
    if w is not None:
        return NodeVerdict(**common, verdict="suspect", why=f"{w.metric} {w.why}: one metric, "
                           "one run; its re-run confirms or clears it", metric=w.metric)
    if trends:
        m, sc = trends[0][:2]
        tail = sc[-(p.trend_nights + 1):]
        return NodeVerdict(
            **common, verdict="flagged" if drain_degrading else "degrading",
            reason=degrading_reason(m, tail) if drain_degrading else "",
            why=f"{m} score fell over {p.trend_nights + 1} nights: "
                + " ".join(f"{s:.2f}" for s in tail), metric=m)
    if js and list(map(_score, js)).count(None) < len(js):  # some group judged it
        return NodeVerdict(**common, verdict="pass", why="every metric within bounds")
    return NodeVerdict(**common, verdict="no_verdict",
                       why="health checks passed; no metric had a group of "
                           f"min_group {p.min_group} nodes to compare with")
