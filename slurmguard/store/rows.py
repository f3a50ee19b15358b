"""The plain rows the store API returns (frozen dataclasses), and actor parsing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurmguard.errors import InputError
from slurmguard.store.models import ACTORS


@dataclass(frozen=True)
class NodeSummary:
    name: str
    last_seen: float | None
    last_health: str | None
    last_hook: str | None
    last_reason: str | None
    failing_checks: tuple[str, ...]  # unhealthy checks of the node's last run
    failures: int  # unhealthy runs within the summary window (default 7 days)
    lemon: bool
    lemon_reason: str | None
    burnin_required: bool
    probation: bool
    probation_passes: int


@dataclass(frozen=True)
class TimelineItem:
    at: float
    node: str
    kind: str  # "result" or an event kind (drain, clear, lemon, ...)
    health: str  # a run's health; "" for events
    actor: str  # "" for results; "slurmguard", "admin:alice", "kubernetes", "slurm"
    source: str  # hook name for results; check/policy name for events
    reason: str
    checks: tuple[str, ...] = ()  # unhealthy checks of a run


@dataclass(frozen=True)
class EventRow:
    id: int
    at: float
    node: str
    kind: str
    actor_kind: str
    actor: str
    source: str
    reason: str
    details: dict[str, Any]

    @property
    def who(self) -> str:
        return self.actor_kind if self.actor == self.actor_kind else f"{self.actor_kind}:{self.actor}"


@dataclass(frozen=True)
class AlertRow:
    id: int
    opened: float
    updated: float
    closed: float | None
    cause: str
    scope: str
    nodes: str
    count: int
    message: str


def parse_actor(actor: str) -> tuple[str, str]:
    """``"admin:alice"`` -> ("admin", "alice"); ``"slurmguard"`` -> ("slurmguard", "slurmguard")."""
    kind, _, name = actor.partition(":")
    if kind not in ACTORS:
        raise InputError(f"actor: expected one of {', '.join(ACTORS)} (admin:NAME), got {actor!r}")
    name = name.strip() or kind
    if len(name) > 128 or not name.isprintable():
        raise InputError(f"actor: not a printable name of at most 128 characters: {actor!r}")
    return kind, name


def _who(kind: str, name: str) -> str:
    return kind if name == kind else f"{kind}:{name}"


def _alert_row(a: Any) -> AlertRow:
    return AlertRow(a.id, a.opened, a.updated, a.closed, a.cause, a.scope, a.nodes, a.count, a.message)
