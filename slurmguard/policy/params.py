"""Policy parameters, read once from the ``[policy]`` config section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PolicyParams:
    window: float = 3600.0
    lemon_failures: int = 3
    lemon_rate_factor: float = 5.0
    lemon_rate_min_runs: int = 10
    lemon_rate_floor: float = 0.5
    flap_transitions: int = 4
    burnin_after_lemon: bool = True
    blast_window: float = 3600.0
    blast_max_nodes: int = 50
    blast_max_percent: float = 10.0
    groups: Mapping[str, str] = field(default_factory=dict)  # name -> NodeSet pattern
    probation_jobs: int = 3

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> PolicyParams:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in section.items() if k in names})


def human_window(seconds: float) -> str:
    """3600 -> "1h", 5400 -> "90m", 86400 -> "1d", 45 -> "45s"."""
    s = int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"
