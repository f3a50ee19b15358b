"""The result type every check returns, and the health values (stable strings, stored)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple


class Health(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"  # worth a look, not worth a drain (by default)
    UNHEALTHY = "unhealthy"  # a node fault: drain
    UNSUPPORTED = "unsupported"  # the source does not exist here (no NVML, no IB)
    ERROR = "error"  # the checker itself failed: never a drain


class CheckResult(NamedTuple):
    """One check's verdict. ``reason`` is one line, empty when healthy."""

    name: str
    health: Health
    reason: str = ""
    details: Mapping[str, Any] = MappingProxyType({})  # read-only; checks pass their own
    duration: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "health": self.health.value,
            "reason": self.reason,
            "details": dict(self.details),
            "duration": round(self.duration, 4),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            name=str(d["name"]),
            health=Health(d["health"]),
            reason=str(d.get("reason", "")),
            details=dict(d.get("details") or {}),
            duration=float(d.get("duration", 0.0)),
        )


def healthy(name: str, **details: Any) -> CheckResult:
    return CheckResult(name, Health.HEALTHY, "", details)


def unhealthy(name: str, reason: str, **details: Any) -> CheckResult:
    return CheckResult(name, Health.UNHEALTHY, one_line(reason), details)


def degraded(name: str, reason: str, **details: Any) -> CheckResult:
    return CheckResult(name, Health.DEGRADED, one_line(reason), details)


def unsupported(name: str, reason: str, **details: Any) -> CheckResult:
    return CheckResult(name, Health.UNSUPPORTED, one_line(reason), details)


def error(name: str, reason: str, **details: Any) -> CheckResult:
    return CheckResult(name, Health.ERROR, one_line(reason), details)


def one_line(text: str, limit: int = 200) -> str:
    """Collapse whitespace and control characters to one printable line of at most limit."""
    cleaned = "".join(ch if ch.isprintable() else " " for ch in str(text))
    cleaned = " ".join(cleaned.split())
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 3] + "..."
    return cleaned
