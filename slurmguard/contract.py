"""What slurmguard owns and reports: one definition of each, imported by every user.

- the **health values** (stable strings: stored, shown, exported as metric labels) and the
  result type every check returns;
- the **drain reason**: ``slurmguard: <source>: <one line>``. The prefix decides what
  slurmguard may undrain (only reasons that start with it, with UNDRAIN), so it is spelled
  here and nowhere else (tests/test_contract.py greps the package for other spellings);
- the **result record's field names** (the JSON a hook run sends to serve);
- the **Kubernetes marks** the reconciler owns on a Node (taint, cordon annotation, condition)
  and the time stamp format they carry.

Standard library only: the hook path imports it.
"""

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

REASON_PREFIX = "slurmguard:"
# `sinfo -R` shows 20 characters by default; Slurm itself accepts far more. 200 keeps a
# reason readable in `scontrol show node` and in the store without truncating useful detail.
REASON_MAX = 200
# The fields of a hook run's record (slurmguard.node.record.make_record writes them, in this
# order; slurmguard.store.records validates them).
RECORD_FIELDS = ("version", "id", "node", "hook", "job_id", "started", "duration", "decision",
                 "results", "slurmguard_version")


class Health(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"  # worth a look, not worth a drain (by default)
    UNHEALTHY = "unhealthy"  # a node fault: drain
    UNSUPPORTED = "unsupported"  # the source does not exist here (no NVML, no IB)
    ERROR = "error"  # the checker itself failed: never a drain


HEALTHS = tuple(h.value for h in Health)  # the stored strings, best to worst is not implied


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
    def from_dict(cls, d: dict[str, Any]) -> "CheckResult":
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


def format_reason(source: str, text: str, limit: int = REASON_MAX) -> str:
    """``slurmguard: <source>: <one line>``, flattened and capped at ``limit`` characters.

    Example: ``format_reason("gpu-xid", "Xid 79 on GPU 3")`` ->
    ``"slurmguard: gpu-xid: Xid 79 on GPU 3"``.
    """
    src = one_line(source, 64) or "unknown"
    return one_line(f"{REASON_PREFIX} {src}: {one_line(text, REASON_MAX)}", min(limit, REASON_MAX))


def is_ours(reason: str | None) -> bool:
    """True when a Slurm reason is one of slurmguard's (the only drains it may clear)."""
    return bool(reason) and reason.startswith(REASON_PREFIX)  # type: ignore[union-attr]


def reason_source(reason: str | None) -> str | None:
    """The source in one of our reasons (``slurmguard: gpu-xid: ...`` -> ``gpu-xid``), else None."""
    if not is_ours(reason):
        return None
    rest = reason[len(REASON_PREFIX):].strip()  # type: ignore[index]
    name, sep, _ = rest.partition(":")
    return name.strip() if sep else None


def reason_text(reason: str) -> str:
    """A reason without the prefix (``slurmguard: lemon: x`` -> ``lemon: x``); others as given."""
    return reason[len(REASON_PREFIX):].strip() if is_ours(reason) else reason


# The owned Kubernetes marks (architecture.md, "Kubernetes view"). Stable strings: they live
# on Nodes; the reconciler clears only a cordon whose annotation says it is ours.
TAINT_KEY = "slurmguard.io/unhealthy"
CORDONED_BY = "slurmguard.io/cordoned-by"
CORDONED_BY_US = "slurmguard"
REASON_ANNOTATION = "slurmguard.io/slurm-reason"
MARKED_AT = "slurmguard.io/marked-at"
CONDITION = "SlurmguardHealthy"


def rfc3339(epoch: float) -> str:
    """The stamp written into ``MARKED_AT`` and the taint's ``timeAdded``: whole seconds, UTC
    (``time``, not ``datetime``: this module is on the hook path)."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
