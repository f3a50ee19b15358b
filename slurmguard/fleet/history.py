"""What the fleet figures, the risk score and replay read: the store's history as plain data.

``slurmguard.store.fleet.load_history`` fills a :class:`History`; everything in
``slurmguard/fleet/`` is a pure function of it (and of config), so tests hand-build one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    """One hook run. ``checks``: its unhealthy checks; ``warnings``: its degraded checks;
    ``counts``: (check, number) where a check's details carry a count the risk score reads
    (gpu-ecc: lifetime uncorrectable ECC errors, summed over the GPUs; gpu-remap: rows
    remapped since the check's previous reading)."""

    at: float
    health: str
    hook: str = "healthcheck"
    job_id: str | None = None
    checks: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    counts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Ev:
    """One event of the drain ledger (drain, clear, drain_refused, lemon, probation_start, ...)."""

    at: float
    kind: str
    actor_kind: str  # slurmguard, admin, kubernetes, slurm
    source: str = ""  # the check or policy behind it
    reason: str = ""
    actor: str = ""  # who: "slurmguard", an admin's name, ... (incidents show it)


@dataclass(frozen=True)
class Alert:
    """One fleet alert of the blast-radius guard (a suspected shared cause)."""

    opened: float
    updated: float
    closed: float | None
    cause: str
    scope: str
    nodes: frozenset[str]


@dataclass
class History:
    """The fleet's history over [since, until] (and the lookback before ``since``)."""

    since: float
    until: float
    first_seen: dict[str, float] = field(default_factory=dict)  # every known node
    runs: dict[str, list[Run]] = field(default_factory=dict)  # per node, oldest first
    events: dict[str, list[Ev]] = field(default_factory=dict)  # per node, oldest first
    alerts: list[Alert] = field(default_factory=list)
    burnin: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # (at, verdict)
    # Healthy runs as times only (millions of them in a fleet month; replay's lemon and
    # flapping rules need them, the figures do not), and passing epilogs of jobs (probation).
    healthy: dict[str, list[float]] = field(default_factory=dict)
    passes: dict[str, list[float]] = field(default_factory=dict)
    # node -> its Slurm partitions (the guard's partition scopes). The store does not hold
    # them: the caller hands in Slurm's current view (`policy replay` asks Slurm); empty when
    # unknown, and replay then counts the fleet and policy.groups only.
    partitions: dict[str, tuple[str, ...]] = field(default_factory=dict)
