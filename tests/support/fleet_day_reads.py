"""What the fleet day reads back from serve's store once the day is over: slurmguard's repair
episodes, through the product's one reader of the repair ledger (slurmguard/repair/ledger.py,
the reader `repair status`, `repair history` and `incident show` use), and the predictions
slurmguard made (the risk score's flags as serve would have raised them at each tick, a job's
slow-node suspicion, a node put on probation). What Slurm did (its node states over time) is
sampled by the day itself (support/fleet_day.py) and stays the ground truth of every arm.
"""

from __future__ import annotations

from typing import Any

from slurmguard.repair import ledger as repair_ledger


def repairs(store: Any, since: float) -> list[Any]:
    """slurmguard's drain episodes since ``since`` and what repair did in each."""
    rows = store.nodes.events(since=since, kinds=list(repair_ledger.KINDS), limit=100000)
    return repair_ledger.episodes(rows)


def policy_predictions(store: Any, since: float) -> list[tuple[str, str, float]]:
    """A job's slow-node report and a node put on probation, as (source, node, at)."""
    names = {"suspect": "slow-node suspicion", "probation_start": "probation"}
    rows = store.nodes.events(since=since, kinds=list(names), limit=100000)
    return [(names[e.kind], e.node, e.at) for e in sorted(rows, key=lambda e: e.at)]


def risk_flags(store: Any, t0: float, t_end: float, tick: float,
               missed: list[str]) -> list[tuple[str, str, float]]:
    """The node risk score's flag (score >= risk.level) as serve would have computed it at
    each tick of the day, from the store as it was then: ("risk", node, first time). A tick
    the store could not answer is appended to ``missed`` (the day's figures stand without it)."""
    from slurmguard.errors import SlurmguardError
    from slurmguard.fleet.params import RiskParams
    from slurmguard.store.fleet import node_risks

    p, first = RiskParams(), {}
    steps = max(1, min(60, int((t_end - t0) / max(tick, 1.0))))
    for i in range(1, steps + 1):
        at = t0 + (t_end - t0) * i / steps
        try:
            scores = node_risks(store.engine, p, now=at)
        except SlurmguardError as exc:
            missed.append(f"risk at {at - t0:.0f}s: {exc}")
            continue
        for n, r in scores.items():
            if r.score >= p.level:
                first.setdefault(n, at)
    return [("risk", n, at) for n, at in first.items()]
