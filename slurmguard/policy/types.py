"""The inputs and outputs of fleet policy: plain frozen data, no I/O.

The store builds :class:`NodeView` objects from its tables; serve builds the topology from
Slurm and config; the policy functions turn them into :class:`Action` objects that serve
carries out through the Slurm adapter and records in the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmguard.contract import Health

HEALTHY = Health.HEALTHY.value
DEGRADED = Health.DEGRADED.value
UNHEALTHY = Health.UNHEALTHY.value
UNSUPPORTED = Health.UNSUPPORTED.value
ERROR = Health.ERROR.value

# A run's health when checks disagree: the worst node verdict wins; a checker error only
# when nothing else was learnt (it never counts as a failure).
_RANK = {UNHEALTHY: 4, DEGRADED: 3, HEALTHY: 2, UNSUPPORTED: 1, ERROR: 0}


def worst_health(healths: list[str]) -> str:
    """The run's health from its results' healths (``error`` only if nothing better)."""
    known = [h for h in healths if h in _RANK]
    if not known:
        return ERROR
    best = max(known, key=lambda h: _RANK[h])
    if best == UNSUPPORTED:  # nothing ran that could judge the node
        return HEALTHY
    return best


@dataclass(frozen=True)
class Sample:
    """One hook run of a node, as policy sees it."""

    at: float
    health: str  # worst health of the run (see worst_health)
    checks: tuple[str, ...] = ()  # names of the run's unhealthy checks
    hook: str = "healthcheck"
    job_id: str | None = None
    # checks of the run that passed (healthy or degraded); None: not known (then a passing
    # run is taken to have passed everything)
    passed: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NodeView:
    """What the store knows about one node within the policy window."""

    name: str
    samples: tuple[Sample, ...] = ()  # oldest first
    foreign_drains: tuple[float, ...] = ()  # drains by admins/Kubernetes/Slurm (times)
    lemon: bool = False
    lemon_reason: str = ""
    burnin_required: bool = False
    probation: bool = False
    probation_passes: int = 0
    reset_at: float | None = None  # an admin/burn-in returned the node: older history is forgiven
    drained: bool | None = None  # Slurm's view (None: unknown)
    ours: bool = False  # Slurm's drain reason starts with "slurmguard:"
    # (cause, from, to) of the fleet alerts (suspect shared causes) that cover this node:
    # failures of that check then are the shared fault's, not the node's (policy/shared.py)
    shared: tuple[tuple[str, float, float], ...] = ()


@dataclass(frozen=True)
class Action:
    """One thing serve should do. ``kind``: drain, lemon, probation_end, alert, refuse."""

    kind: str
    node: str = ""
    source: str = ""  # policy or check name: "lemon", "flapping", "fs-mount"
    reason: str = ""  # full Slurm reason for drains ("slurmguard: lemon: ...")
    scope: str = ""  # for alerts: "partition:gpu", "group:rack1", "fleet"
    nodes: tuple[str, ...] = field(default_factory=tuple)  # for alerts: nodes seen failing
