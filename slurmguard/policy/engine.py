"""One policy pass: what serve should do about a set of nodes now. Pure.

    plan(views, now, params, fleet_rate=..., slurm=...) -> [Action]

Actions, in order: ``lemon`` (mark the node a lemon in the store), ``probation_end`` (M
passing jobs done), ``drain`` (wanted: serve carries each out through
:func:`slurmguard.drainguard.guarded_drain`, so the one blast-radius guard and its ledger
decide whether it happens, as for every other drain path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurmguard.contract import REASON_PREFIX
from slurmguard.policy.blast import DrainRequest
from slurmguard.policy.lemon import lemon_verdict, top_checks
from slurmguard.policy.params import PolicyParams
from slurmguard.policy.types import Action, NodeView


@dataclass(frozen=True)
class SlurmState:
    drained: bool
    ours: bool  # the drain reason starts with "slurmguard:"
    down: bool = False


def plan(views: Mapping[str, NodeView], now: float, p: PolicyParams, *,
         fleet_rate: float | None = None,
         slurm: Mapping[str, SlurmState] | None = None) -> list[Action]:
    """The actions for these nodes. ``slurm`` is Slurm's view (missing node: unknown, no drain)."""
    slurm = slurm or {}
    actions: list[Action] = []
    requests: list[DrainRequest] = []
    for name in sorted(views):
        v = views[name]
        reason = v.lemon_reason
        if not v.lemon:
            verdict = lemon_verdict(v, now, p, fleet_rate)
            if verdict is not None:
                reason = verdict.reason
                actions.append(Action("lemon", node=name, source=verdict.source, reason=reason))
        if v.lemon or reason:
            st = slurm.get(name)
            # Drain (again) a lemon that runs jobs: after an admin's plain undrain, or after its
            # own healthcheck cleared the check's drain. Never a DOWN node, never over a drain
            # set by someone else (theirs stands; ours already says enough).
            if st is not None and not st.down and not st.drained:
                # The guard's cause is the failing check (what a shared fault would share).
                cause = top_checks(v, now, p.window, 1) or "lemon"
                requests.append(DrainRequest(name, cause, reason or f"{REASON_PREFIX} lemon: flagged"))
        elif v.probation and v.probation_passes >= p.probation_jobs:
            actions.append(Action("probation_end", node=name, source="probation",
                                  reason=f"passed {v.probation_passes} jobs"))
    actions += [Action("drain", node=r.node, source=r.cause, reason=r.reason) for r in requests]
    return actions
