"""The two views the reconciler compares, built from what each side returned (pure).

:class:`SlurmView` comes from the Slurm adapter's ``NodeInfo``; :class:`KubeView` from a raw
Node object (the JSON dict the API server sent). Both are plain frozen values so the planner
is a pure function that tests build by hand. Names: the Kubernetes side is keyed by the
*Slurm* name after :func:`map_kube_names` applied the configured mapping.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurmguard.contract import (
    CONDITION,
    CORDONED_BY,
    CORDONED_BY_US,
    MARKED_AT,
    REASON_PREFIX,
    TAINT_KEY,
)

K8S_REASON_PREFIX = f"{REASON_PREFIX} k8s:"


def parse_time(text: str | None, *, local: bool = False) -> float | None:
    """RFC 3339 (Kubernetes) or Slurm's local ``2026-12-02T15:30:00`` -> epoch seconds."""
    if not text or text in ("Unknown", "None"):
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None and not local:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()  # a naive time is local time: how Slurm prints ReasonTime


@dataclass(frozen=True)
class SlurmView:
    """A Slurm node as the reconciler sees it."""

    name: str
    state: str = "idle"  # base state, lower case
    flags: frozenset[str] = frozenset()
    reason: str = ""
    reason_time: float | None = None  # epoch seconds the reason was set, None if unknown
    partitions: tuple[str, ...] = ()

    @property
    def down(self) -> bool:
        """DOWN in Slurm. NOT_RESPONDING alone is not down: every UNDRAIN (ours included) and
        a slurmctld restart set it until the node's next ping answer, which can be a third of
        SlurmdTimeout away; a slurmd that stays silent turns DOWN after SlurmdTimeout, and is
        mirrored then. Mirroring the flag itself would cordon a node we just healed."""
        return self.state == "down"

    @property
    def bad(self) -> bool:
        """Drained, draining, down or failed: Kubernetes should keep work off it too."""
        return self.down or "DRAIN" in self.flags or "FAIL" in self.flags or self.state == "fail"

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def from_k8s(self) -> bool:
        """Drained by the reconciler itself because of Kubernetes (never echoed back)."""
        return self.drained and self.reason.startswith(K8S_REASON_PREFIX)

    def summary(self) -> str:
        state = "+".join([self.state, *sorted(f.lower() for f in self.flags)])
        return f"{state} ({self.reason})" if self.reason else state


def slurm_view(info: Any) -> SlurmView:
    """Build a :class:`SlurmView` from the Slurm adapter's ``NodeInfo``."""
    return SlurmView(name=info.name, state=str(info.state).lower(),
                     flags=frozenset(str(f).upper() for f in info.flags),
                     reason=info.reason or "",
                     reason_time=parse_time(getattr(info, "reason_time", "") or "", local=True),
                     partitions=tuple(getattr(info, "partitions", ()) or ()))


@dataclass(frozen=True)
class KubeView:
    """A Kubernetes Node as the reconciler sees it."""

    name: str  # the Node's own name
    unschedulable: bool = False
    cordoned_by_us: bool = False
    our_taint: str | None = None  # value of our taint, None when absent
    ready: str = "True"  # "True" / "False" / "Unknown" / "" (no Ready condition yet)
    ready_since: float | None = None  # lastTransitionTime of Ready
    conditions: Mapping[str, str] = field(default_factory=dict)  # type -> status
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    our_condition: str = ""  # status of SlurmguardHealthy ("" absent)
    resource_version: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def marked(self) -> bool:
        """Carries one of our marks."""
        return self.our_taint is not None or self.cordoned_by_us

    @property
    def marked_at(self) -> float | None:
        return parse_time(self.annotations.get(MARKED_AT))

    @property
    def cordoned_by_others(self) -> bool:
        return self.unschedulable and not self.cordoned_by_us

    def summary(self) -> str:
        parts = ["Ready" if self.ready == "True" else f"Ready={self.ready or '?'}"]
        if self.unschedulable:
            parts.append("cordoned" + ("(ours)" if self.cordoned_by_us else ""))
        if self.our_taint is not None:
            parts.append(f"tainted({self.our_taint})")
        parts += [t for t, s in sorted(self.conditions.items())
                  if s == "True" and t not in ("Ready", CONDITION)
                  and not t.endswith("Pressure") and t != "NetworkUnavailable"]
        return ",".join(parts)


def kube_view(obj: Mapping[str, Any]) -> KubeView:
    """Build a :class:`KubeView` from a raw Node object (as JSON from the API server)."""
    md = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = dict(md.get("annotations") or {})
    conds = {c.get("type", ""): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    ready = conds.get("Ready") or {}
    taint = next((t for t in spec.get("taints") or []
                  if isinstance(t, dict) and t.get("key") == TAINT_KEY), None)
    return KubeView(
        name=md.get("name", ""),
        unschedulable=bool(spec.get("unschedulable")),
        cordoned_by_us=bool(spec.get("unschedulable")) and annotations.get(CORDONED_BY) == CORDONED_BY_US,
        our_taint=None if taint is None else str(taint.get("value") or ""),
        ready=str(ready.get("status", "")),
        ready_since=parse_time(ready.get("lastTransitionTime")),
        conditions={t: str(c.get("status", "")) for t, c in conds.items()},
        labels=dict(md.get("labels") or {}),
        annotations=annotations,
        our_condition=str((conds.get(CONDITION) or {}).get("status", "")),
        resource_version=str(md.get("resourceVersion", "")),
        raw=obj,
    )


@dataclass(frozen=True)
class NameMapping:
    """How a Node's name maps to a Slurm node name."""

    mode: str = "same"  # same | label | pattern
    label: str = ""
    pattern: str = ""

    def slurm_name(self, view: KubeView) -> str | None:
        if self.mode == "label":
            return view.labels.get(self.label) or None
        if self.mode == "pattern":
            m = re.fullmatch(self.pattern, view.name)
            if not m:
                return None
            return m.groupdict().get("name") or (m.group(1) if m.groups() else m.group(0))
        return view.name


def map_kube_names(views: Iterable[KubeView], mapping: NameMapping
                   ) -> tuple[dict[str, KubeView], list[str]]:
    """Key Node views by Slurm name; returns (mapped, Node names that map to nothing)."""
    out: dict[str, KubeView] = {}
    unmapped: list[str] = []
    clashed: set[str] = set()
    for v in views:
        name = mapping.slurm_name(v)
        if name is None or name in clashed:
            unmapped.append(v.name)
        elif name in out:  # two Nodes claiming one Slurm node: act on neither
            clashed.add(name)
            unmapped += [out.pop(name).name, v.name]
        else:
            out[name] = v
    return out, unmapped
