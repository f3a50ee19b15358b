"""The node risk score judged with the one scorer (slurmguard/fleet/scoring.py) on a fleet of
either generator: the tests, tests/bench/bench_prediction.py and the figures of
docs/fleet.md all measure through here.

    case = make_case("blind", seed=11, path=tmp / "fleet.db")
    figures = judge(case, RiskParams())     # precision, recall, recall_ahead, lead ...

fleetgen.py: every failure in the window counts for recall (its planted degrading nodes and
lemons among them, and its random failures that nothing can foresee). fleetgen_blind.py:
recall over the predictable failures (those with a precursor), the scored window being its
last 30 days.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmguard.fleet import episodes, scoring
from slurmguard.fleet.history import History
from slurmguard.fleet.params import RiskParams
from slurmguard.fleet.replay import risk_flags
from slurmguard.store import Store
from slurmguard.store.fleet import load_history

DAY = 86400.0
# Seeds: the score's choices were made on TUNING; the tests judge on JUDGED.
TUNING = {"fleetgen": tuple(range(101, 109)) + tuple(range(201, 207)), "blind": (1, 2, 3, 4)}
JUDGED = {"fleetgen": (301, 302, 303), "blind": (11, 12, 13)}
# The default level's rule (docs/fleet.md, "How the default level was chosen"): the lowest
# level of the curve whose precision is at least this on every TUNING seed of each generator.
LEVEL_FLOORS = {"fleetgen": 0.6, "blind": 0.5}


@dataclass
class Case:
    generator: str
    seed: int
    history: History
    eps: list
    failures: dict[str, list[tuple[float, float]]]
    among: set[tuple[str, float]] | None
    truth: Any


def make_case(generator: str, seed: int, path: Path | str, *, nodes: int = 2000,
              days: int = 60) -> Case:
    if generator == "blind":
        from support.fleetgen_blind import generate
    else:
        from support.fleetgen import generate
    truth = generate(str(path), nodes=nodes, days=days, seed=seed)
    store = Store.open(url=f"sqlite:///{path}")
    try:
        h = load_history(store.engine, since=truth.since, until=truth.until, lookback=30 * DAY,
                         healthy=False)
    finally:
        store.close()
    eps = episodes.build(h)
    fails = scoring.failures_of(eps, h.until)
    among = None
    if generator == "blind":
        # an episode starts at the generator's failure (its failing run)
        among = {(f.node, f.start) for f in truth.predictable()}
    return Case(generator, seed, h, eps, fails, among, truth)


def judge(case: Case, rp: RiskParams) -> dict[str, Any]:
    flags = risk_flags(case.history, case.eps, rp)
    out = scoring.score(flags, case.failures, case.history.since, case.history.until,
                        rp.horizon_days * DAY, among=case.among)
    out["nodes_flagged"] = len(flags)
    if case.generator == "blind":
        out["benign_flagged"] = len(set(flags) & set(case.truth.benign))
    return out


def level_rule(rows: list[dict[str, Any]]) -> float | None:
    """The lowest level whose every row (one per generator, seed and level) meets its
    generator's floor in LEVEL_FLOORS; a seed with no flag at a level fails it."""
    ok: dict[float, bool] = {}
    for r in rows:
        p = r["precision"]
        ok[r["level"]] = ok.get(r["level"], True) and p is not None and \
            p >= LEVEL_FLOORS[r["generator"]]
    good = sorted(lv for lv, v in ok.items() if v)
    return good[0] if good else None


def line(name: str, rows: list[dict[str, Any]]) -> str:
    """One published line: precision / recall / ahead / median lead per seed."""
    def col(key: str, fmt: str) -> str:
        return " / ".join("-" if r[key] is None else fmt.format(r[key]) for r in rows)
    return (f"{name}: precision {col('precision', '{:.2f}')}, recall {col('recall', '{:.2f}')}, "
            f"a day ahead {col('recall_ahead', '{:.2f}')}, median lead "
            f"{col('lead_days_median', '{:.1f}')} days")
