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

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmguard.fleet.history import History, Run
from slurmguard.fleet.params import FACTORS, RiskParams

DAY = 86400.0
# Which checks' degraded results feed which factor. Only checks that can warn (report
# degraded) are listed: ib-link only ever reports unhealthy (a drain, then a failure
# episode), and host-edac's corrected-error warning is the host's memory, not a GPU's; they
# feed the score through ``failures`` alone. gpu-remap warns when rows were newly remapped.
AREAS: Mapping[str, tuple[str, ...]] = {
    "gpu_memory": ("gpu-ecc", "gpu-remap"),
    "links": ("ib-counters", "gpu-nvlink", "gpu-pcie"),
    "thermal": ("gpu-thermal",),
    "xid": ("gpu-xid",),
}
_AREA_OF = {check: area for area, checks in AREAS.items() for check in checks}
# The area a failure of a check belongs to: its return resets that area's warnings.
CAUSE_AREA: Mapping[str, str] = {**_AREA_OF, "gpu-remap": "gpu_memory", "ib-link": "links",
                                 "gpu-lost": "xid"}
RISING_MIN = 2  # units in recent_days, at the least, for "rising"
RISING_ALPHA = 0.01  # chance of so many recent units at the node's own earlier rate
LIFETIME = ("gpu-ecc",)  # checks whose count is a lifetime counter: judged by its growth
GROWTH = ("gpu-remap",)  # checks whose count is already a growth (since the check's last run)


@dataclass(frozen=True)
class RiskInputs:
    """What the score reads about one node (counts over the lookback unless said).

    ``warning_days``: per area, the units of recent_days beyond the node's own earlier rate
    (a day with a warning; for gpu_memory a new lifetime uncorrectable ECC error);
    ``rising``: the areas whose recent units are beyond chance at that rate."""

    failures: int = 0
    warning_days: Mapping[str, float] = None  # type: ignore[assignment]  # area -> excess units
    rising: tuple[str, ...] = ()
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


def tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the chance of k or more units by chance."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def beyond_chance(recent: int, recent_days: int, earlier: int, earlier_days: int,
                  alpha: float = RISING_ALPHA) -> bool:
    """Rising: at least RISING_MIN units in the recent days, and so many that the node's own
    earlier daily rate (Laplace's estimate, (earlier + 1) / (earlier_days + 2): a node with
    no history is not presumed silent) makes them a chance below ``alpha`` (one-sided
    binomial test). A steady warner, however loud, is not rising."""
    p0 = (earlier + 1.0) / (earlier_days + 2.0)
    return recent >= RISING_MIN and tail(recent, max(recent, recent_days), min(p0, 1.0)) < alpha


