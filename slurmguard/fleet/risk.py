"""The node risk score: how likely a node is to fail soon, from factors a person can check.
Pure; table-tested (tests/test_fleet_risk.py).

Each factor counts something in the node's recent history (:class:`RiskInputs`), multiplies it
by its weight (points per unit, ``[risk.weights]``) and is capped; the score is the sum,
capped at 100. Every factor that adds points is returned with its count, weight and points,
so ``nodes``, ``node show`` and triage print *why* a node is at risk, not just a number.
The factors follow what a large public study found to predict repeat failures (failures on
the node, Xid counts, failed jobs) plus the warnings slurmguard sees before a drain (ECC and
row remaps, link errors, throttling) and burn-in verdicts (docs/fleet.md, "Node risk").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmguard.fleet.history import History, Run
from slurmguard.fleet.params import FACTORS, RiskParams

DAY = 86400.0
# Which checks' warnings feed which factor.
AREAS: Mapping[str, tuple[str, ...]] = {
    "gpu_memory": ("gpu-ecc", "gpu-remap"),
    "links": ("ib-counters", "ib-link", "gpu-nvlink", "gpu-pcie"),
    "thermal": ("gpu-thermal",),
    "xid": ("gpu-xid",),
}
_AREA_OF = {check: area for area, checks in AREAS.items() for check in checks}
RISING_MIN_DAYS = 3


@dataclass(frozen=True)
class RiskInputs:
    """What the score reads about one node (counts over the lookback unless said)."""

    failures: int = 0
    warning_days: Mapping[str, int] = None  # type: ignore[assignment]  # area -> days
    recent_warning_days: int = 0  # distinct days with any warning in recent_days
    earlier_warning_days: int = 0  # ... in the rest of the lookback
    burnin_flagged: int = 0
    burnin_failed: int = 0
    failed_jobs: int = 0


@dataclass(frozen=True)
class Factor:
    name: str
    count: float
    weight: float
    points: float
    what: str

    def line(self) -> str:
        return f"{self.name} {self.count:g} x {self.weight:g} = +{self.points:g}"


@dataclass(frozen=True)
class Risk:
    score: float  # 0..100
    factors: tuple[Factor, ...]  # the ones that added points, largest first

    def why(self, limit: int = 3) -> str:
        return ", ".join(f"{f.name} +{f.points:g}" for f in self.factors[:limit]) or "-"


def rising(inp: RiskInputs, p: RiskParams) -> bool:
    """More warning days lately than before: >= 3 in recent_days and over twice the
    earlier daily rate (a node that always warns a little is not rising)."""
    earlier_days = max(1.0, p.lookback_days - p.recent_days)
    rate_before = inp.earlier_warning_days / earlier_days
    rate_now = inp.recent_warning_days / p.recent_days
    return inp.recent_warning_days >= RISING_MIN_DAYS and rate_now > 2.0 * rate_before


def score(inp: RiskInputs, p: RiskParams | None = None) -> Risk:
    """The node's risk and the factors behind it. Pure."""
    p = p or RiskParams()
    areas = dict(inp.warning_days or {})
    counts = {
        "failures": float(inp.failures),
        **{a: float(areas.get(a, 0)) for a in AREAS},
        "rising": 1.0 if rising(inp, p) else 0.0,
        "burnin": inp.burnin_flagged + 2.5 * inp.burnin_failed,
        "failed_jobs": float(inp.failed_jobs),
    }
    factors = []
    for name, count in counts.items():
        if count <= 0:
            continue
        w = p.weight(name)
        points = round(min(FACTORS[name][1], count * w), 1)
        if points > 0:
            factors.append(Factor(name, count, w, points, FACTORS[name][2]))
    factors.sort(key=lambda f: (-f.points, f.name))
    return Risk(min(100.0, round(sum(f.points for f in factors), 1)), tuple(factors))


def _days(times: Sequence[float], lo: float, hi: float) -> int:
    return len({int(t // DAY) for t in times[bisect_left(times, lo):bisect_right(times, hi)]})


@dataclass
class NodeSignals:
    """One node's history, indexed for fast windows: what risk inputs are computed from."""

    failures: list[float]  # episode starts (non-shared), sorted
    warnings: dict[str, list[float]]  # area -> times of warnings, sorted
    any_warning: list[float]  # times of any area's warning, sorted
    burnin: list[tuple[float, str]]  # (at, verdict), sorted
    failed_jobs: list[float]  # sorted

    @classmethod
    def build(cls, runs: Sequence[Run], failures: Sequence[float],
              burnin: Sequence[tuple[float, str]] = ()) -> NodeSignals:
        warnings: dict[str, list[float]] = {}
        anyw: list[float] = []
        jobs: list[float] = []
        for r in runs:
            areas = {_AREA_OF[c] for c in r.warnings if c in _AREA_OF}
            for a in areas:
                warnings.setdefault(a, []).append(r.at)
            if areas:
                anyw.append(r.at)
            if r.hook == "epilog" and r.job_id and (r.checks or r.warnings):
                jobs.append(r.at)
        return cls(sorted(failures), {a: sorted(v) for a, v in warnings.items()}, sorted(anyw),
                   sorted(burnin), sorted(jobs))

    def inputs(self, now: float, p: RiskParams) -> RiskInputs:
        lo, mid = now - p.lookback_days * DAY, now - p.recent_days * DAY
        f = self.failures
        b = self.burnin[bisect_left(self.burnin, (lo,)):bisect_right(self.burnin, (now, "~"))]
        return RiskInputs(
            failures=bisect_right(f, now) - bisect_left(f, lo),
            warning_days={a: _days(t, lo, now) for a, t in self.warnings.items()},
            recent_warning_days=_days(self.any_warning, mid, now),
            earlier_warning_days=_days(self.any_warning, lo, mid),
            burnin_flagged=sum(1 for _, v in b if v == "flagged"),
            burnin_failed=sum(1 for _, v in b if v == "failed"),
            failed_jobs=bisect_right(self.failed_jobs, now) - bisect_left(self.failed_jobs, lo))


def current(h: History, p: RiskParams, now: float) -> dict[str, Risk]:
    """Every known node's risk at ``now`` from a history covering the lookback."""
    from slurmguard.fleet import episodes

    starts: dict[str, list[float]] = {}
    for e in episodes.build(h):
        if e.shared is None and e.start <= now:
            starts.setdefault(e.node, []).append(e.start)
    out = {}
    for node in sorted(set(h.first_seen) | set(h.runs)):
        sig = NodeSignals.build(h.runs.get(node, ()), starts.get(node, ()), h.burnin.get(node, ()))
        out[node] = score(sig.inputs(now, p), p)
    return out