def score(inp: RiskInputs, p: RiskParams | None = None) -> Risk:
    """The node's risk and the factors behind it. Pure."""
    p = p or RiskParams()
    areas = dict(inp.warning_days or {})
    counts = {
        "failures": float(inp.failures),
        **{a: round(float(areas.get(a, 0)), 1) for a in AREAS},
        "rising": 1.0 if inp.rising else 0.0,
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


def _units(ev: Sequence[tuple[float, float]], times: Sequence[float], lo: float, hi: float,
           by_day: bool) -> float:
    """Units of evidence in (lo, hi]: distinct days, or the amounts summed."""
    sl = ev[bisect_right(times, lo):bisect_right(times, hi)]
    if by_day:
        return float(len({int(t // DAY) for t, _ in sl}))
    return float(sum(a for _, a in sl))


@dataclass
class NodeSignals:
    """One node's history, indexed for fast windows: what risk inputs are computed from."""

    failures: list[float]  # episode starts (non-shared), sorted
    evidence: dict[str, list[tuple[float, float]]]  # area -> (time, amount), sorted
    resets: dict[str, list[float]]  # area -> times its warnings were reset, sorted
    burnin: list[tuple[float, str]]  # (at, verdict), sorted
    failed_jobs: list[float]  # sorted

    @property
    def any_warning(self) -> bool:
        return any(self.evidence.values())

    @classmethod
    def build(cls, runs: Sequence[Run], failures: Sequence[float],
              burnin: Sequence[tuple[float, str]] = (),
              returns: Sequence[tuple[float, str]] = ()) -> NodeSignals:
        """``returns``: (when, cause) of each return from a failure: it resets the cause's
        area (a burn-in ``pass`` resets every area). A lifetime counter's warning is evidence
        only when the count grew since the node's previous reading (the first reading is the
        baseline): an old count that has not grown is history. gpu-remap's count is its rows
        remapped since its own last reading. One run's units in an area are the largest of
        its checks' (one memory error grows both the ECC and the remapped-row counts)."""
        evidence: dict[str, list[tuple[float, float]]] = {}
        last: dict[str, int] = {}
        jobs: list[float] = []
        for r in runs:
            units: dict[str, float] = {}  # area -> this run's units: the largest of its checks'
            for c in r.warnings:
                area = _AREA_OF.get(c)
                if area is None:
                    continue
                n = dict(r.counts).get(c)
                if c in LIFETIME and n is not None:
                    before = last.get(c)
                    last[c] = max(n, before or 0)
                    if before is None or n <= before:
                        continue
                    amount = float(n - before)
                elif c in GROWTH and n is not None:
                    if n <= 0:
                        continue
                    amount = float(n)
                else:
                    amount = 1.0
                units[area] = max(units.get(area, 0.0), amount)
            for area, amount in units.items():
                evidence.setdefault(area, []).append((r.at, amount))
            for c in LIFETIME:  # a reading without a warning (count 0, or a passing run)
                if c not in r.warnings and c in dict(r.counts):
                    last[c] = max(dict(r.counts)[c], last.get(c, 0))
            if r.hook == "epilog" and r.job_id and r.checks:
                jobs.append(r.at)
        resets: dict[str, list[float]] = {a: [] for a in AREAS}
        for at, cause in returns:
            if cause in CAUSE_AREA:
                resets[CAUSE_AREA[cause]].append(at)
        for at, verdict in burnin:
            if verdict == "pass":
                for a in AREAS:
                    resets[a].append(at)
        return cls(sorted(failures), {a: sorted(v) for a, v in evidence.items()},
                   {a: sorted(v) for a, v in resets.items()}, sorted(burnin), sorted(jobs))

    def inputs(self, now: float, p: RiskParams) -> RiskInputs:
        lo, mid = now - p.lookback_days * DAY, now - p.recent_days * DAY
        f = self.failures
        b = self.burnin[bisect_left(self.burnin, (lo,)):bisect_right(self.burnin, (now, "~"))]
        excess: dict[str, float] = {}
        rising = []
        for area, ev in self.evidence.items():
            rs = self.resets.get(area, [])
            i = bisect_right(rs, now)
            start = max(lo, rs[i - 1]) if i else lo  # what a return fixed is history
            times = [t for t, _ in ev]
            by_day = area != "gpu_memory"
            rec_lo = max(mid, start)
            recent = _units(ev, times, rec_lo, now, by_day)
            earlier_days = max(0.0, (rec_lo - start) / DAY)
            earlier = _units(ev, times, start, rec_lo, by_day) if earlier_days else 0.0
            recent_days = (now - rec_lo) / DAY
            rate = earlier / earlier_days if earlier_days >= 1.0 else 0.0
            over = recent - rate * recent_days
            if over > 0:
                excess[area] = over
            if by_day and beyond_chance(int(recent), math.ceil(recent_days), int(earlier),
                                        int(earlier_days)):
                rising.append(area)
            elif not by_day and recent >= RISING_MIN and earlier == 0:
                rising.append(area)  # new lifetime errors: not a steady rate by nature
        return RiskInputs(
            failures=bisect_right(f, now) - bisect_left(f, lo),
            warning_days=excess, rising=tuple(sorted(rising)),
            burnin_flagged=sum(1 for _, v in b if v == "flagged"),
            burnin_failed=sum(1 for _, v in b if v == "failed"),
            failed_jobs=bisect_right(self.failed_jobs, now) - bisect_left(self.failed_jobs, lo))


def returns_of(episodes: Sequence[Any]) -> dict[str, list[tuple[float, str]]]:
    """node -> (returned at, cause) of its episodes that ended: what resets its warnings."""
    out: dict[str, list[tuple[float, str]]] = {}
    for e in episodes:
        if e.returned_at is not None:
            out.setdefault(e.node, []).append((e.returned_at, e.cause))
    return out


def current(h: History, p: RiskParams, now: float) -> dict[str, Risk]:
    """Every known node's risk at ``now`` from a history covering the lookback."""
    from slurmguard.fleet import episodes

    starts: dict[str, list[float]] = {}
    eps = [e for e in episodes.build(h) if e.start <= now]
    for e in eps:
        if e.shared is None:
            starts.setdefault(e.node, []).append(e.start)
    back = returns_of(eps)
    out = {}
    for node in sorted(set(h.first_seen) | set(h.runs)):
        sig = NodeSignals.build(h.runs.get(node, ()), starts.get(node, ()), h.burnin.get(node, ()),
                                back.get(node, ()))
        out[node] = score(sig.inputs(now, p), p)
    return out
